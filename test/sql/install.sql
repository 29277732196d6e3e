-- install: CREATE EXTENSION puts the producer functions in the schema it is
-- given (public by default) and the data in schema grelout; it refuses to
-- adopt objects that another role created beforehand under its names; the
-- extension is not relocatable; DROP EXTENSION removes everything.  Runs in
-- a database of its own, which the relays do not serve.
\set VERBOSITY terse
SELECT current_database() AS regress_db \gset
CREATE DATABASE regress_grelout_install;
CREATE ROLE regress_grelout_hostile;
\c regress_grelout_install
\set VERBOSITY terse
GRANT CREATE ON SCHEMA public TO regress_grelout_hostile;
GRANT CREATE ON DATABASE regress_grelout_install TO regress_grelout_hostile;

-- a function pre-created under the producer function's name and signature
SET ROLE regress_grelout_hostile;
CREATE FUNCTION public.outbox_publish(topic text, payload jsonb,
	key text DEFAULT NULL, headers jsonb DEFAULT NULL,
	delay interval DEFAULT NULL, dedup_key text DEFAULT NULL)
	RETURNS uuid LANGUAGE sql AS $$SELECT NULL::uuid$$;
RESET ROLE;
CREATE EXTENSION grelout;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'grelout';
SELECT pg_get_userbyid(proowner) AS owner FROM pg_proc WHERE proname = 'outbox_publish';
DROP FUNCTION public.outbox_publish(text, jsonb, text, jsonb, interval, text);

-- the same for the operator functions
SET ROLE regress_grelout_hostile;
CREATE FUNCTION public.outbox_purge(older_than interval DEFAULT NULL,
	topic text DEFAULT NULL, pending boolean DEFAULT false, message_id uuid DEFAULT NULL)
	RETURNS bigint LANGUAGE sql AS $$SELECT 0::bigint$$;
RESET ROLE;
CREATE EXTENSION grelout;
\echo :LAST_ERROR_SQLSTATE
DROP FUNCTION public.outbox_purge(interval, text, boolean, uuid);

-- and for a function 1.0 did not have (1.2 installs from one script, so
-- a function of 1.0's signature that later versions replaced, such as
-- outbox_purge(interval), is no longer in the way: a call that matches both
-- it and grelout's then fails as ambiguous, as it would have were it
-- created after the install)
SET ROLE regress_grelout_hostile;
CREATE FUNCTION public.outbox_message_status(id uuid) RETURNS TABLE (state text)
	LANGUAGE sql AS $$SELECT 'hijacked'$$;
RESET ROLE;
CREATE EXTENSION grelout;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'grelout';
DROP FUNCTION public.outbox_message_status(uuid);

-- a schema grelout pre-created, with a table in it
SET ROLE regress_grelout_hostile;
CREATE SCHEMA grelout;
CREATE TABLE grelout.outbox (id uuid);
RESET ROLE;
CREATE EXTENSION grelout;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'grelout';
SET client_min_messages = warning;
DROP SCHEMA grelout CASCADE;
RESET client_min_messages;

-- with nothing in the way, it installs into the schema it is given
CREATE SCHEMA app;
CREATE EXTENSION grelout SCHEMA app;
SELECT n.nspname AS schema, p.proname, p.prosecdef AS security_definer
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname LIKE 'outbox\_%' ORDER BY p.proname;
SELECT e.extrelocatable, n.nspname AS extension_schema
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'grelout';
-- the data lives in grelout, owned by the installing superuser
SELECT c.relname, c.relkind, pg_get_userbyid(c.relowner) = current_user AS owned_by_installer
FROM pg_class c WHERE c.relnamespace = 'grelout'::regnamespace AND c.relkind IN ('r', 'v')
ORDER BY c.relname;
SELECT pg_get_userbyid(nspowner) = current_user AS grelout_schema_owned_by_installer
FROM pg_namespace WHERE nspname = 'grelout';
-- qualified by that schema, it works here too (the relays serve another
-- database: the message simply waits)
SELECT app.outbox_publish('install', '{}') IS NOT NULL AS published;
SELECT count(*) AS stored FROM grelout.outbox;
-- not relocatable
CREATE SCHEMA elsewhere;
ALTER EXTENSION grelout SET SCHEMA elsewhere;
\echo :LAST_ERROR_SQLSTATE
-- a second CREATE EXTENSION is refused
CREATE EXTENSION grelout;
\echo :LAST_ERROR_SQLSTATE
-- DROP EXTENSION removes the functions, tables, views and schema grelout
DROP EXTENSION grelout;
SELECT count(*) AS functions_left FROM pg_proc WHERE proname LIKE 'outbox\_%';
SELECT count(*) AS grelout_schemas_left FROM pg_namespace WHERE nspname = 'grelout';

-- by default: into the first schema of the search path, public
CREATE EXTENSION grelout;
SELECT p.oid::regprocedure AS function
FROM pg_proc p WHERE p.proname LIKE 'outbox\_%' ORDER BY p.proname;
SELECT outbox_publish('install', '{}') IS NOT NULL AS published_unqualified;

\c :regress_db
DROP DATABASE regress_grelout_install;
DROP ROLE regress_grelout_hostile;
