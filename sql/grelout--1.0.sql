/* grelout--1.0.sql: the schema, functions and views of grelout 1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION grelout" to load this file. \quit

-- Every object below is created without OR REPLACE or IF NOT EXISTS, so an
-- object that another role created beforehand under one of these names makes
-- CREATE EXTENSION fail instead of being adopted.  The data schema is new.
CREATE SCHEMA grelout;
REVOKE ALL ON SCHEMA grelout FROM PUBLIC;

-- Refuse to install unless the library was loaded at server start: without
-- shared_preload_libraries there is no relay and no wake-up.
CREATE FUNCTION grelout._assert_preloaded() RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_assert_preloaded'
	LANGUAGE C STRICT;
SELECT grelout._assert_preloaded();

-- One row a message.  "lease" is the fencing token of the current claim:
-- a relay settles a row only while the row still carries its token.
CREATE TABLE grelout.outbox (
	id uuid PRIMARY KEY,
	topic text NOT NULL,
	key text,
	payload jsonb NOT NULL,
	headers jsonb NOT NULL DEFAULT '{}',
	dedup_key text,
	attempts integer NOT NULL DEFAULT 0,
	available_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	state text NOT NULL DEFAULT 'pending',
	last_error text,
	delivered_at timestamptz,
	dead_at timestamptz,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	lease bigint,
	CONSTRAINT outbox_state_check
		CHECK (state IN ('pending', 'processing', 'delivered', 'dead')),
	CONSTRAINT outbox_attempts_check CHECK (attempts >= 0)
);
COMMENT ON TABLE grelout.outbox IS 'grelout messages: one row a message';

-- Every delivery leaves dead index entries at the head of the claim index
-- (the claim and the settle each write the row), which each claim walks
-- until VACUUM removes them: vacuum this table after a few thousand changes
-- rather than after a fifth of it has changed.
ALTER TABLE grelout.outbox SET (
	autovacuum_vacuum_scale_factor = 0.0,
	autovacuum_vacuum_threshold = 5000,
	autovacuum_vacuum_insert_scale_factor = 0.0,
	autovacuum_vacuum_insert_threshold = 10000,
	autovacuum_analyze_scale_factor = 0.0,
	autovacuum_analyze_threshold = 5000,
	autovacuum_vacuum_cost_delay = 0);

-- The claim scans only messages that can still be delivered, in due order.
CREATE INDEX outbox_claim_idx ON grelout.outbox (available_at, id)
	WHERE state IN ('pending', 'processing');
-- Producer-side deduplication, across topics, for as long as the row exists.
CREATE UNIQUE INDEX outbox_dedup_key_idx ON grelout.outbox (dedup_key)
	WHERE dedup_key IS NOT NULL;
-- Retention purge of delivered rows kept for a window.
CREATE INDEX outbox_delivered_idx ON grelout.outbox (delivered_at)
	WHERE state = 'delivered';

-- One row a topic, written by an administrator.
CREATE TABLE grelout.handlers (
	topic text PRIMARY KEY,
	url text NOT NULL,
	headers jsonb NOT NULL DEFAULT '{}',
	secret text,
	previous_secret text,
	timeout interval,
	max_attempts integer,
	enabled boolean NOT NULL DEFAULT true
);
COMMENT ON TABLE grelout.handlers IS 'grelout webhook endpoints: one row a topic';

CREATE FUNCTION grelout._handlers_validate() RETURNS trigger
	AS 'MODULE_PATHNAME', 'grelout_handlers_validate'
	LANGUAGE C;

CREATE TRIGGER handlers_validate
	BEFORE INSERT OR UPDATE ON grelout.handlers
	FOR EACH ROW EXECUTE FUNCTION grelout._handlers_validate();

REVOKE ALL ON TABLE grelout.outbox, grelout.handlers FROM PUBLIC;

-- pg_dump keeps the handlers and every message not yet delivered.
SELECT pg_catalog.pg_extension_config_dump('grelout.handlers', '');
SELECT pg_catalog.pg_extension_config_dump('grelout.outbox',
	'WHERE state <> ''delivered''');

-- Producer and operator functions, in the extension's schema.
CREATE FUNCTION @extschema@.outbox_publish(
	topic text,
	payload jsonb,
	key text DEFAULT NULL,
	headers jsonb DEFAULT NULL,
	delay interval DEFAULT NULL,
	dedup_key text DEFAULT NULL)
	RETURNS uuid
	AS 'MODULE_PATHNAME', 'grelout_publish'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_publish(text, jsonb, text, jsonb, interval, text)
	IS 'stage a message in the current transaction; returns its id';

CREATE FUNCTION @extschema@.outbox_redrive(topic text DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'grelout_redrive'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_redrive(text)
	IS 'move dead messages back to pending, due now, with attempts reset';

CREATE FUNCTION @extschema@.outbox_purge(older_than interval DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'grelout_purge'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_purge(interval)
	IS 'delete delivered and dead messages, optionally only older ones';

REVOKE ALL ON FUNCTION
	@extschema@.outbox_publish(text, jsonb, text, jsonb, interval, text),
	@extschema@.outbox_redrive(text),
	@extschema@.outbox_purge(interval),
	grelout._assert_preloaded(),
	grelout._handlers_validate()
	FROM PUBLIC;

-- One row for each topic that has messages or a handler.
CREATE VIEW grelout.status AS
SELECT t.topic,
	pg_catalog.count(o.id) FILTER (WHERE o.state = 'pending') AS pending,
	pg_catalog.count(o.id) FILTER (WHERE o.state = 'processing') AS processing,
	pg_catalog.count(o.id) FILTER (WHERE o.state = 'dead') AS dead,
	pg_catalog.count(o.id) FILTER (WHERE o.state = 'delivered') AS delivered,
	pg_catalog.now() - pg_catalog.min(o.created_at)
		FILTER (WHERE o.state = 'pending' AND o.available_at <= pg_catalog.now())
		AS oldest_pending_age,
	EXISTS (SELECT 1 FROM grelout.handlers h
			WHERE h.topic = t.topic AND h.enabled) AS has_handler
FROM (SELECT topic FROM grelout.outbox
	  UNION
	  SELECT topic FROM grelout.handlers) AS t
	LEFT JOIN grelout.outbox AS o ON o.topic = t.topic
GROUP BY t.topic;
COMMENT ON VIEW grelout.status IS 'grelout messages by topic and state';

-- The handlers as an operator may see them: no secret, no header value.
CREATE VIEW grelout.handlers_masked AS
SELECT topic, url,
	ARRAY(SELECT pg_catalog.jsonb_object_keys(h.headers)) AS header_names,
	secret IS NOT NULL AS has_secret,
	previous_secret IS NOT NULL AS has_previous_secret,
	timeout, max_attempts, enabled
FROM grelout.handlers AS h;
COMMENT ON VIEW grelout.handlers_masked IS 'grelout handlers without secrets or header values';

-- Live counters of the relays, from shared memory.
CREATE FUNCTION grelout.relay_stats(
	OUT relay integer,
	OUT pid integer,
	OUT activity text,
	OUT in_flight integer,
	OUT delivered bigint,
	OUT retried bigint,
	OUT dead_lettered bigint,
	OUT last_error text,
	OUT last_error_at timestamptz,
	OUT started_at timestamptz)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'grelout_relay_stats'
	LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION grelout.relay_stats() FROM PUBLIC;

CREATE VIEW grelout.relays AS SELECT * FROM grelout.relay_stats();
COMMENT ON VIEW grelout.relays IS 'grelout relays: one row a relay, with live counters';

REVOKE ALL ON TABLE grelout.status, grelout.handlers_masked, grelout.relays
	FROM PUBLIC;
