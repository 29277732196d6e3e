/*-------------------------------------------------------------------------
 *
 * hooks.c
 *	  The backend hooks of grelout, installed once at preload: one
 *	  ProcessUtility hook and one transaction callback, each dispatching,
 *	  in a fixed order, to the modules that need them.
 *
 * Around a utility command:
 *	1. databases.c, before it runs: the relays of a database that DROP
 *	   DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE or CREATE
 *	   DATABASE ... TEMPLATE needs free step aside;
 *	2. the command itself (the previous hook, or PostgreSQL's);
 *	3. publish.c, after it: COMMIT PREPARED made a prepared transaction's
 *	   messages visible, so the relays are woken;
 *	4. databases.c, after it: a command that changes the databases has the
 *	   launcher told when the transaction ends.
 * A command that fails skips 3 and 4, as it skips what follows it.
 *
 * At the end of a transaction (commit, abort or prepare), databases.c
 * first (the aside entries go, the launcher is told what changed), then
 * publish.c (the relays are woken after a commit that published).
 *
 * None of them runs SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "hooks.h"

#include "tcop/utility.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

/* grelout_process_utility: the ProcessUtility hook, as described above. */
static void
grelout_process_utility(PlannedStmt *pstmt, const char *queryString,
						bool readOnlyTree, ProcessUtilityContext context,
						ParamListInfo params, QueryEnvironment *queryEnv,
						DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	databases_before_utility(parsetree);

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	publish_after_utility(parsetree);
	databases_after_utility(parsetree);
}

/* grelout_xact_callback: the transaction callback, as described above. */
static void
grelout_xact_callback(XactEvent event, void *arg)
{
	databases_at_xact_end(event);
	publish_at_xact_end(event);
}

/* grelout_hooks_install: called once, from _PG_init at preload. */
void
grelout_hooks_install(void)
{
	RegisterXactCallback(grelout_xact_callback, NULL);
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = grelout_process_utility;
}
