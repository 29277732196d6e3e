-- privileges: nothing of grelout is granted to PUBLIC (but
-- grelout._mask_url, which reads nothing, so that whoever may read
-- grelout.handlers_masked can call it); a role granted
-- EXECUTE on outbox_publish can publish, but can neither read the handlers
-- (their secrets) nor read or change messages, nor run the operator
-- functions, nor change any grelout setting; every SECURITY DEFINER
-- function pins its search_path.  The topics have no handler.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN others THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;

-- the extension's members, and whether PUBLIC holds any privilege on them
CREATE TEMP VIEW members AS
SELECT d.classid::regclass AS catalog, d.objid,
	pg_describe_object(d.classid, d.objid, 0) AS object
FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'grelout'
	AND d.deptype = 'e';

-- every function of the extension: not executable by PUBLIC
SELECT p.oid::regprocedure AS function,
	has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM members m JOIN pg_proc p ON p.oid = m.objid
WHERE m.catalog = 'pg_proc'::regclass ORDER BY p.oid::regprocedure::text;

-- every table, view and sequence of the extension: nothing for PUBLIC
SELECT c.oid::regclass AS relation, c.relkind,
	has_table_privilege('public', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') AS public_any
FROM members m JOIN pg_class c ON c.oid = m.objid
WHERE m.catalog = 'pg_class'::regclass ORDER BY c.oid::regclass::text;

-- the schema grelout: no USAGE or CREATE for PUBLIC, and no ACL entry at
-- all for PUBLIC on anything in it
SELECT has_schema_privilege('public', 'grelout', 'USAGE') AS public_usage,
	has_schema_privilege('public', 'grelout', 'CREATE') AS public_create;
SELECT count(*) AS public_acl_entries_in_grelout
FROM (SELECT c.relacl AS acl FROM pg_class c WHERE c.relnamespace = 'grelout'::regnamespace
	  UNION ALL
	  SELECT p.proacl FROM pg_proc p WHERE p.pronamespace = 'grelout'::regnamespace
	  UNION ALL
	  SELECT n.nspacl FROM pg_namespace n WHERE n.nspname = 'grelout') AS o,
	aclexplode(o.acl) AS a
WHERE a.grantee = 0;

-- every SECURITY DEFINER function of the extension pins search_path to
-- pg_catalog with pg_temp last
SELECT p.oid::regprocedure AS function, p.proconfig
FROM members m JOIN pg_proc p ON p.oid = m.objid
WHERE m.catalog = 'pg_proc'::regclass AND p.prosecdef ORDER BY p.oid::regprocedure::text;
SELECT count(*) AS definer_functions_without_safe_search_path
FROM members m JOIN pg_proc p ON p.oid = m.objid
WHERE m.catalog = 'pg_proc'::regclass AND p.prosecdef
	AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false);

-- an application role that may only publish, and one with no grant at all
CREATE ROLE regress_grelout_app;
CREATE ROLE regress_grelout_nobody;
GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text)
	TO regress_grelout_app;

SET ROLE regress_grelout_nobody;
SELECT pg_temp.try($$SELECT outbox_publish('priv', '{}')$$) AS nobody_publish;
RESET ROLE;

-- the names of grelout's settings, read here: the role cannot see them
-- (issue 29: they are shown to administrators only)
CREATE TEMP TABLE grelout_settings AS
	SELECT name, setting FROM pg_settings WHERE name LIKE 'grelout.%';
GRANT SELECT ON grelout_settings TO PUBLIC;

SET ROLE regress_grelout_app;
-- publishing works, with every argument, dedup included
SELECT outbox_publish('priv', '{"by": "app"}') IS NOT NULL AS app_can_publish;
SELECT outbox_publish('priv', '{"by": "app"}', key => 'k', headers => '{"x-a": "b"}',
	delay => '1 minute', dedup_key => 'priv-1') IS NOT NULL AS app_full_publish;
SELECT outbox_publish('priv', '{"by": "app", "again": true}', dedup_key => 'priv-1') IS NOT NULL AS app_dedup;
-- bad input is refused the same way for the role
SELECT pg_temp.try($$SELECT outbox_publish('priv', '{}', headers => '{"Host": "x"}')$$) AS app_bad_headers;
-- the role cannot read or change the tables, views or operator functions
SELECT pg_temp.try($$SELECT * FROM grelout.outbox$$) AS select_outbox;
SELECT pg_temp.try($$SELECT * FROM grelout.handlers$$) AS select_handlers;
SELECT pg_temp.try($$SELECT * FROM grelout.handlers_masked$$) AS select_handlers_masked;
SELECT pg_temp.try($$SELECT * FROM grelout.status$$) AS select_status;
SELECT pg_temp.try($$SELECT * FROM grelout.relays$$) AS select_relays;
SELECT pg_temp.try($$UPDATE grelout.outbox SET state = 'dead'$$) AS update_outbox;
SELECT pg_temp.try($$DELETE FROM grelout.outbox$$) AS delete_outbox;
SELECT pg_temp.try($$INSERT INTO grelout.outbox (id, topic, payload) VALUES (gen_random_uuid(), 'x', '{}')$$) AS insert_outbox;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url) VALUES ('priv', 'http://127.0.0.1:9/')$$) AS insert_handler;
SELECT pg_temp.try($$TRUNCATE grelout.outbox$$) AS truncate_outbox;
SELECT pg_temp.try($$SELECT outbox_redrive()$$) AS redrive;
SELECT pg_temp.try($$SELECT outbox_redrive('priv')$$) AS redrive_topic;
SELECT pg_temp.try($$SELECT outbox_purge()$$) AS purge;
SELECT pg_temp.try($$SELECT outbox_purge('1 day')$$) AS purge_older;
SELECT pg_temp.try($$SELECT outbox_purge(topic => 'priv', pending => true)$$) AS purge_pending;
SELECT pg_temp.try($$SELECT * FROM outbox_message_status(gen_random_uuid())$$) AS message_status_without_grant;
SELECT pg_temp.try($$SELECT grelout._mask_url('http://u:p@h/')$$) AS mask_url_without_usage;
SELECT pg_temp.try($$SELECT grelout.relay_stats()$$) AS relay_stats;
-- nor change any grelout setting, in any way
SELECT pg_temp.try($$SET grelout.max_payload_size = '100MB'$$) AS set_max_payload;
SELECT pg_temp.try($$SELECT set_config('grelout.max_payload_size', '100MB', false)$$) AS set_config_max_payload;
SELECT pg_temp.try($$SET LOCAL grelout.max_payload_size = '100MB'$$) AS set_local_max_payload;
SELECT pg_temp.try($$ALTER ROLE regress_grelout_app SET grelout.max_payload_size = '100MB'$$) AS alter_role_max_payload;
SELECT replace(pg_temp.try(format('ALTER DATABASE %I SET grelout.max_payload_size = %L',
	current_database(), '100MB')), current_database(), '<this database>') AS alter_database;
SELECT pg_temp.try(format('SET %s = %L', name, setting)) AS result, name
FROM grelout_settings WHERE name <> 'grelout.max_payload_size' ORDER BY name;
SELECT pg_temp.try($$SET grelout.undefined_thing = 1$$) AS set_unknown;
RESET ROLE;
-- ALTER SYSTEM cannot run in a function: psql reports its SQLSTATE
SET ROLE regress_grelout_app;
ALTER SYSTEM SET grelout.max_payload_size = '100MB';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET grelout.relay = off;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- the limit the role ran under stayed the default
SELECT setting FROM pg_settings WHERE name = 'grelout.max_payload_size';
SELECT count(*) AS role_settings FROM pg_db_role_setting
WHERE setrole = 'regress_grelout_app'::regrole;

-- with USAGE on the schema the table privileges still refuse
GRANT USAGE ON SCHEMA grelout TO regress_grelout_app;
SET ROLE regress_grelout_app;
SELECT pg_temp.try($$SELECT count(*) FROM grelout.outbox$$) AS select_outbox_with_usage;
SELECT pg_temp.try($$SELECT secret FROM grelout.handlers$$) AS select_handlers_with_usage;
SELECT pg_temp.try($$UPDATE grelout.outbox SET payload = '{}'$$) AS update_outbox_with_usage;
SELECT pg_temp.try($$SELECT * FROM grelout.status$$) AS select_status_with_usage;
RESET ROLE;
REVOKE USAGE ON SCHEMA grelout FROM regress_grelout_app;

-- what the role published is stored under its name: three calls, the
-- third one deduplicated
SELECT published_by::regrole AS published_by, count(*) AS app_messages,
	count(dedup_key) AS with_dedup_key
FROM grelout.outbox WHERE topic = 'priv' GROUP BY published_by;

-- outbox_message_status is granted like outbox_publish; with it the role
-- sees its own message and nothing of another role's
GRANT EXECUTE ON FUNCTION outbox_message_status(uuid) TO regress_grelout_app;
SELECT outbox_publish('priv.other', '{}') AS other_id \gset
SET ROLE regress_grelout_app;
SELECT outbox_publish('priv.status', '{}') AS own_id \gset
SELECT state, topic FROM outbox_message_status(:'own_id');
SELECT count(*) AS other_role_rows FROM outbox_message_status(:'other_id');
RESET ROLE;
SET ROLE regress_grelout_nobody;
SELECT pg_temp.try(format('SELECT * FROM outbox_message_status(%L)', :'own_id')) AS nobody_status;
RESET ROLE;
DELETE FROM grelout.outbox WHERE topic IN ('priv.other', 'priv.status');

-- an operator role given EXECUTE on the operator functions can use them
-- without any right on the tables
CREATE ROLE regress_grelout_ops;
GRANT EXECUTE ON FUNCTION outbox_redrive(text, text, uuid), outbox_purge(interval, text, boolean, uuid) TO regress_grelout_ops;
UPDATE grelout.outbox SET state = 'dead', dead_at = now() WHERE topic = 'priv' AND dedup_key IS NULL;
SET ROLE regress_grelout_ops;
SELECT outbox_redrive('priv') AS ops_redrive;
SELECT pg_temp.try($$SELECT * FROM grelout.outbox$$) AS ops_select_outbox;
RESET ROLE;
UPDATE grelout.outbox SET state = 'delivered', delivered_at = now() WHERE topic = 'priv' AND dedup_key IS NULL;
SET ROLE regress_grelout_ops;
SELECT outbox_purge() AS ops_purge;
-- the operator may also delete the pending messages of a topic
SELECT outbox_purge(topic => 'priv', pending => true) AS ops_purge_pending;
RESET ROLE;
SELECT count(*) AS left_messages FROM grelout.outbox WHERE topic = 'priv';

-- a hostile role cannot hijack the SECURITY DEFINER functions through its
-- search_path: objects it places first on the path are not used
CREATE SCHEMA regress_grelout_evil AUTHORIZATION regress_grelout_app;
SET ROLE regress_grelout_app;
CREATE FUNCTION regress_grelout_evil.now() RETURNS timestamptz LANGUAGE sql
	AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE TABLE regress_grelout_evil.outbox (id uuid, topic text, key text,
	payload jsonb, headers jsonb, dedup_key text, available_at timestamptz);
SET search_path = regress_grelout_evil, public, pg_catalog;
SELECT outbox_publish('priv.hijack', '{}') IS NOT NULL AS published;
SELECT count(*) AS rows_in_evil_table FROM regress_grelout_evil.outbox;
RESET search_path;
RESET ROLE;
SELECT available_at > '2001-01-01' AS real_now_used FROM grelout.outbox WHERE topic = 'priv.hijack';

SET client_min_messages = warning;
DROP SCHEMA regress_grelout_evil CASCADE;
RESET client_min_messages;
TRUNCATE grelout.outbox;
REVOKE ALL ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid) FROM regress_grelout_app;
REVOKE ALL ON FUNCTION outbox_redrive(text, text, uuid), outbox_purge(interval, text, boolean, uuid) FROM regress_grelout_ops;
DROP ROLE regress_grelout_app, regress_grelout_nobody, regress_grelout_ops;
