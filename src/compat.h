/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions grelout builds
 *	  on, in one place: 15, 16, 17, 18 and 19.  Each wrapper names the
 *	  release that changed the API.  The logic files call these and never
 *	  test PG_VERSION_NUM themselves.
 *
 *	  Checked and found unchanged for grelout's use from 15 to 19:
 *	  shmem_request_hook (15), bgworker registration and start times,
 *	  BackgroundWorkerInitializeConnection[ByOid] flags (17 added
 *	  BGWORKER_BYPASS_ROLELOGINCHECK, 19 BGWORKER_INTERRUPTIBLE: grelout
 *	  uses neither and keeps its own handling of CREATE/DROP DATABASE),
 *	  pgstat_report_stat/activity/appname, GetNamedLWLockTranche,
 *	  RequestNamedLWLockTranche, GetPGProcByNumber.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_COMPAT_H
#define GRELOUT_COMPAT_H

#include "postgres.h"

/* The supported range: one clear line for any other version. */
#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 200000
#error "grelout supports PostgreSQL 15 to 19 only (16: builds, not tested here)"
#endif

#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"

/*
 * 16: pg_class_ownercheck() and pg_database_ownercheck() gave way to
 * object_ownercheck(classid, objectid, roleid).
 */
static inline bool
grelout_table_ownercheck(Oid relid, Oid roleid)
{
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(RelationRelationId, relid, roleid);
#else
	return pg_class_ownercheck(relid, roleid);
#endif
}

static inline bool
grelout_database_ownercheck(Oid dboid, Oid roleid)
{
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(DatabaseRelationId, dboid, roleid);
#else
	return pg_database_ownercheck(dboid, roleid);
#endif
}

/*
 * 17: PGPROC lost its pgprocno field; GetNumberFromPGProc() computes it.
 * The number indexes ProcGlobal->allProcs (GetPGProcByNumber) on every
 * version.
 */
static inline int
grelout_procno(PGPROC *proc)
{
#if PG_VERSION_NUM >= 170000
	return (int) GetNumberFromPGProc(proc);
#else
	return proc->pgprocno;
#endif
}

/*
 * The relation's primary key index, InvalidOid if none or if it is
 * DEFERRABLE (it may not hold at the time a row is captured): what 15 to 17
 * return, whose relcache leaves deferrable indexes out of rd_pkindex.
 * 18: RelationGetPrimaryKeyIndex(rel, deferrable_ok) can return a
 * deferrable one; grelout does not ask for it.
 */
static inline Oid
grelout_primary_key_index(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, false);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/*
 * A fixed-size shared hash table.
 * 19: ShmemInitHash(name, nelems, info, flags) lost its separate initial
 * and maximum sizes (grelout always gave both the same).
 */
static inline HTAB *
grelout_shmem_init_hash(const char *name, long nelems, HASHCTL *info,
						int flags)
{
#if PG_VERSION_NUM >= 190000
	return ShmemInitHash(name, nelems, info, flags);
#else
	return ShmemInitHash(name, nelems, nelems, info, flags);
#endif
}

/*
 * A WaitEventSet that lives as long as the process.
 * 17: CreateWaitEventSet() takes a ResourceOwner instead of a memory context;
 * NULL means not tracked by one, allocated in TopMemoryContext, which is
 * what 15 and 16 did when given TopMemoryContext.
 */
static inline WaitEventSet *
grelout_create_wait_event_set(int nevents)
{
#if PG_VERSION_NUM >= 170000
	return CreateWaitEventSet(NULL, nevents);
#else
	return CreateWaitEventSet(TopMemoryContext, nevents);
#endif
}

/*
 * The "extra" a GUC check hook hands to its assign hook: PostgreSQL frees
 * it when the value is replaced.
 * 16: GUC memory lives in a memory context: extra must come from
 * guc_malloc() and is released with guc_free() (pfree); malloc'd memory
 * there fails with "pfree called with invalid pointer" (17) or worse.
 * 15: extra is malloc'd and free()d.
 * Both return NULL when out of memory, as malloc does.
 */
static inline void *
grelout_guc_malloc(size_t size)
{
#if PG_VERSION_NUM >= 160000
	return guc_malloc(LOG, size);
#else
	return malloc(size);
#endif
}

static inline void
grelout_guc_free(void *ptr)
{
#if PG_VERSION_NUM >= 160000
	guc_free(ptr);
#else
	free(ptr);
#endif
}

/*
 * The cache id a syscache invalidation callback receives.
 * 19: SysCacheIdentifier, an enum (catalog/syscache_ids.h), where it was int.
 */
#if PG_VERSION_NUM >= 190000
typedef SysCacheIdentifier GreloutSysCacheId;
#else
typedef int GreloutSysCacheId;
#endif

/*
 * Building a Jsonb value token by token.
 * 19: pushJsonbValue(JsonbInState *, ...) returns nothing; the value is in
 * the state's result once the outermost container is closed.
 * 15 to 18: pushJsonbValue(JsonbParseState **, ...) returns it.
 * A builder starts zeroed: GreloutJsonbBuilder b = {0};
 * grelout_jsonb_push() returns the completed value after the last token.
 */
#if PG_VERSION_NUM >= 190000
typedef JsonbInState GreloutJsonbBuilder;

static inline JsonbValue *
grelout_jsonb_push(GreloutJsonbBuilder *b, JsonbIteratorToken seq,
				   JsonbValue *v)
{
	pushJsonbValue(b, seq, v);
	return b->result;
}
#else
typedef struct GreloutJsonbBuilder
{
	JsonbParseState *state;
} GreloutJsonbBuilder;

static inline JsonbValue *
grelout_jsonb_push(GreloutJsonbBuilder *b, JsonbIteratorToken seq,
				   JsonbValue *v)
{
	return pushJsonbValue(&b->state, seq, v);
}
#endif

#endif							/* GRELOUT_COMPAT_H */
