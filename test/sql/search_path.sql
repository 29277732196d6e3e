-- search_path: no statement grelout runs resolves an operator or a function
-- through the caller's search_path.  An unprivileged role that may edit
-- grelout.handlers, publish, capture its own table and run the operator
-- functions plants, in a schema of its own, operators (=, <> and the
-- comparisons on text, uuid, oid, integer, bigint, timestamptz, jsonb,
-- boolean; + and - on timestamptz and interval; @>, ||) and functions
-- (now, lower, left, count, min, bool_or, array_agg) that log current_user
-- and return the real result, puts that schema first on its search_path
-- (before pg_catalog), and calls every entry point.  Its own statements
-- name pg_catalog's operators and functions explicitly, so the log must stay
-- empty: nothing that grelout runs, with raised rights or not, may reach a
-- planted object.  The topics and handlers here deliver nothing (no handler
-- is enabled).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

-- every SQL or PL/pgSQL function of the extension (parsed when it runs)
-- pins search_path; the C ones pin it themselves (README, "search_path")
SELECT p.oid::regprocedure AS unpinned
FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	JOIN pg_proc p ON p.oid = d.objid
	JOIN pg_language l ON l.oid = p.prolang
WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_extension'::regclass
	AND d.deptype = 'e' AND e.extname = 'grelout' AND l.lanname <> 'c'
	AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)
ORDER BY p.oid::regprocedure::text;

CREATE ROLE regress_grelout_sp;
CREATE SCHEMA regress_grelout_sp AUTHORIZATION regress_grelout_sp;
GRANT USAGE ON SCHEMA grelout TO regress_grelout_sp;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON grelout.handlers TO regress_grelout_sp;
GRANT SELECT ON grelout.status TO regress_grelout_sp;
GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid),
	outbox_redrive(text, text, uuid),
	outbox_purge(interval, text, boolean, uuid),
	grelout.capture(regclass, text, text[], text[]),
	grelout.uncapture(regclass)
	TO regress_grelout_sp;

SET ROLE regress_grelout_sp;

-- the log, writable by whoever the planted objects run as
CREATE TABLE regress_grelout_sp.calls (who name, what text);
GRANT INSERT ON regress_grelout_sp.calls TO PUBLIC;
CREATE FUNCTION regress_grelout_sp.hit(what text) RETURNS void
	LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO regress_grelout_sp.calls VALUES (current_user, what);
END $$;

-- operators: each logs itself and then calls pg_catalog's function
DO $plant$
DECLARE
	o record;
BEGIN
	FOR o IN SELECT * FROM (VALUES
		('=', 'text', 'text', 'texteq', 'boolean'),
		('<>', 'text', 'text', 'textne', 'boolean'),
		('<', 'text', 'text', 'text_lt', 'boolean'),
		('||', 'text', 'text', 'textcat', 'text'),
		('=', 'uuid', 'uuid', 'uuid_eq', 'boolean'),
		('<>', 'uuid', 'uuid', 'uuid_ne', 'boolean'),
		('=', 'oid', 'oid', 'oideq', 'boolean'),
		('<>', 'oid', 'oid', 'oidne', 'boolean'),
		('=', 'integer', 'integer', 'int4eq', 'boolean'),
		('<>', 'integer', 'integer', 'int4ne', 'boolean'),
		('<', 'integer', 'integer', 'int4lt', 'boolean'),
		('<=', 'integer', 'integer', 'int4le', 'boolean'),
		('>', 'integer', 'integer', 'int4gt', 'boolean'),
		('>=', 'integer', 'integer', 'int4ge', 'boolean'),
		('=', 'bigint', 'bigint', 'int8eq', 'boolean'),
		('<>', 'bigint', 'bigint', 'int8ne', 'boolean'),
		('<', 'bigint', 'bigint', 'int8lt', 'boolean'),
		('<=', 'bigint', 'bigint', 'int8le', 'boolean'),
		('>', 'bigint', 'bigint', 'int8gt', 'boolean'),
		('>=', 'bigint', 'bigint', 'int8ge', 'boolean'),
		('+', 'bigint', 'bigint', 'int8pl', 'bigint'),
		('=', 'timestamptz', 'timestamptz', 'timestamptz_eq', 'boolean'),
		('<>', 'timestamptz', 'timestamptz', 'timestamptz_ne', 'boolean'),
		('<', 'timestamptz', 'timestamptz', 'timestamptz_lt', 'boolean'),
		('<=', 'timestamptz', 'timestamptz', 'timestamptz_le', 'boolean'),
		('>', 'timestamptz', 'timestamptz', 'timestamptz_gt', 'boolean'),
		('>=', 'timestamptz', 'timestamptz', 'timestamptz_ge', 'boolean'),
		('+', 'timestamptz', 'interval', 'timestamptz_pl_interval', 'timestamptz'),
		('-', 'timestamptz', 'interval', 'timestamptz_mi_interval', 'timestamptz'),
		('=', 'jsonb', 'jsonb', 'jsonb_eq', 'boolean'),
		('<>', 'jsonb', 'jsonb', 'jsonb_ne', 'boolean'),
		('@>', 'jsonb', 'jsonb', 'jsonb_contains', 'boolean'),
		('=', 'boolean', 'boolean', 'booleq', 'boolean'),
		('<>', 'boolean', 'boolean', 'boolne', 'boolean'))
		AS v(op, l, r, fn, res)
	LOOP
		EXECUTE pg_catalog.format(
			'CREATE FUNCTION regress_grelout_sp.%1$s(a %2$s, b %3$s) RETURNS %4$s'
			' LANGUAGE plpgsql AS $f$ BEGIN'
			' PERFORM regress_grelout_sp.hit(%5$L);'
			' RETURN pg_catalog.%1$s(a, b); END $f$',
			o.fn, o.l, o.r, o.res, o.l || ' ' || o.op || ' ' || o.r);
		EXECUTE pg_catalog.format(
			'CREATE OPERATOR regress_grelout_sp.%s (LEFTARG = %s, RIGHTARG = %s,'
			' FUNCTION = regress_grelout_sp.%s)',
			o.op, o.l, o.r, o.fn);
	END LOOP;
END
$plant$;

-- functions and aggregates
CREATE FUNCTION regress_grelout_sp.now() RETURNS timestamptz
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('now()');
	RETURN pg_catalog.now();
END $$;
CREATE FUNCTION regress_grelout_sp.lower(t text) RETURNS text
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('lower(text)');
	RETURN pg_catalog.lower(t);
END $$;
CREATE FUNCTION regress_grelout_sp.left(t text, n integer) RETURNS text
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('left(text, integer)');
	RETURN pg_catalog.left(t, n);
END $$;
CREATE FUNCTION regress_grelout_sp.count_final(s bigint) RETURNS bigint
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('count(*)');
	RETURN s;
END $$;
CREATE AGGREGATE regress_grelout_sp.count(*) (SFUNC = pg_catalog.int8inc,
	STYPE = bigint, INITCOND = '0', FINALFUNC = regress_grelout_sp.count_final);
CREATE FUNCTION regress_grelout_sp.min_final(s timestamptz) RETURNS timestamptz
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('min(timestamptz)');
	RETURN s;
END $$;
CREATE AGGREGATE regress_grelout_sp.min(timestamptz) (
	SFUNC = pg_catalog.timestamptz_smaller, STYPE = timestamptz,
	FINALFUNC = regress_grelout_sp.min_final);
CREATE FUNCTION regress_grelout_sp.bool_or_final(s boolean) RETURNS boolean
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('bool_or(boolean)');
	RETURN s;
END $$;
CREATE AGGREGATE regress_grelout_sp.bool_or(boolean) (
	SFUNC = pg_catalog.boolor_statefunc, STYPE = boolean,
	FINALFUNC = regress_grelout_sp.bool_or_final);
CREATE FUNCTION regress_grelout_sp.array_agg_final(s uuid[]) RETURNS uuid[]
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM regress_grelout_sp.hit('array_agg(uuid)');
	RETURN s;
END $$;
CREATE AGGREGATE regress_grelout_sp.array_agg(uuid) (
	SFUNC = pg_catalog.array_append, STYPE = uuid[],
	FINALFUNC = regress_grelout_sp.array_agg_final);

-- the planted schema first, before pg_catalog
SET search_path = regress_grelout_sp, pg_catalog, public;

-- the planted objects do run for the role's own queries (so that an empty
-- log below means something)
SELECT 'a'::text = 'a' AND now() IS NOT NULL AS own_query;
RESET search_path;
SELECT who, what FROM regress_grelout_sp.calls ORDER BY what;
RESET ROLE;
TRUNCATE regress_grelout_sp.calls;
SET ROLE regress_grelout_sp;
SET search_path = regress_grelout_sp, pg_catalog, public;

-- handler INSERT, UPDATE (topic and filter, enabled off and on, disabled
-- with a handler of grelout's events present), DELETE, TRUNCATE
INSERT INTO grelout.handlers (name, topic, url, enabled)
VALUES ('sp', 'sp.#', 'https://sp.example.com/', false),
	('sp_events', 'grelout.#', 'https://sp.example.com/events', false);
UPDATE grelout.handlers SET topic = 'sp.*', filter = '{"a": 1}'
WHERE name OPERATOR(pg_catalog.=) 'sp';
BEGIN;
UPDATE grelout.handlers SET enabled = true WHERE name OPERATOR(pg_catalog.=) 'sp';
UPDATE grelout.handlers SET enabled = false WHERE name OPERATOR(pg_catalog.=) 'sp';
COMMIT;
SELECT topic, pending FROM grelout.status
WHERE topic OPERATOR(pg_catalog.=) 'grelout.handler.disabled';
DELETE FROM grelout.handlers WHERE name OPERATOR(pg_catalog.=) 'sp';
INSERT INTO grelout.handlers (name, topic, url, enabled)
VALUES ('sp', 'sp.#', 'https://sp.example.com/', false);
TRUNCATE grelout.handlers;

-- publish: plain, with key, headers and delay, with dedup_key (stored,
-- then found again)
SELECT outbox_publish('sp.plain', '{"n": 1}') IS NOT NULL AS published;
SELECT outbox_publish('sp.keyed', '{"n": 2}', key => 'k1',
	headers => '{"x-sp": "1"}', delay => '1 hour') IS NOT NULL AS published;
SELECT outbox_publish('sp.dedup', '{"n": 3}', dedup_key => 'd1') AS dedup_id \gset
SELECT outbox_publish('sp.dedup', '{"n": 4}', dedup_key => 'd1')
	OPERATOR(pg_catalog.=) :'dedup_id'::uuid AS deduplicated;

-- status of a message
SELECT state, attempts, topic FROM outbox_message_status(:'dedup_id');

-- capture writes: INSERT, UPDATE, DELETE, TRUNCATE of a captured table
CREATE TABLE regress_grelout_sp.t (id integer PRIMARY KEY, v text);
SELECT grelout.capture('regress_grelout_sp.t', 'sp.cap',
	'{insert,update,delete,truncate}');
INSERT INTO regress_grelout_sp.t VALUES (1, 'a'), (2, 'b');
UPDATE regress_grelout_sp.t SET v = 'c';
DELETE FROM regress_grelout_sp.t;
INSERT INTO regress_grelout_sp.t VALUES (3, 'd');
TRUNCATE regress_grelout_sp.t;
SELECT grelout.uncapture('regress_grelout_sp.t');

-- redrive and purge (the dead messages made so by an administrator)
RESET search_path;
RESET ROLE;
UPDATE grelout.outbox SET state = 'dead', dead_at = now()
WHERE topic IN ('sp.plain', 'sp.keyed');
SET ROLE regress_grelout_sp;
SET search_path = regress_grelout_sp, pg_catalog, public;
SELECT outbox_redrive('sp.plain') AS redriven;
SELECT outbox_redrive(message_id => id) AS redriven
FROM (SELECT outbox_publish('sp.none', '{}') AS id) AS p;
SELECT outbox_redrive(handler => 'sp') AS redriven;
SELECT outbox_purge(older_than => '1 hour', topic => 'sp.keyed') AS purged;
SELECT outbox_purge(topic => 'sp.keyed') AS purged;
SELECT outbox_purge(topic => 'sp.cap.insert', pending => true) AS purged;
SELECT outbox_purge(message_id => :'dedup_id', pending => true) AS purged;
RESET search_path;
RESET ROLE;

-- nothing of the above ran a planted object, under any role
SELECT who, what FROM regress_grelout_sp.calls ORDER BY what;
SELECT topic, state, count(*) FROM grelout.outbox GROUP BY 1, 2 ORDER BY 1, 2;

SET client_min_messages = warning;
DROP SCHEMA regress_grelout_sp CASCADE;
RESET client_min_messages;
TRUNCATE grelout.outbox, grelout.handlers;
REVOKE ALL ON grelout.handlers, grelout.status FROM regress_grelout_sp;
REVOKE ALL ON SCHEMA grelout FROM regress_grelout_sp;
REVOKE ALL ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid),
	outbox_redrive(text, text, uuid),
	outbox_purge(interval, text, boolean, uuid),
	grelout.capture(regclass, text, text[], text[]),
	grelout.uncapture(regclass)
	FROM regress_grelout_sp;
DROP ROLE regress_grelout_sp;
