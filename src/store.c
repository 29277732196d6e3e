/*-------------------------------------------------------------------------
 *
 * store.c
 *	  What every cycle of a relay asks of the database before its
 *	  statements: which grelout schema is installed, and the lock that
 *	  orders the cycle's writes.
 *
 * The relay's statements live by table concern: routing.c routes new
 * messages, claim.c claims deliveries, settle.c settles, finalizes, purges
 * and recovers leases, handler_health.c reads and writes the handlers'
 * stored breakers; spi_helpers.c holds what they all go through.  store.h
 * declares them for the relay.
 *
 * The library serves both schemas: store_schema reads the installed
 * version every cycle, and each function takes it, running the 1.0
 * statements (a handler per topic, every delivery inline in its outbox
 * row) on a 1.0 schema and the 1.1 ones (routing; inline deliveries for
 * messages routed to one handler, grelout.fanout rows for several) on 1.1.
 *
 *-------------------------------------------------------------------------
 */
#include "store.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

/*
 * store_schema: which grelout schema this database has, as the catalog
 * reads now (read every cycle: after ALTER EXTENSION grelout UPDATE
 * commits, the next cycle runs the 1.1 statements).  One index lookup, as
 * get_extension_oid does.
 */
StoreSchema
store_schema(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	StoreSchema result = STORE_SCHEMA_NONE;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("grelout"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		result = STORE_SCHEMA_1_2;
		if (!isnull && strcmp(TextDatumGetCString(d), "1.0") == 0)
			result = STORE_SCHEMA_1_0;
		else if (!isnull && strcmp(TextDatumGetCString(d), "1.1") == 0)
			result = STORE_SCHEMA_1_1;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * store_lock_outbox: lock grelout.outbox for the cycle's writes, first of
 * the extension's tables, so that a cycle takes its locks in one order
 * whatever its statements: the outbox, then the handlers and the fan-out
 * rows.  Without it a cycle with nothing to settle read the handlers (to
 * share the claim's slots out) before routing locked the outbox, and a
 * concurrent "TRUNCATE grelout.outbox, grelout.handlers" could deadlock
 * with it.
 */
void
store_lock_outbox(void)
{
	LockRelationOid(store_relid("outbox"), RowExclusiveLock);
}
