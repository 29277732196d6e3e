/*-------------------------------------------------------------------------
 *
 * capture.c
 *	  Capturing table changes: grelout.capture and grelout.uncapture, which
 *	  put grelout's triggers on a table and take them off again, and the
 *	  trigger function grelout._capture(), which publishes each change in
 *	  the writing transaction through outbox_publish's own path
 *	  (grelout_publish_change in publish.c).
 *
 * A captured table has at most two triggers, both on grelout._capture():
 * grelout_capture, AFTER INSERT/UPDATE/DELETE FOR EACH ROW (PostgreSQL
 * clones it to the present and future partitions of a partitioned table),
 * and grelout_capture_truncate, AFTER TRUNCATE FOR EACH STATEMENT.  Their
 * arguments, kept in pg_trigger.tgargs and so dumped and restored with the
 * triggers, are the topic and then the captured columns' names, if any.
 * Nothing else is stored.
 *
 * The trigger function works out once per backend and trigger what it
 * needs (the captured table's current names, where the captured columns
 * and the primary key sit in the relation it fires on, the topics) and
 * keeps it until an invalidation touches the table; a row then costs a
 * to_jsonb of each image and the insert of one message.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "spi_helpers.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(grelout_capture_1_1);
PG_FUNCTION_INFO_V1(grelout_uncapture_1_1);
PG_FUNCTION_INFO_V1(grelout_capture_trigger_1_1);

#define ROW_TRIGGER			"grelout_capture"
#define TRUNCATE_TRIGGER	"grelout_capture_truncate"

/* The operations, in the order of CaptureEntry.topics. */
typedef enum CaptureOp
{
	OP_INSERT,
	OP_UPDATE,
	OP_DELETE,
	OP_TRUNCATE,
	OP_COUNT
} CaptureOp;

static const char *const op_names[OP_COUNT] = {"insert", "update", "delete", "truncate"};
static const int16 op_events[OP_COUNT] = {
	TRIGGER_TYPE_INSERT, TRIGGER_TYPE_UPDATE, TRIGGER_TYPE_DELETE, TRIGGER_TYPE_TRUNCATE
};

/*
 * What one capture trigger needs to publish a change, built on its first
 * call in a backend.  "The relation" is the one the trigger fires on (a
 * partition, for a clone of a partitioned table's trigger); "the table" is
 * the captured one, whose names the payload carries.
 */
typedef struct CaptureEntry
{
	Oid			tgoid;			/* hash key: the trigger */
	bool		valid;			/* false once an invalidation touched it */
	Oid			relid;			/* the relation */
	Oid			tableid;		/* the captured table */
	Oid			owner;			/* its owner: its changes' publisher */
	MemoryContext cxt;			/* everything below */
	Jsonb	   *schema_json;	/* the table's schema, as a JSON string */
	Jsonb	   *table_json;		/* the table's name, as a JSON string */
	text	   *topics[OP_COUNT];	/* <topic>.<op> of the trigger's events */
	/* the captured columns: attnums in the relation, as a blessed record */
	int			ncols;
	AttrNumber *cols;
	TupleDesc	coldesc;
	FmgrInfo	record_to_jsonb;
	/* the primary key's columns in the relation (nkeys 0: no key) */
	int			nkeys;
	AttrNumber *keys;
	FmgrInfo	key_out;		/* one column: its output function */
	FmgrInfo   *key_to_jsonb;	/* several: to_jsonb of each */
} CaptureEntry;

static HTAB *capture_cache = NULL;
static bool capture_cache_stale = false;
static int	capture_depth = 0;

/* ---------------------------------------------------------------------
 * grelout.capture and grelout.uncapture
 * ---------------------------------------------------------------------
 */

/* capture_function: the oid of grelout._capture(). */
static Oid
capture_function(void)
{
	return LookupFuncName(list_make2(makeString("grelout"), makeString("_capture")),
						  0, NULL, false);
}

/*
 * open_owned_table: the table tbl, locked in lockmode, after checking that
 * current_user owns it (or is a superuser) and that it is a table grelout
 * may capture.
 */
static Relation
open_owned_table(FunctionCallInfo fcinfo, LOCKMODE lockmode)
{
	Oid			relid;
	Relation	rel;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("tbl must not be null")));
	relid = PG_GETARG_OID(0);

	/* before taking any lock: whoever does not own it cannot block it */
	if (!grelout_table_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(relid));
	rel = relation_open(relid, lockmode);
	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table", RelationGetRelationName(rel)),
				 errdetail("Only tables and partitioned tables can be captured.")));
	if (RelationGetNamespace(rel) == get_namespace_oid("grelout", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is grelout's own and cannot be captured",
						RelationGetRelationName(rel))));
	return rel;
}

/*
 * capture_triggers: the capture triggers of one relation, as a list of
 * trigger oids made by capture on it (not clones); *cloned set when it has
 * a clone of a partitioned table's capture trigger.
 */
static List *
capture_triggers(Oid relid, Oid fnoid, bool *cloned)
{
	Relation	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *own = NIL;

	*cloned = false;
	ScanKeyInit(&key, Anum_pg_trigger_tgrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(tgrel, TriggerRelidNameIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_trigger tg = (Form_pg_trigger) GETSTRUCT(tup);

		if (tg->tgfoid != fnoid)
			continue;
		if (OidIsValid(tg->tgparentid))
			*cloned = true;
		else
			own = lappend_oid(own, tg->oid);
	}
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);
	return own;
}

/*
 * check_not_captured: the table, and each of its partitions, has no
 * capture trigger yet (a second capture would publish every change
 * twice).
 */
static void
check_not_captured(Relation rel, Oid fnoid)
{
	List	   *rels;
	ListCell   *lc;

	if (rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
		rels = find_all_inheritors(RelationGetRelid(rel), ShareRowExclusiveLock, NULL);
	else
		rels = list_make1_oid(RelationGetRelid(rel));
	foreach(lc, rels)
	{
		Oid			relid = lfirst_oid(lc);
		bool		cloned;
		List	   *own = capture_triggers(relid, fnoid, &cloned);

		if (own == NIL && !cloned)
			continue;
		if (relid == RelationGetRelid(rel))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("table \"%s\" is already captured",
							RelationGetRelationName(rel)),
					 own == NIL ?
					 errdetail("It is a partition of a captured table.") : 0,
					 errhint("Call grelout.uncapture first to capture it differently.")));
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("partition \"%s\" of table \"%s\" is already captured",
						get_rel_name(relid), RelationGetRelationName(rel)),
				 errhint("Uncapture the partition first.")));
	}
}

/*
 * parse_events: the events argument as TRIGGER_TYPE_* bits: a non-empty
 * array of insert, update, delete and truncate.
 */
static int16
parse_events(FunctionCallInfo fcinfo)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int16		events = 0;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("events must not be null")));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *name;
		int			op;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("events must not contain nulls")));
		name = TextDatumGetCString(elems[i]);
		for (op = 0; op < OP_COUNT; op++)
			if (pg_strcasecmp(name, op_names[op]) == 0)
				break;
		if (op == OP_COUNT)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown event \"%s\"", name),
					 errhint("The events are insert, update, delete and truncate.")));
		events |= op_events[op];
	}
	if (events == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("events must not be empty")));
	return events;
}

/*
 * topic_of: "<base>.<op>", checked as outbox_publish checks a topic.
 */
static text *
topic_of(const char *base, CaptureOp op)
{
	text	   *topic = cstring_to_text(psprintf("%s.%s", base, op_names[op]));

	grelout_check_publish_topic(topic);
	return topic;
}

/*
 * column_args: the columns argument as trigger arguments (String nodes),
 * each an existing column of rel named once; NIL for every column.
 */
static List *
column_args(FunctionCallInfo fcinfo, Relation rel)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	List	   *args = NIL;
	Bitmapset  *seen = NULL;

	if (PG_ARGISNULL(3))
		return NIL;
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("columns must not be empty"),
				 errhint("Pass NULL to capture every column.")));
	for (int i = 0; i < n; i++)
	{
		char	   *name;
		AttrNumber	attnum;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("columns must not contain nulls")));
		name = TextDatumGetCString(elems[i]);
		attnum = get_attnum(RelationGetRelid(rel), name);
		if (attnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of relation \"%s\" does not exist",
							name, RelationGetRelationName(rel))));
		if (bms_is_member(attnum, seen))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("column \"%s\" is listed more than once", name)));
		seen = bms_add_member(seen, attnum);
		args = lappend(args, makeString(name));
	}
	return args;
}

/*
 * create_trigger: one capture trigger on rel, AFTER events, row-level or
 * not, with these arguments.  Runs with the rights of the extension's
 * owner (the owner of grelout._capture): the caller, whose ownership of
 * the table was checked, need not be able to execute grelout._capture
 * itself.
 */
static void
create_trigger(Relation rel, const char *name, bool row, int16 events,
			   List *args, Oid fnoid)
{
	CreateTrigStmt *stmt = makeNode(CreateTrigStmt);
	HeapTuple	proc;
	Oid			fnowner;
	Oid			save_userid;
	int			save_sec_context;

	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fnoid));
	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fnoid);
	fnowner = ((Form_pg_proc) GETSTRUCT(proc))->proowner;
	ReleaseSysCache(proc);

	stmt->trigname = pstrdup(name);
	stmt->relation = makeRangeVar(get_namespace_name(RelationGetNamespace(rel)),
								  pstrdup(RelationGetRelationName(rel)), -1);
	stmt->funcname = list_make2(makeString("grelout"), makeString("_capture"));
	stmt->args = args;
	stmt->row = row;
	stmt->timing = TRIGGER_TYPE_AFTER;
	stmt->events = events;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(fnowner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		CreateTrigger(stmt, "SELECT grelout.capture(...)", RelationGetRelid(rel),
					  InvalidOid, InvalidOid, InvalidOid, fnoid, InvalidOid,
					  NULL, false, false);
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	CommandCounterIncrement();
}

/*
 * grelout_capture_1_1: grelout.capture(tbl, topic, events, columns).  Puts
 * the capture triggers on tbl, after checking that current_user owns it,
 * that it is not captured yet (42710), and every argument.  search_path
 * pinned, as by its SET clause.
 */
Datum
grelout_capture_1_1(PG_FUNCTION_ARGS)
{
	int			pin = grelout_pin_search_path();
	Relation	rel = open_owned_table(fcinfo, ShareRowExclusiveLock);
	Oid			fnoid = capture_function();
	int16		events;
	char	   *base;
	List	   *cols;
	List	   *args;

	check_not_captured(rel, fnoid);
	events = parse_events(fcinfo);

	/* the topic: given, or <schema>.<table> */
	if (PG_ARGISNULL(1))
		base = psprintf("%s.%s", get_namespace_name(RelationGetNamespace(rel)),
						RelationGetRelationName(rel));
	else
		base = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (base[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic must not be empty"),
				 errhint("Pass NULL for the default, <schema>.<table>.")));
	for (int op = 0; op < OP_COUNT; op++)
		if (events & op_events[op])
			(void) topic_of(base, op);

	cols = column_args(fcinfo, rel);
	args = lcons(makeString(base), cols);

	if (events & (TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE))
		create_trigger(rel, ROW_TRIGGER, true,
					   events & (TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE),
					   args, fnoid);
	if (events & TRIGGER_TYPE_TRUNCATE)
		create_trigger(rel, TRUNCATE_TRIGGER, false, TRIGGER_TYPE_TRUNCATE,
					   list_make1(makeString(base)), fnoid);

	relation_close(rel, NoLock);
	grelout_unpin_search_path(pin);
	PG_RETURN_VOID();
}

/*
 * grelout_uncapture_1_1: grelout.uncapture(tbl).  Drops the capture
 * triggers of tbl (and so their clones on its partitions), after checking
 * that current_user owns it.  search_path pinned, as by its SET clause.
 */
Datum
grelout_uncapture_1_1(PG_FUNCTION_ARGS)
{
	int			pin = grelout_pin_search_path();
	Relation	rel = open_owned_table(fcinfo, AccessExclusiveLock);
	bool		cloned;
	List	   *own = capture_triggers(RelationGetRelid(rel), capture_function(), &cloned);
	ObjectAddresses *objs = new_object_addresses();
	ListCell   *lc;

	if (own == NIL && cloned)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is captured as a partition of a captured table",
						RelationGetRelationName(rel)),
				 errhint("Uncapture the partitioned table.")));
	if (own == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table \"%s\" is not captured", RelationGetRelationName(rel))));
	foreach(lc, own)
	{
		ObjectAddress obj;

		ObjectAddressSet(obj, TriggerRelationId, lfirst_oid(lc));
		add_exact_object_address(&obj, objs);
	}
	performMultipleDeletions(objs, DROP_RESTRICT, 0);
	relation_close(rel, NoLock);
	grelout_unpin_search_path(pin);
	PG_RETURN_VOID();
}

/* ---------------------------------------------------------------------
 * The trigger function's cache
 * ---------------------------------------------------------------------
 */

/*
 * capture_invalidate: a relcache invalidation of one relation (or of all)
 * makes the entries built from it stale; a schema's rename, every entry.
 * Only marked here: an entry in use stays allocated until the outermost
 * trigger call returns.
 */
static void
capture_invalidate(Oid relid)
{
	HASH_SEQ_STATUS seq;
	CaptureEntry *e;

	if (capture_cache == NULL)
		return;
	hash_seq_init(&seq, capture_cache);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (!OidIsValid(relid) || e->relid == relid || e->tableid == relid)
		{
			e->valid = false;
			capture_cache_stale = true;
		}
	}
}

static void
capture_relcache_callback(Datum arg, Oid relid)
{
	capture_invalidate(relid);
}

static void
capture_syscache_callback(Datum arg, GreloutSysCacheId cacheid, uint32 hashvalue)
{
	capture_invalidate(InvalidOid);
}

/* capture_sweep: forget the stale entries (no trigger call is running). */
static void
capture_sweep(void)
{
	HASH_SEQ_STATUS seq;
	CaptureEntry *e;

	hash_seq_init(&seq, capture_cache);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (e->valid)
			continue;
		if (e->cxt != NULL)
			MemoryContextDelete(e->cxt);
		(void) hash_search(capture_cache, &e->tgoid, HASH_REMOVE, NULL);
	}
	capture_cache_stale = false;
}

/*
 * captured_table: the table a capture trigger belongs to: its own
 * relation, or for a clone on a partition, the relation of the trigger it
 * was cloned from, up to the one capture made.
 */
static Oid
captured_table(Trigger *trigger, Oid relid)
{
	Relation	tgrel;
	Oid			tgoid = trigger->tgoid;

	if (!trigger->tgisclone)
		return relid;
	tgrel = table_open(TriggerRelationId, AccessShareLock);
	for (;;)
	{
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tup;
		Form_pg_trigger tg;

		ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(tgoid));
		scan = systable_beginscan(tgrel, TriggerOidIndexId, true, NULL, 1, &key);
		tup = systable_getnext(scan);
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "could not find trigger %u", tgoid);
		tg = (Form_pg_trigger) GETSTRUCT(tup);
		relid = tg->tgrelid;
		tgoid = tg->tgparentid;
		systable_endscan(scan);
		if (!OidIsValid(tgoid))
			break;
	}
	table_close(tgrel, AccessShareLock);
	return relid;
}

/* json_string: a JSON string value as a Jsonb. */
static Jsonb *
json_string(const char *s)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) s;
	v.val.string.len = strlen(s);
	return JsonbValueToJsonb(&v);
}

/*
 * init_to_jsonb: flinfo calls to_jsonb(anyelement) on values of type
 * typid (to_jsonb reads its argument's type from its call expression).
 */
static void
init_to_jsonb(FmgrInfo *flinfo, Oid typid)
{
	fmgr_info_cxt(F_TO_JSONB, flinfo, CurrentMemoryContext);
	fmgr_info_set_expr((Node *) makeFuncExpr(F_TO_JSONB, JSONBOID,
											 list_make1(makeNullConst(typid, -1, InvalidOid)),
											 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL),
					   flinfo);
}

/*
 * build_columns: the captured columns of the relation (those named in the
 * trigger's arguments, else every live column), as attnums and as a
 * blessed record descriptor with their names and types.
 */
static void
build_columns(CaptureEntry *e, Relation rel, Trigger *trigger)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			n = 0;

	e->cols = palloc(sizeof(AttrNumber) * Max(desc->natts, trigger->tgnargs));
	if (trigger->tgnargs > 1)
	{
		for (int i = 1; i < trigger->tgnargs; i++)
		{
			AttrNumber	attnum = get_attnum(RelationGetRelid(rel), trigger->tgargs[i]);

			if (attnum <= 0)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("column \"%s\" captured from table \"%s\" does not exist",
								trigger->tgargs[i], RelationGetRelationName(rel)),
						 errhint("Call grelout.uncapture and grelout.capture again with the columns the table has now.")));
			e->cols[n++] = attnum;
		}
	}
	else
	{
		for (int i = 0; i < desc->natts; i++)
			if (!TupleDescAttr(desc, i)->attisdropped)
				e->cols[n++] = TupleDescAttr(desc, i)->attnum;
	}
	e->ncols = n;
	e->coldesc = CreateTemplateTupleDesc(n);
	for (int i = 0; i < n; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, e->cols[i] - 1);

		TupleDescInitEntry(e->coldesc, i + 1, NameStr(att->attname),
						   att->atttypid, att->atttypmod, 0);
		TupleDescInitEntryCollation(e->coldesc, i + 1, att->attcollation);
	}
	e->coldesc = BlessTupleDesc(e->coldesc);
	init_to_jsonb(&e->record_to_jsonb, RECORDOID);
}

/*
 * build_key: the captured table's primary key columns, found in the
 * relation by name (a partition's columns may sit elsewhere).
 */
static void
build_key(CaptureEntry *e, Relation rel)
{
	Relation	table = rel;
	Oid			pkoid;

	if (e->tableid != e->relid)
		table = relation_open(e->tableid, AccessShareLock);
	pkoid = grelout_primary_key_index(table);
	e->nkeys = 0;
	if (OidIsValid(pkoid))
	{
		HeapTuple	idx = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(pkoid));
		Form_pg_index form;

		if (!HeapTupleIsValid(idx))
			elog(ERROR, "cache lookup failed for index %u", pkoid);
		form = (Form_pg_index) GETSTRUCT(idx);
		e->nkeys = form->indnkeyatts;
		e->keys = palloc(sizeof(AttrNumber) * e->nkeys);
		for (int i = 0; i < e->nkeys; i++)
		{
			char	   *name = get_attname(e->tableid, form->indkey.values[i], false);

			e->keys[i] = get_attnum(e->relid, name);
			if (e->keys[i] <= 0)
				elog(ERROR, "primary key column \"%s\" not found in relation %u",
					 name, e->relid);
		}
		ReleaseSysCache(idx);
	}
	if (table != rel)
		relation_close(table, AccessShareLock);

	if (e->nkeys == 1)
	{
		Oid			typoutput;
		bool		varlena;

		getTypeOutputInfo(TupleDescAttr(RelationGetDescr(rel), e->keys[0] - 1)->atttypid,
						  &typoutput, &varlena);
		fmgr_info_cxt(typoutput, &e->key_out, CurrentMemoryContext);
	}
	else if (e->nkeys > 1)
	{
		e->key_to_jsonb = palloc(sizeof(FmgrInfo) * e->nkeys);
		for (int i = 0; i < e->nkeys; i++)
			init_to_jsonb(&e->key_to_jsonb[i],
						  TupleDescAttr(RelationGetDescr(rel), e->keys[i] - 1)->atttypid);
	}
}

/*
 * build_entry: fill e for the trigger firing on rel, in e's own memory
 * context.
 */
static void
build_entry(CaptureEntry *e, Trigger *trigger, Relation rel)
{
	MemoryContext old;
	Oid			nsp;

	if (trigger->tgnargs < 1)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on \"%s\" has no topic argument",
						trigger->tgname, RelationGetRelationName(rel)),
				 errhint("Create capture triggers with grelout.capture.")));

	/* valid from now: an invalidation while it is built makes it stale */
	e->valid = true;
	e->cxt = AllocSetContextCreate(CacheMemoryContext, "grelout capture",
								   ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(e->cxt);
	e->relid = RelationGetRelid(rel);
	e->tableid = captured_table(trigger, e->relid);
	/*
	 * the table's owner is the publisher of its changes (published_by): a
	 * row's changes are one publisher's whichever role wrote them, so that
	 * an ordered handler gets them in commit order (per-key ordering is per
	 * publisher)
	 */
	e->owner = grelout_relation_owner(e->tableid);
	nsp = get_rel_namespace(e->tableid);
	e->schema_json = json_string(get_namespace_name(nsp));
	e->table_json = json_string(get_rel_name(e->tableid));
	for (int op = 0; op < OP_COUNT; op++)
		e->topics[op] = (trigger->tgtype & op_events[op]) ?
			topic_of(trigger->tgargs[0], op) : NULL;
	if (TRIGGER_FOR_ROW(trigger->tgtype))
	{
		build_columns(e, rel, trigger);
		build_key(e, rel);
	}
	MemoryContextSwitchTo(old);
}

/*
 * capture_entry: the cache entry of the trigger firing now, built when
 * missing or stale.
 */
static CaptureEntry *
capture_entry(TriggerData *td)
{
	CaptureEntry *e;
	bool		found;

	if (capture_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(CaptureEntry);
		capture_cache = hash_create("grelout capture triggers", 16, &ctl,
									HASH_ELEM | HASH_BLOBS);
		CacheRegisterRelcacheCallback(capture_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, capture_syscache_callback, (Datum) 0);
	}
	if (capture_cache_stale && capture_depth <= 1)
		capture_sweep();

	e = hash_search(capture_cache, &td->tg_trigger->tgoid, HASH_ENTER, &found);
	if (!found)
	{
		e->valid = false;
		e->cxt = NULL;
	}
	/* a stale entry still in use by an outer call is used once more */
	if (!found || (!e->valid && capture_depth <= 1))
	{
		MemoryContext caller = CurrentMemoryContext;

		if (e->cxt != NULL)
			MemoryContextDelete(e->cxt);
		e->cxt = NULL;
		PG_TRY();
		{
			build_entry(e, td->tg_trigger, td->tg_relation);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(caller);
			if (e->cxt != NULL)
				MemoryContextDelete(e->cxt);
			(void) hash_search(capture_cache, &td->tg_trigger->tgoid, HASH_REMOVE, NULL);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	return e;
}

/* ---------------------------------------------------------------------
 * The trigger function
 * ---------------------------------------------------------------------
 */

/* row_json: the captured columns of a row image as a JSON object. */
static Jsonb *
row_json(CaptureEntry *e, TupleTableSlot *slot)
{
	Datum	   *values = palloc(sizeof(Datum) * e->ncols);
	bool	   *nulls = palloc(sizeof(bool) * e->ncols);
	HeapTuple	tuple;

	slot_getallattrs(slot);
	for (int i = 0; i < e->ncols; i++)
	{
		values[i] = slot->tts_values[e->cols[i] - 1];
		nulls[i] = slot->tts_isnull[e->cols[i] - 1];
	}
	tuple = heap_form_tuple(e->coldesc, values, nulls);
	return DatumGetJsonbP(FunctionCall1(&e->record_to_jsonb, HeapTupleGetDatum(tuple)));
}

/*
 * row_key: the primary key of a row image as text: one column's text, or
 * the JSON array of several columns' to_jsonb values; NULL without a key.
 */
static text *
row_key(CaptureEntry *e, TupleTableSlot *slot)
{
	GreloutJsonbBuilder state = {0};
	JsonbValue *array;
	Jsonb	   *jb;

	if (e->nkeys == 0)
		return NULL;
	slot_getallattrs(slot);
	if (e->nkeys == 1)
	{
		if (slot->tts_isnull[e->keys[0] - 1])
			return NULL;
		return cstring_to_text(OutputFunctionCall(&e->key_out,
												  slot->tts_values[e->keys[0] - 1]));
	}
	grelout_jsonb_push(&state, WJB_BEGIN_ARRAY, NULL);
	for (int i = 0; i < e->nkeys; i++)
	{
		JsonbValue	v;

		if (slot->tts_isnull[e->keys[i] - 1])
			v.type = jbvNull;
		else
		{
			Jsonb	   *elem = DatumGetJsonbP(FunctionCall1(&e->key_to_jsonb[i],
															slot->tts_values[e->keys[i] - 1]));

			if (!JsonbExtractScalar(&elem->root, &v))
				JsonbToJsonbValue(elem, &v);
		}
		grelout_jsonb_push(&state, WJB_ELEM, &v);
	}
	array = grelout_jsonb_push(&state, WJB_END_ARRAY, NULL);
	jb = JsonbValueToJsonb(array);
	return cstring_to_text(JsonbToCString(NULL, &jb->root, VARSIZE(jb)));
}

/* push_pair: one key and value (a Jsonb, or JSON null) of an object. */
static void
push_pair(GreloutJsonbBuilder *state, const char *key, Jsonb *value)
{
	JsonbValue	k;
	JsonbValue	v;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	grelout_jsonb_push(state, WJB_KEY, &k);
	if (value == NULL)
		v.type = jbvNull;
	else if (!JsonbExtractScalar(&value->root, &v))
		JsonbToJsonbValue(value, &v);
	grelout_jsonb_push(state, WJB_VALUE, &v);
}

/*
 * change_payload: {"op", "schema", "table", "new", "old"} of one change.
 */
static Jsonb *
change_payload(CaptureEntry *e, CaptureOp op, Jsonb *newrow, Jsonb *oldrow)
{
	GreloutJsonbBuilder state = {0};
	JsonbValue	opv;
	JsonbValue	k;

	grelout_jsonb_push(&state, WJB_BEGIN_OBJECT, NULL);
	k.type = jbvString;
	k.val.string.val = "op";
	k.val.string.len = 2;
	grelout_jsonb_push(&state, WJB_KEY, &k);
	opv.type = jbvString;
	opv.val.string.val = (char *) op_names[op];
	opv.val.string.len = strlen(op_names[op]);
	grelout_jsonb_push(&state, WJB_VALUE, &opv);
	push_pair(&state, "schema", e->schema_json);
	push_pair(&state, "table", e->table_json);
	push_pair(&state, "new", newrow);
	push_pair(&state, "old", oldrow);
	return JsonbValueToJsonb(grelout_jsonb_push(&state, WJB_END_OBJECT, NULL));
}

/* same_json: two Jsonb values byte for byte the same. */
static bool
same_json(Jsonb *a, Jsonb *b)
{
	return VARSIZE(a) == VARSIZE(b) && memcmp(a, b, VARSIZE(a)) == 0;
}

/*
 * publish_change: publish the change that fired td, or nothing for an
 * UPDATE that left every captured column as it was.
 */
static void
publish_change(TriggerData *td)
{
	TriggerEvent event = td->tg_event;
	CaptureEntry *e = capture_entry(td);
	Jsonb	   *newrow = NULL;
	Jsonb	   *oldrow = NULL;
	text	   *key = NULL;
	CaptureOp	op;

	if (TRIGGER_FIRED_BY_TRUNCATE(event))
		op = OP_TRUNCATE;
	else if (TRIGGER_FIRED_BY_INSERT(event))
	{
		op = OP_INSERT;
		newrow = row_json(e, td->tg_trigslot);
		key = row_key(e, td->tg_trigslot);
	}
	else if (TRIGGER_FIRED_BY_UPDATE(event))
	{
		op = OP_UPDATE;
		oldrow = row_json(e, td->tg_trigslot);
		newrow = row_json(e, td->tg_newslot);
		if (same_json(oldrow, newrow))
			return;
		key = row_key(e, td->tg_newslot);
	}
	else
	{
		op = OP_DELETE;
		oldrow = row_json(e, td->tg_trigslot);
		key = row_key(e, td->tg_trigslot);
	}
	if (e->topics[op] == NULL)
		elog(ERROR, "capture trigger fired for an event it was not created for");
	grelout_publish_change(e->topics[op], change_payload(e, op, newrow, oldrow), key,
						   e->owner);
}

/* capture_error_context: "publishing the insert of a row of table t". */
static void
capture_error_context(void *arg)
{
	TriggerData *td = (TriggerData *) arg;
	const char *what = TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) ? "truncate" :
		TRIGGER_FIRED_BY_INSERT(td->tg_event) ? "insert" :
		TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? "update" : "delete";

	errcontext("grelout capture of the %s on \"%s\"", what,
			   RelationGetRelationName(td->tg_relation));
}

/*
 * grelout_capture_trigger_1_1: grelout._capture(), the trigger function of
 * the capture triggers: AFTER, FOR EACH ROW for INSERT, UPDATE and DELETE,
 * FOR EACH STATEMENT for TRUNCATE.  Arguments: the topic, then the
 * captured columns (none: all).  It runs as the writer; the message's
 * insert (grelout_publish_change) runs with the rights of the outbox's
 * owner under search_path pinned.  The row's conversion to JSON calls only
 * the captured types' own functions (casts to json, output functions),
 * found by oid, as the writer: user code like any in the writing
 * statement, so it keeps the writer's path.
 */
Datum
grelout_capture_trigger_1_1(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	ErrorContextCallback errcontext_cb;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("grelout._capture() must be called as a trigger")));
	if (!TRIGGER_FIRED_AFTER(td->tg_event) ||
		(TRIGGER_FIRED_FOR_ROW(td->tg_event) ? true : false) ==
		(TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) ? true : false))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("grelout._capture() must be fired AFTER, for each row of an INSERT, UPDATE or DELETE or for a TRUNCATE"),
				 errhint("Create capture triggers with grelout.capture.")));

	/* an error (a payload over the limit, say) names the write it fails */
	errcontext_cb.callback = capture_error_context;
	errcontext_cb.arg = td;
	errcontext_cb.previous = error_context_stack;
	error_context_stack = &errcontext_cb;
	capture_depth++;
	PG_TRY();
	{
		publish_change(td);
	}
	PG_FINALLY();
	{
		capture_depth--;
		error_context_stack = errcontext_cb.previous;
	}
	PG_END_TRY();
	return PointerGetDatum(NULL);
}
