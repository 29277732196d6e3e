/*-------------------------------------------------------------------------
 *
 * hooks.h
 *	  The backend hooks grelout installs (hooks.c) and what each module
 *	  does in them: databases.c around a utility command and at the end of
 *	  a transaction, publish.c after COMMIT PREPARED and at commit.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_HOOKS_H
#define GRELOUT_HOOKS_H

#include "grelout.h"

#include "access/xact.h"
#include "nodes/nodes.h"

/* hooks.c */
extern void grelout_hooks_install(void);

/* databases.c */
extern void databases_before_utility(Node *parsetree);
extern void databases_after_utility(Node *parsetree);
extern void databases_at_xact_end(XactEvent event);

/* publish.c */
extern void publish_after_utility(Node *parsetree);
extern void publish_at_xact_end(XactEvent event);

#endif							/* GRELOUT_HOOKS_H */
