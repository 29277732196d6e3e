/* grelout--1.0--1.1.sql: from grelout 1.0 to 1.1 (publisher isolation) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION grelout UPDATE TO '1.1'" to load this file. \quit

-- A fresh 1.1 install runs grelout--1.0.sql and then this script, so an
-- upgraded database and a new one have the same schema.  Like the install
-- script, nothing here is created with IF NOT EXISTS, and OR REPLACE only
-- where replacing the extension's own object (keeping its grants) is the
-- point.  The 1.1 SQL functions point at new C symbols, so every backend
-- uses the 1.1 statements from its first call after this commits.

-- Take the outbox first: publishers and relays finish the transaction they
-- are in under 1.0 and continue under 1.1.
LOCK TABLE grelout.outbox IN ACCESS EXCLUSIVE MODE;

-- The role that published each message (current_user at outbox_publish),
-- an oid shown as regrole: a restore where the role is missing keeps the
-- message.  Messages stored under 1.0 have none.
ALTER TABLE grelout.outbox ADD COLUMN published_by oid;
COMMENT ON COLUMN grelout.outbox.published_by
	IS 'the role that published the message; NULL for messages stored under 1.0';

-- dedup_key is unique per publishing role: an insert waits only on a
-- transaction of the same role.  The keys stored under 1.0 (published_by
-- NULL) stay unique among themselves, and outbox_publish matches them for
-- every role.
DROP INDEX grelout.outbox_dedup_key_idx;
CREATE UNIQUE INDEX outbox_dedup_key_idx ON grelout.outbox (published_by, dedup_key)
	NULLS NOT DISTINCT WHERE dedup_key IS NOT NULL;

-- outbox_publish runs as its caller, so that current_user is the publisher,
-- and raises its privileges itself for its statements.  Replaced in place:
-- EXECUTE grants stay.
CREATE OR REPLACE FUNCTION @extschema@.outbox_publish(
	topic text,
	payload jsonb,
	key text DEFAULT NULL,
	headers jsonb DEFAULT NULL,
	delay interval DEFAULT NULL,
	dedup_key text DEFAULT NULL)
	RETURNS uuid
	AS 'MODULE_PATHNAME', 'grelout_publish_1_1'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;

-- A publisher's view of one of its own messages.
CREATE FUNCTION @extschema@.outbox_message_status(id uuid)
	RETURNS TABLE (
		state text,
		attempts integer,
		last_error text,
		available_at timestamptz,
		created_at timestamptz,
		topic text,
		handler text)
	AS 'MODULE_PATHNAME', 'grelout_message_status_1_1'
	LANGUAGE C STRICT STABLE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_message_status(uuid)
	IS 'the state of a message the calling role published, one row a handler';
REVOKE ALL ON FUNCTION @extschema@.outbox_message_status(uuid) FROM PUBLIC;

-- outbox_purge gets a topic and, for operators, pending.  One function
-- replaces the 1.0 one, so outbox_purge('30 days') stays unambiguous, and
-- the EXECUTE grants of the old signature carry over to the new one
-- without becoming part of the extension's initial privileges (so pg_dump
-- still dumps them, as it did the old ones).
CREATE FUNCTION @extschema@.outbox_purge(
	older_than interval DEFAULT NULL,
	topic text DEFAULT NULL,
	pending boolean DEFAULT false)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'grelout_purge_1_1'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_purge(interval, text, boolean)
	IS 'delete delivered and dead messages, optionally only older ones or of one topic; with pending, also the undelivered messages of a topic';
REVOKE ALL ON FUNCTION @extschema@.outbox_purge(interval, text, boolean) FROM PUBLIC;

DO $grants$
DECLARE
	old_fn CONSTANT pg_catalog.regprocedure :=
		'@extschema@.outbox_purge(interval)'::pg_catalog.regprocedure;
	new_fn CONSTANT pg_catalog.regprocedure :=
		'@extschema@.outbox_purge(interval, text, boolean)'::pg_catalog.regprocedure;
	initial pg_catalog.aclitem[];
	g record;
BEGIN
	SELECT i.initprivs INTO STRICT initial FROM pg_catalog.pg_init_privs AS i
	WHERE i.objoid = new_fn AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
		AND i.objsubid = 0;
	FOR g IN
		SELECT r.rolname, a.is_grantable
		FROM pg_catalog.pg_proc AS p,
			pg_catalog.aclexplode(p.proacl) AS a,
			pg_catalog.pg_roles AS r
		WHERE p.oid = old_fn AND a.privilege_type = 'EXECUTE'
			AND a.grantee = r.oid AND a.grantee <> p.proowner
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I%s',
			new_fn, g.rolname,
			CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;
	-- these grants are the administrator's, not the extension's
	UPDATE pg_catalog.pg_init_privs SET initprivs = initial
	WHERE objoid = new_fn AND classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
		AND objsubid = 0;
END
$grants$;

DROP FUNCTION @extschema@.outbox_purge(interval);

-- Handler URLs are shown with their userinfo, query values and fragment
-- masked.  Executable by PUBLIC, unlike every other grelout function: it
-- reads nothing, and whoever may read the view must be able to call it.
CREATE FUNCTION grelout._mask_url(url text) RETURNS text
	AS 'MODULE_PATHNAME', 'grelout_mask_url'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION grelout._mask_url(text)
	IS 'a URL with its userinfo, query values and fragment masked';

CREATE OR REPLACE VIEW grelout.handlers_masked AS
SELECT topic, grelout._mask_url(url) AS url,
	ARRAY(SELECT pg_catalog.jsonb_object_keys(h.headers)) AS header_names,
	secret IS NOT NULL AS has_secret,
	previous_secret IS NOT NULL AS has_previous_secret,
	timeout, max_attempts, enabled
FROM grelout.handlers AS h;
COMMENT ON VIEW grelout.handlers_masked
	IS 'grelout handlers without secrets, header values or URL credentials';
