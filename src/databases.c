/*-------------------------------------------------------------------------
 *
 * databases.c
 *	  What a backend's commands mean to the relays of other databases: the
 *	  relays step out of the way of DROP DATABASE, ALTER DATABASE ... RENAME
 *	  and ... SET TABLESPACE, and CREATE DATABASE ... TEMPLATE of their
 *	  database; the launcher hears of new, changed and dropped databases and
 *	  of CREATE EXTENSION grelout.
 *
 * Those commands fail while another session is connected to the database
 * (PostgreSQL waits about 5 s for it to leave, then errors).  Before one
 * runs, the utility hook (hooks.c, databases_before_utility) records the
 * database in shared memory ("aside"), which keeps the launcher from
 * starting relays there, sends each relay of the database SIGTERM (its own
 * stop: requests in flight get a short grace period, the unfinished claims
 * are handed back) and waits, a bounded time, for them to exit.  When the command's transaction ends, committed
 * or not, the entry goes and the launcher looks again: the relays come
 * back (in the renamed database, in the template that was copied) or not
 * (the database was dropped).
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <signal.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "hooks.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "shmem.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* Longest wait for the relays to leave (they need about 2 s at most). */
#define ASIDE_WAIT_MS			15000

/* This backend's transaction holds aside entries. */
static bool holds_asides = false;
/* At the end of the transaction: tell the launcher to rescan. */
static bool rescan_at_end = false;
/* At commit: the extension may have been created in this database. */
static bool extension_at_commit = false;

/* option_named: the option called name among a statement's, or NULL. */
static DefElem *
option_named(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst_node(DefElem, lc);

		if (strcmp(opt->defname, name) == 0)
			return opt;
	}
	return NULL;
}

/*
 * aside_target: the database whose relays must leave before this command
 * runs, by name; NULL for any other command.  *copy says the command
 * copies it (CREATE DATABASE ... TEMPLATE), which another role than its
 * owner may do.
 */
static const char *
aside_target(Node *parsetree, bool *copy)
{
	*copy = false;
	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			return ((DropdbStmt *) parsetree)->dbname;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				return ((RenameStmt *) parsetree)->subname;
			return NULL;
		case T_AlterDatabaseStmt:
			if (option_named(((AlterDatabaseStmt *) parsetree)->options, "tablespace"))
				return ((AlterDatabaseStmt *) parsetree)->dbname;
			return NULL;
		case T_CreatedbStmt:
			{
				DefElem    *t = option_named(((CreatedbStmt *) parsetree)->options,
											 "template");

				/* createdb's default */
				*copy = true;
				return (t && t->arg) ? defGetString(t) : "template1";
			}
		default:
			return NULL;
	}
}

/* changes_databases: may this command change what the launcher serves? */
static bool
changes_databases(Node *parsetree)
{
	switch (nodeTag(parsetree))
	{
		case T_CreatedbStmt:
		case T_DropdbStmt:
		case T_AlterDatabaseStmt:
			return true;
		case T_RenameStmt:
			return ((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE;
		default:
			return false;
	}
}

/*
 * may_run: could this role run the command on the database, by the checks
 * PostgreSQL makes (its owner, or a superuser; to copy it, a role with
 * CREATEDB, and its owner unless it is a template)?  A role that could not
 * does not get to stop its relays.
 */
static bool
may_run(Oid dboid, bool copy)
{
	HeapTuple	tup;
	bool		is_template;

	if (grelout_database_ownercheck(dboid, GetUserId()))
		return !copy || have_createdb_privilege();
	if (!copy || !have_createdb_privilege())
		return false;
	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
	if (!HeapTupleIsValid(tup))
		return false;
	is_template = ((Form_pg_database) GETSTRUCT(tup))->datistemplate;
	ReleaseSysCache(tup);
	return is_template;
}

/* relays_in: is a relay of the database starting or running? */
static bool
relays_in(Oid dboid, int *signalled, int *nsignalled, int maxsignalled)
{
	bool		busy = false;

	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];
		bool		in;
		int			pid;
		bool		sent = false;

		SpinLockAcquire(&slot->mutex);
		in = slot->dboid == dboid &&
			(slot->state == SLOT_STARTING || slot->state == SLOT_RUNNING);
		pid = slot->pid;
		SpinLockRelease(&slot->mutex);
		if (!in)
			continue;
		busy = true;
		if (pid == 0)
			continue;			/* it sees the aside entry when it starts */

		/*
		 * One SIGTERM a relay: a second would cancel the settle in which
		 * it hands its claims back.
		 */
		for (int k = 0; k < *nsignalled; k++)
			if (signalled[k] == pid)
				sent = true;
		if (!sent && *nsignalled < maxsignalled)
		{
			kill(pid, SIGTERM);
			signalled[(*nsignalled)++] = pid;
		}
	}
	return busy;
}

/* What take_aside did. */
typedef enum AsideTaken
{
	ASIDE_TAKEN,				/* took an entry, cleared at transaction end */
	ASIDE_HELD,					/* this backend holds one for the database */
	ASIDE_FULL					/* none free for this role */
} AsideTaken;

/*
 * take_aside: record, in shared memory, that this backend's command wants
 * the relays out of database dboid, under the rules of shmem.h
 * (GreloutAside): one entry a backend and database; for a role that is not
 * a superuser (admin false), at most GRELOUT_ASIDE_PER_ROLE and none of
 * the entries reserved for superusers.
 */
static AsideTaken
take_aside(Oid dboid, bool admin)
{
	Oid			roleid = GetUserId();
	int			free_entry = -1;
	int			nfree = 0;
	int			nrole = 0;
	AsideTaken	result = ASIDE_FULL;

	SpinLockAcquire(&grelout_shared->mutex);
	for (int i = 0; i < GRELOUT_MAX_ASIDE; i++)
	{
		GreloutAside *a = &grelout_shared->asides[i];

		if (!OidIsValid(a->dboid))
		{
			nfree++;
			if (free_entry < 0)
				free_entry = i;
		}
		else if (a->dboid == dboid && a->pid == MyProcPid)
			result = ASIDE_HELD;
		else if (a->roleid == roleid)
			nrole++;
	}
	if (result != ASIDE_HELD && free_entry >= 0 &&
		(admin || (nfree > GRELOUT_ASIDE_RESERVED &&
				   nrole < GRELOUT_ASIDE_PER_ROLE)))
	{
		GreloutAside *a = &grelout_shared->asides[free_entry];

		a->dboid = dboid;
		a->roleid = roleid;
		a->pid = MyProcPid;
		a->pgprocno = grelout_procno(MyProc);
		result = ASIDE_TAKEN;
	}
	SpinLockRelease(&grelout_shared->mutex);
	return result;
}

/*
 * step_aside: ask the relays of the database to leave, keep the launcher
 * from starting them again until this transaction ends, and wait (at most
 * ASIDE_WAIT_MS, cancellable) for them to be gone.  A role that is not a
 * superuser does so only for a database the relays serve (take_aside says
 * why).
 */
static void
step_aside(const char *dbname, bool copy)
{
	Oid			dboid = get_database_oid(dbname, true);
	bool		admin;
	int			signalled[GRELOUT_MAX_RELAYS];
	int			nsignalled = 0;
	TimestampTz deadline;

	if (!OidIsValid(dboid) || grelout_shared == NULL || !may_run(dboid, copy))
		return;

	/* an administrator always gets the relays out; others only from ours */
	admin = superuser();
	if (!admin && !grelout_database_served(dboid))
		return;

	switch (take_aside(dboid, admin))
	{
		case ASIDE_TAKEN:
			holds_asides = true;
			rescan_at_end = true;
			break;
		case ASIDE_HELD:
			break;
		case ASIDE_FULL:
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("grelout could not ask the relays to leave database \"%s\": too many such commands at once",
							dbname),
					 errhint("Run the command again once other sessions' commands on databases have ended.")));
			return;
	}

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ASIDE_WAIT_MS);
	while (relays_in(dboid, signalled, &nsignalled, lengthof(signalled)) &&
		   GetCurrentTimestamp() < deadline)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * databases_before_utility: before a command that needs a database free of
 * other sessions, the relays leave it (hooks.c calls it before every
 * utility command).
 */
void
databases_before_utility(Node *parsetree)
{
	bool		copy;
	const char *aside = aside_target(parsetree, &copy);

	if (aside != NULL)
		step_aside(aside, copy);
}

/*
 * databases_after_utility: after a command that changes the databases, the
 * launcher is told when the transaction ends (hooks.c calls it after every
 * utility command that did not fail).
 */
void
databases_after_utility(Node *parsetree)
{
	if (changes_databases(parsetree))
		rescan_at_end = true;
}

/*
 * grelout_extension_created: the install script runs in this transaction
 * (CREATE EXTENSION grelout, directly, by CASCADE or from a restore): once
 * it commits, the launcher serves this database.
 */
void
grelout_extension_created(void)
{
	extension_at_commit = true;
}

/* clear_asides: this backend's entries go; the relays may come back. */
static void
clear_asides(void)
{
	SpinLockAcquire(&grelout_shared->mutex);
	for (int i = 0; i < GRELOUT_MAX_ASIDE; i++)
	{
		GreloutAside *a = &grelout_shared->asides[i];

		if (OidIsValid(a->dboid) && a->pid == MyProcPid)
			a->dboid = InvalidOid;
	}
	SpinLockRelease(&grelout_shared->mutex);
	holds_asides = false;
}

/*
 * databases_at_xact_end: at the end of the transaction (committed, aborted
 * or prepared), clear the aside entries and tell the launcher what
 * changed, and the relays of this database that the extension is here
 * (hooks.c calls it at every transaction event).
 */
void
databases_at_xact_end(XactEvent event)
{
	bool		committed;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			break;
		default:
			return;
	}
	if (!holds_asides && !rescan_at_end && !extension_at_commit)
		return;
	committed = (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT);
	/* the rescan is asked for before the entries go (see the launcher) */
	grelout_wake_launcher(rescan_at_end,
						  (committed && extension_at_commit) ? MyDatabaseId : InvalidOid);
	if (holds_asides)
	{
		clear_asides();
		grelout_wake_launcher(false, InvalidOid);
	}
	/* relays waiting for CREATE EXTENSION here deliver at once */
	if (committed && extension_at_commit)
		grelout_wake_relays();
	rescan_at_end = false;
	extension_at_commit = false;
}
