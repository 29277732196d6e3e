/*-------------------------------------------------------------------------
 *
 * handler_health.c
 *	  The table grelout.handler_health, read and written here alone: the
 *	  stored breaker of each handler, written on its transitions only (with
 *	  a version, so that two relays' writes land in order) and loaded by a
 *	  relay into shared memory (health.c) before its first claim, so that
 *	  an open breaker survives a restart of the relay or of the server.
 *	  Here too what the breaker does to grelout.handlers and what a change
 *	  of a handler does to its health: the auto-disable of a handler whose
 *	  breaker stayed open, the trigger on grelout.handlers that reports a
 *	  disable and forgets or re-arms a handler's health, and the
 *	  operational events (grelout.breaker.opened, grelout.handler.disabled,
 *	  ...) they publish.
 *
 * An event is inserted in the transaction of the change it reports, only
 * when some handler other than the one it is about matches its topic.
 * Every function here runs with SPI connected: in a relay's transaction,
 * or in the trigger's.
 *
 *-------------------------------------------------------------------------
 */
#include "health.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "spi_helpers.h"
#include "store.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(grelout_handlers_health);

/* The stored breakers, loaded into shared memory. */
static const char *load_sql =
"SELECT t.handler, t.breaker, t.consecutive_failures,"
" t.opened_at, t.probe_at, t.cooldown_ms, t.version,"
" t.last_success_at, t.last_failure_at, t.last_error"
" FROM grelout.handler_health t";

/*
 * A breaker state, stored unless a later version is stored already or the
 * handler is gone.
 */
static const char *store_sql =
"INSERT INTO grelout.handler_health AS t (handler, breaker,"
" consecutive_failures, opened_at, probe_at, cooldown_ms, version,"
" last_success_at, last_failure_at, last_error)"
" SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10"
" WHERE EXISTS (SELECT 1 FROM grelout.handlers h WHERE h.name = $1)"
" ON CONFLICT (handler) DO UPDATE SET breaker = EXCLUDED.breaker,"
" consecutive_failures = EXCLUDED.consecutive_failures,"
" opened_at = EXCLUDED.opened_at, probe_at = EXCLUDED.probe_at,"
" cooldown_ms = EXCLUDED.cooldown_ms, version = EXCLUDED.version,"
" last_success_at = EXCLUDED.last_success_at,"
" last_failure_at = EXCLUDED.last_failure_at,"
" last_error = EXCLUDED.last_error"
" WHERE t.version < EXCLUDED.version";

/* A deleted or renamed handler's stored breaker. */
static const char *forget_sql =
"DELETE FROM grelout.handler_health WHERE handler = $1";

/* The auto-disable of a handler whose breaker stayed open. */
static const char *disable_sql =
"UPDATE grelout.handlers SET enabled = false WHERE name = $1 AND enabled";

/*
 * An operational event, unless no handler but the one it is about ($4)
 * would receive it.
 */
static const char *event_sql =
"INSERT INTO grelout.outbox (id, topic, payload)"
" SELECT $1, $2, $3"
" WHERE EXISTS (SELECT 1 FROM grelout.handlers h"
"  WHERE h.name IS DISTINCT FROM $4"
"   AND grelout._topic_matches(h.topic, $2)"
"   AND (h.filter IS NULL OR $3 OPERATOR(pg_catalog.@>) h.filter))";

static SPIPlanPtr store_plan = NULL;
static SPIPlanPtr disable_plan = NULL;
static SPIPlanPtr event_plan = NULL;

/* timestamp_value: a stored time, 0 for NULL. */
static TimestampTz
timestamp_value(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? 0 : DatumGetTimestampTz(d);
}

/* breaker_value: a stored breaker's state, BREAKER_*. */
static int
breaker_value(const char *name)
{
	return strcmp(name, health_breaker_names[BREAKER_OPEN]) == 0 ? BREAKER_OPEN :
		strcmp(name, health_breaker_names[BREAKER_HALF_OPEN]) == 0 ? BREAKER_HALF_OPEN :
		BREAKER_CLOSED;
}

/*
 * store_load_health: load the stored breaker states of the database's
 * handlers into shared memory (those this server has no entry for yet).
 */
void
store_load_health(Oid dboid)
{
	int			ret;

	ret = SPI_execute(load_sql, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read grelout.handler_health: %s",
			 SPI_result_code_string(ret));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		HealthWrite w;
		char	   *name = grelout_text_column(tup, desc, 1);
		char	   *breaker = grelout_text_column(tup, desc, 2);
		char	   *error = grelout_text_column(tup, desc, 10);
		bool		isnull;

		memset(&w, 0, sizeof(w));
		strlcpy(w.name, name, sizeof(w.name));
		w.breaker = breaker_value(breaker);
		w.consecutive_failures = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		w.opened_at = timestamp_value(tup, desc, 4);
		w.probe_at = timestamp_value(tup, desc, 5);
		w.cooldown_ms = DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
		w.version = (uint64) DatumGetInt64(SPI_getbinval(tup, desc, 7, &isnull));
		w.last_success_at = timestamp_value(tup, desc, 8);
		w.last_failure_at = timestamp_value(tup, desc, 9);
		if (error)
			strlcpy(w.last_error, error, sizeof(w.last_error));
		health_load(dboid, &w);
	}
}

/* timestamp_arg: a time to store, NULL for 0. */
static void
timestamp_arg(TimestampTz t, Datum *value, char *null)
{
	*value = TimestampTzGetDatum(t);
	*null = (t == 0) ? 'n' : ' ';
}

/*
 * health_store: write a breaker state to grelout.handler_health, unless a
 * later version is stored already or the handler is gone.  Runs in the
 * caller's transaction, SPI connected.
 */
void
health_store(const HealthWrite *w)
{
	Oid			types[10] = {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, INT8OID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[10];
	char		nulls[10];
	int			ret;

	grelout_keep_plan(&store_plan, store_sql, 10, types, 0);
	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(w->name);
	values[1] = CStringGetTextDatum(health_breaker_names[w->breaker]);
	values[2] = Int32GetDatum(w->consecutive_failures);
	timestamp_arg(w->opened_at, &values[3], &nulls[3]);
	timestamp_arg(w->probe_at, &values[4], &nulls[4]);
	values[5] = Int64GetDatum(w->cooldown_ms);
	values[6] = Int64GetDatum((int64) w->version);
	timestamp_arg(w->last_success_at, &values[7], &nulls[7]);
	timestamp_arg(w->last_failure_at, &values[8], &nulls[8]);
	values[9] = CStringGetTextDatum(w->last_error);
	nulls[9] = w->last_error[0] ? ' ' : 'n';
	ret = SPI_execute_plan(store_plan, values, nulls, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "could not store the breaker of handler \"%s\": %s",
			 w->name, SPI_result_code_string(ret));
}

/*
 * store_disable_handler: disable a handler whose breaker stayed open;
 * returns whether it was enabled.  Its trigger (grelout_handlers_health)
 * publishes grelout.handler.disabled, with reason "breaker": the update
 * runs in a relay.
 */
bool
store_disable_handler(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int			ret;

	grelout_keep_plan(&disable_plan, disable_sql, 1, types, 0);
	values[0] = CStringGetTextDatum(name);
	ret = SPI_execute_plan(disable_plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "could not disable handler \"%s\": %s", name,
			 SPI_result_code_string(ret));
	return SPI_processed > 0;
}

/*
 * health_publish_event: insert an operational event (a grelout. topic) in
 * the caller's transaction, unless no handler but the one it is about
 * (about, may be NULL) would receive it.  Returns whether it was stored.
 * Routing never sends it to that handler either (routing.c, handler_matches).
 */
bool
health_publish_event(const char *topic, const char *about,
					 const char *payload_json)
{
	Oid			types[4] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	pg_uuid_t	id;
	int			ret;

	grelout_keep_plan(&event_plan, event_sql, 4, types, 0);
	grelout_uuid7(&id);
	values[0] = UUIDPGetDatum(&id);
	values[1] = CStringGetTextDatum(topic);
	values[2] = DirectFunctionCall1(jsonb_in, CStringGetDatum(payload_json));
	values[3] = about ? CStringGetTextDatum(about) : (Datum) 0;
	nulls[3] = about ? ' ' : 'n';
	ret = SPI_execute_plan(event_plan, values, nulls, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "could not publish event %s: %s", topic,
			 SPI_result_code_string(ret));
	return SPI_processed > 0;
}

/*
 * health_event_json: the payload of an event about handler name, as JSON
 * text, with extra members (JSON text without braces) or NULL.
 */
char *
health_event_json(const char *name, const char *extra)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"handler\": ");
	escape_json(&buf, name);
	appendStringInfo(&buf, ", \"at\": ");
	escape_json(&buf, timestamptz_to_str(GetCurrentTimestamp()));
	if (extra)
		appendStringInfo(&buf, ", %s", extra);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/* bool_column: a boolean column of a handler row (false when NULL). */
static bool
bool_column(HeapTuple tup, TupleDesc desc, const char *column)
{
	int			attnum = grelout_attnum(desc, column, true);
	bool		isnull;
	Datum		d;

	if (attnum == 0)
		return false;
	d = heap_getattr(tup, attnum, desc, &isnull);
	return !isnull && DatumGetBool(d);
}

/* forget_handler: a handler deleted or renamed: its health starts anew. */
static void
forget_handler(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	health_forget(MyDatabaseId, name);
	values[0] = CStringGetTextDatum(name);
	if (SPI_execute_with_args(forget_sql, 1, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not forget the health of handler \"%s\"", name);
}

/*
 * disabled: a handler was disabled: publish grelout.handler.disabled, with
 * reason "breaker" when a relay disabled it (a relay disables a handler
 * for no other reason: store_disable_handler), else "manual"; wake the
 * relays when it was stored.
 */
static void
disabled(const char *name)
{
	StringInfoData extra;

	initStringInfo(&extra);
	appendStringInfo(&extra, "\"reason\": \"%s\"",
					 grelout_am_relay() ? "breaker" : "manual");
	if (health_publish_event("grelout.handler.disabled", name,
							 health_event_json(name, extra.data)))
		SPI_execute("SELECT grelout._wake()", false, 0);
}

/* reenabled: a handler enabled again: a breaker not closed is half-open. */
static void
reenabled(const char *name)
{
	HealthWrite w;

	if (health_reenabled(MyDatabaseId, name, &w))
		health_store(&w);
}

/*
 * handler_changed: what a handler's update (old_name: its name before)
 * means to its health, as grelout_handlers_health describes.
 */
static void
handler_changed(TriggerData *td, const char *old_name)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	HeapTuple	newtup = td->tg_newtuple;
	char	   *new_name = grelout_text_column(newtup, desc, grelout_attnum(desc, "name", true));
	bool		was = bool_column(td->tg_trigtuple, desc, "enabled");
	bool		now = bool_column(newtup, desc, "enabled");

	if (new_name && strcmp(new_name, old_name) != 0)
		forget_handler(old_name);
	if (was && !now && new_name)
		disabled(new_name);
	else if (!was && now && new_name)
		reenabled(new_name);
}

/*
 * grelout_handlers_health: the trigger AFTER UPDATE OF enabled, name OR
 * DELETE on grelout.handlers.  A disable publishes
 * grelout.handler.disabled (reason "breaker" when a relay disabled it,
 * else "manual"); a re-enable leaves a breaker that was not closed
 * half-open; a delete or rename forgets the old name's health.  Its
 * statements run as the owner of grelout.handlers, whoever changed the
 * handler, under search_path pinned (grelout_pin_search_path).  The
 * shared entry changes at once, not at commit: a change rolled back leaves
 * at worst a probe, or a history forgotten.
 */
Datum
grelout_handlers_health(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	char	   *old_name;
	Oid			save_userid;
	int			save_sec;
	Oid			owner;
	int			pin;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("grelout._handlers_health() must be an AFTER ROW trigger")));
	desc = RelationGetDescr(td->tg_relation);
	old_name = grelout_text_column(td->tg_trigtuple, desc, grelout_attnum(desc, "name", true));
	if (old_name == NULL)
		return PointerGetDatum(NULL);

	owner = grelout_relation_owner(RelationGetRelid(td->tg_relation));
	pin = grelout_pin_search_path();
	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	SPI_connect();
	PG_TRY();
	{
		if (TRIGGER_FIRED_BY_DELETE(td->tg_event))
			forget_handler(old_name);
		else if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
			handler_changed(td, old_name);
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec);
	}
	PG_END_TRY();
	SPI_finish();
	grelout_unpin_search_path(pin);
	return PointerGetDatum(NULL);
}
