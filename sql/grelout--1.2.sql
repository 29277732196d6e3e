/* grelout--1.2.sql: the whole schema of grelout 1.2, as CREATE EXTENSION installs it */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION grelout" to load this file. \quit

-- This one file is the current schema.  A database that was installed at
-- an earlier version reaches the same schema through the upgrade scripts
-- (grelout--1.0--1.1.sql, grelout--1.1--1.2.sql), which stay as released;
-- test/t/092_schema_identity.pl checks that both ways give the same
-- objects, columns in the same order, comments and privileges.  So a change
-- here is made in the next upgrade script too, and the columns of a table
-- are listed in the order the upgrades add them (at the end).
--
-- Every object below is created without OR REPLACE or IF NOT EXISTS, so an
-- object that another role created beforehand under one of these names makes
-- CREATE EXTENSION fail instead of being adopted.  Calls are qualified with
-- pg_catalog, and every function that runs SQL pins its search_path.  The
-- numbers the library and the SQL share (the advisory lock keys) are the
-- library's alone (src/pure/constants.h): the SQL calls it to take a lock.

------------------------------------------------------------------------
-- The schema
------------------------------------------------------------------------

-- The data schema: tables, views and the internal functions.  The
-- producer and operator functions go into the extension's schema
-- (@extschema@, normally public).  Nobody but its owner uses it by default.
CREATE SCHEMA grelout;
REVOKE ALL ON SCHEMA grelout FROM PUBLIC;

-- Refuse to install unless the library was loaded at server start: without
-- shared_preload_libraries there is no relay and no wake-up.
CREATE FUNCTION grelout._assert_preloaded() RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_assert_preloaded'
	LANGUAGE C STRICT;
SELECT grelout._assert_preloaded();

------------------------------------------------------------------------
-- Tables
------------------------------------------------------------------------

-- grelout.outbox: one row a message.  A message is routed once it has
-- committed (route): to no handler (waiting), to one (single: its one
-- delivery kept inline in this row, "handler" its handler), or to several
-- (fanout: one grelout.fanout row a handler, the payload staying here).
-- "lease" is the fencing token of the current claim: a relay settles a row
-- only while the row still carries its token.
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
	published_by pg_catalog.regrole,
	route text NOT NULL DEFAULT 'new',
	handler text,
	last_status integer,
	last_duration_ms integer,
	fanout_delivered boolean NOT NULL DEFAULT false,
	seq bigint,
	CONSTRAINT outbox_state_check
		CHECK (state IN ('pending', 'processing', 'delivered', 'dead')),
	CONSTRAINT outbox_attempts_check CHECK (attempts >= 0),
	CONSTRAINT outbox_route_check
		CHECK (route IN ('new', 'waiting', 'single', 'fanout'))
);
COMMENT ON TABLE grelout.outbox IS 'grelout messages: one row a message';
-- A regrole, so that pg_dump writes the role's name and a restore into
-- another cluster (where the role has another oid) keeps the publisher:
-- its dedup keys and its ordered keys hold across the move.  pg_upgrade
-- keeps role oids (and accepts regrole columns).  The role must exist when
-- the data is restored (pg_dumpall restores roles first); a dropped role's
-- messages keep its bare oid.
COMMENT ON COLUMN grelout.outbox.published_by
	IS 'the role that published the message; NULL for messages stored under 1.0';
COMMENT ON COLUMN grelout.outbox.route
	IS 'new (not yet routed), waiting (no handler matched), single (one inline delivery) or fanout (rows of grelout.fanout)';
COMMENT ON COLUMN grelout.outbox.handler
	IS 'the handler of the inline delivery (route single)';
-- With keep_delivered off, the relay deletes a fan-out delivery's row as
-- soon as it is delivered, rather than marking it delivered and deleting
-- it with its message; the message keeps the fact that one was.
COMMENT ON COLUMN grelout.outbox.fanout_delivered
	IS 'route fanout: a delivery was delivered and its row deleted (keep_delivered off)';
COMMENT ON COLUMN grelout.outbox.seq
	IS 'the routing order of a message with a key (NULL until routed, or without a key)';

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

-- The claim: the inline deliveries of one handler that can still be
-- delivered, in due order.
CREATE INDEX outbox_claim_idx ON grelout.outbox (handler, available_at, id)
	WHERE route = 'single' AND state IN ('pending', 'processing');
-- Producer-side deduplication, per publishing role, across topics, for as
-- long as the row exists: an insert waits only on a transaction of the
-- same role.  The keys stored under 1.0 (published_by NULL) are unique
-- among themselves, and outbox_publish matches them for every role.
CREATE UNIQUE INDEX outbox_dedup_key_idx ON grelout.outbox (published_by, dedup_key)
	NULLS NOT DISTINCT WHERE dedup_key IS NOT NULL;
-- Retention purge of delivered rows kept for a window.
CREATE INDEX outbox_delivered_idx ON grelout.outbox (delivered_at)
	WHERE state = 'delivered';
-- The router reads the messages not yet routed.
CREATE INDEX outbox_route_idx ON grelout.outbox (id) WHERE route = 'new';
-- A new handler's creation reads the messages waiting for one.
CREATE INDEX outbox_waiting_idx ON grelout.outbox (topic) WHERE route = 'waiting';
-- The head test of the claim for ordered handlers: the unfinished inline
-- deliveries of a (handler, key, publisher) in routing order, and those of
-- a (handler, key) in flight.  A message stored under 1.0 (published_by
-- NULL) counts as a publisher of its own, 0 (no role has oid 0).
CREATE INDEX outbox_publisher_key_idx ON grelout.outbox
	(handler, key, (coalesce(published_by, 0::pg_catalog.oid)), seq)
	WHERE route = 'single' AND key IS NOT NULL
		AND state IN ('pending', 'processing', 'dead');
CREATE INDEX outbox_key_processing_idx ON grelout.outbox (handler, key)
	WHERE route = 'single' AND key IS NOT NULL AND state = 'processing';
-- grelout.handler_status counts a handler's dead inline deliveries.
CREATE INDEX outbox_dead_idx ON grelout.outbox (handler)
	WHERE route = 'single' AND state = 'dead';

-- grelout.handlers: one row a handler, written by an administrator.  The
-- columns before "name" are 1.0's, when a handler was identified by its
-- topic; "topic" is now a pattern.
CREATE TABLE grelout.handlers (
	topic text NOT NULL,
	url text NOT NULL,
	headers jsonb NOT NULL DEFAULT '{}',
	secret text,
	previous_secret text,
	timeout interval,
	max_attempts integer,
	enabled boolean NOT NULL DEFAULT true,
	name text NOT NULL,
	filter jsonb,
	max_in_flight integer,
	max_per_second integer,
	ordered boolean NOT NULL DEFAULT false,
	on_dead text NOT NULL DEFAULT 'block',
	tls_client_cert text,
	tls_client_key text,
	tls_ca text,
	oauth jsonb,
	CONSTRAINT handlers_pkey PRIMARY KEY (name)
);
COMMENT ON TABLE grelout.handlers IS 'grelout webhook endpoints: one row a handler';
COMMENT ON COLUMN grelout.handlers.name
	IS 'the handler''s identity; the topic text when an INSERT gives none';
COMMENT ON COLUMN grelout.handlers.topic
	IS 'the topics the handler takes: a pattern, "*" one segment, "#" zero or more';
COMMENT ON COLUMN grelout.handlers.filter
	IS 'NULL, or a JSON object the payload must contain (payload @> filter)';
COMMENT ON COLUMN grelout.handlers.tls_client_cert
	IS 'PEM: the client certificate (and its chain) this handler presents to its HTTPS endpoint (mutual TLS); with tls_client_key';
COMMENT ON COLUMN grelout.handlers.tls_client_key
	IS 'PEM, unencrypted: the private key of tls_client_cert (a secret)';
COMMENT ON COLUMN grelout.handlers.tls_ca
	IS 'PEM: the certificates this handler trusts for its endpoint, instead of grelout.ca_file';
COMMENT ON COLUMN grelout.handlers.oauth
	IS 'OAuth2 client credentials: {"token_url", "client_id", "client_secret", "scope", "audience"} (client_secret is a secret)';

-- grelout.fanout: the deliveries of messages routed to several handlers,
-- one row each.  "lease" is the fencing token of the row's current claim,
-- as in outbox; key and seq are the message's, copied at routing.
CREATE TABLE grelout.fanout (
	message_id uuid NOT NULL,
	handler text NOT NULL,
	state text NOT NULL DEFAULT 'pending',
	attempts integer NOT NULL DEFAULT 0,
	available_at timestamptz NOT NULL,
	lease bigint,
	last_error text,
	last_status integer,
	last_duration_ms integer,
	delivered_at timestamptz,
	dead_at timestamptz,
	created_at timestamptz NOT NULL,
	key text,
	seq bigint,
	CONSTRAINT fanout_pkey PRIMARY KEY (message_id, handler),
	CONSTRAINT fanout_state_check
		CHECK (state IN ('pending', 'processing', 'delivered', 'dead')),
	CONSTRAINT fanout_attempts_check CHECK (attempts >= 0)
);
COMMENT ON TABLE grelout.fanout
	IS 'grelout deliveries of messages routed to several handlers: one row a (message, handler)';
COMMENT ON COLUMN grelout.fanout.key IS 'the message''s key, copied at routing';
COMMENT ON COLUMN grelout.fanout.seq IS 'the message''s routing order, copied at routing';

-- Vacuumed as grelout.outbox is, for the same reason.
ALTER TABLE grelout.fanout SET (
	autovacuum_vacuum_scale_factor = 0.0,
	autovacuum_vacuum_threshold = 5000,
	autovacuum_vacuum_insert_scale_factor = 0.0,
	autovacuum_vacuum_insert_threshold = 10000,
	autovacuum_analyze_scale_factor = 0.0,
	autovacuum_analyze_threshold = 5000,
	autovacuum_vacuum_cost_delay = 0);

-- The claim, in due order per handler.
CREATE INDEX fanout_claim_idx ON grelout.fanout (handler, available_at, message_id)
	WHERE state IN ('pending', 'processing');
-- The head test of the claim for ordered handlers, as in outbox.
CREATE INDEX fanout_key_idx ON grelout.fanout (handler, key, seq)
	WHERE key IS NOT NULL AND state IN ('pending', 'processing', 'dead');
CREATE INDEX fanout_key_processing_idx ON grelout.fanout (handler, key)
	WHERE key IS NOT NULL AND state = 'processing';
-- grelout.handler_status counts a handler's dead fan-out deliveries.
CREATE INDEX fanout_dead_idx ON grelout.fanout (handler) WHERE state = 'dead';

-- grelout.handler_health: the circuit breaker of each handler whose
-- breaker has changed, stored on its transitions (the relays keep the live
-- state in shared memory).
CREATE TABLE grelout.handler_health (
	handler text PRIMARY KEY,
	breaker text NOT NULL,
	consecutive_failures integer NOT NULL DEFAULT 0,
	opened_at timestamptz,
	probe_at timestamptz,
	cooldown_ms bigint NOT NULL DEFAULT 0,
	version bigint NOT NULL DEFAULT 0,
	last_success_at timestamptz,
	last_failure_at timestamptz,
	last_error text,
	CONSTRAINT handler_health_breaker_check
		CHECK (breaker IN ('closed', 'open', 'half-open'))
);
COMMENT ON TABLE grelout.handler_health
	IS 'grelout circuit breakers, one row a handler whose breaker has changed (written by the relays on transitions)';

-- grelout.attempts: the attempt log (issue 33): one row an attempt the
-- relays settled, as grelout.log_attempts says (failed ones by default),
-- written in the settle's transaction, so that an attempt whose settle is
-- lost leaves no row; what the endpoint answered (status, the body's first
-- grelout.attempt_body_max bytes as text, its Content-Type), or the error
-- of an attempt without an answer ("error" is its last_error).  No foreign
-- key: the log outlives its messages (a delivered message is deleted at
-- once unless kept) until the relays purge it after grelout.keep_attempts.
-- Administrators only; publishers see their messages' outcome through
-- outbox_message_status, never a response body.
CREATE TABLE grelout.attempts (
	message_id uuid NOT NULL,
	handler text NOT NULL,
	attempt integer NOT NULL,
	started_at timestamptz NOT NULL,
	duration_ms integer,
	status integer,
	error text,
	response_body text,
	content_type text
);
COMMENT ON TABLE grelout.attempts
	IS 'grelout attempt log, one row a logged delivery attempt (written by the relays, purged after grelout.keep_attempts)';
-- A message's attempts, in order.
CREATE INDEX attempts_message_idx ON grelout.attempts (message_id, attempt);
-- The relays' purge, oldest first.
CREATE INDEX attempts_started_idx ON grelout.attempts (started_at);

------------------------------------------------------------------------
-- Sequences
------------------------------------------------------------------------

-- The routing order of messages with a key: the relay numbers each when it
-- routes it, that is when it first sees it committed, so an ordered
-- handler gets a key's messages in the order their commits became visible.
CREATE SEQUENCE grelout.route_seq;
COMMENT ON SEQUENCE grelout.route_seq
	IS 'the routing order of messages with a key, for ordered handlers';

-- pg_dump keeps the handlers, their breakers, every message and delivery
-- not yet delivered, and the routing order's value (restored messages keep
-- their order before new ones); not the attempt log, a log of what
-- happened in the dumped cluster.
SELECT pg_catalog.pg_extension_config_dump('grelout.handlers', '');
SELECT pg_catalog.pg_extension_config_dump('grelout.outbox',
	'WHERE state <> ''delivered''');
SELECT pg_catalog.pg_extension_config_dump('grelout.fanout',
	'WHERE state <> ''delivered''');
SELECT pg_catalog.pg_extension_config_dump('grelout.route_seq', '');
SELECT pg_catalog.pg_extension_config_dump('grelout.handler_health', '');

------------------------------------------------------------------------
-- Functions: producers and operators (in the extension's schema)
------------------------------------------------------------------------

-- Runs as its caller, so that current_user is the publisher, and raises
-- its privileges itself for its statements.
CREATE FUNCTION @extschema@.outbox_publish(
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
COMMENT ON FUNCTION @extschema@.outbox_publish(text, jsonb, text, jsonb, interval, text)
	IS 'stage a message in the current transaction; returns its id';

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

CREATE FUNCTION @extschema@.outbox_redrive(
	topic text DEFAULT NULL,
	handler text DEFAULT NULL,
	message_id uuid DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'grelout_redrive_1_1'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_redrive(text, text, uuid)
	IS 'move dead deliveries (of a topic, a handler, a message) back to pending, due now, with attempts reset';

CREATE FUNCTION @extschema@.outbox_purge(
	older_than interval DEFAULT NULL,
	topic text DEFAULT NULL,
	pending boolean DEFAULT false,
	message_id uuid DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'grelout_purge_1_1'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.outbox_purge(interval, text, boolean, uuid)
	IS 'delete delivered and dead messages, optionally only older ones, of one topic or one message; with pending, also the undelivered messages of a topic or the message';

------------------------------------------------------------------------
-- Functions: administration (in the data schema)
------------------------------------------------------------------------

-- Sets a handler's signing secret (or, with previous, its previous_secret;
-- NULL clears it) after checking it, and never quotes it in an error.
-- Called with the secret as a bind parameter, the secret is in no
-- statement's text, so the server log line PostgreSQL writes for a failing
-- statement cannot carry it.  Runs as its caller, who must be able to
-- UPDATE grelout.handlers.
CREATE FUNCTION grelout.set_secret(handler text, secret text,
	previous boolean DEFAULT false)
	RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_set_secret_1_2'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.set_secret(text, text, boolean)
	IS 'set a handler''s signing secret (previous => true: its previous_secret) without the secret in the statement''s text';

-- issue 34: asymmetric signatures (Standard Webhooks "v1a", ed25519)
--
-- A handler's secret (or previous_secret) may be an ed25519 signing key,
-- "whsk_" + base64 of its 32-byte seed (or of seed and public key, 64
-- bytes); its requests then carry "v1a,<base64 signature>".
-- new_signing_key() makes one from the server's strong random source;
-- handler_public_key(name) gives the "whpk_" public key of a handler's
-- secret, to hand to its receiver (NULL when that secret is no signing
-- key).  Neither is executable by PUBLIC, as no function of grelout is but
-- the two pure helpers of the views.  new_signing_key runs as its caller
-- and reads nothing.  handler_public_key reads the handler's secret with
-- the extension owner's rights (SECURITY DEFINER) and returns only its
-- public key: an administrator may GRANT EXECUTE on it to a role that must
-- not read grelout.handlers.
CREATE FUNCTION grelout.new_signing_key()
	RETURNS text
	AS 'MODULE_PATHNAME', 'grelout_new_signing_key_1_2'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.new_signing_key()
	IS 'a new ed25519 signing key for a handler''s secret (whsk_...), from the server''s strong random source';
REVOKE ALL ON FUNCTION grelout.new_signing_key() FROM PUBLIC;
CREATE FUNCTION grelout.handler_public_key(name text)
	RETURNS text
	AS 'MODULE_PATHNAME', 'grelout_handler_public_key_1_2'
	LANGUAGE C STABLE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.handler_public_key(text)
	IS 'the public key (whpk_...) of a handler''s ed25519 signing key, to give to its receiver; NULL when its secret is no signing key';
REVOKE ALL ON FUNCTION grelout.handler_public_key(text) FROM PUBLIC;

------------------------------------------------------------------------
-- issue 33: metrics where operators look
--
-- grelout.metrics(): every handler's and relay's counters and gauges of
-- the server (all databases), read from shared memory, one row a
-- Prometheus sample: metric is the series name (grelout_*), database,
-- handler, relay and le its labels (NULL: none), value its value.
-- Counters count from the server's start; the commit-to-delivery latency
-- histogram's buckets are cumulative, le in seconds.
-- contrib/prometheus/queries.yaml maps it onto prometheus-postgres-exporter.
-- Not PUBLIC's: it names the handlers of every database.  It shows no
-- URL, no error and no payload, so it is granted to pg_monitor, the
-- predefined role of monitoring tools (which already sees the queries of
-- every database).  USAGE on the schema grelout is not granted here: in
-- the upgrade that GRANT would record the schema's whole ACL, the
-- administrator's own grants included, as the extension's initial
-- privileges, which pg_dump then leaves out (test 092); the administrator
-- grants it to the exporter's role (README, "Metrics").
CREATE FUNCTION grelout.metrics(
	OUT database name,
	OUT handler text,
	OUT relay integer,
	OUT metric text,
	OUT le text,
	OUT value double precision)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'grelout_metrics'
	LANGUAGE C VOLATILE STRICT SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.metrics()
	IS 'the handlers'' and relays'' counters, gauges and latency histogram of the server, one row a Prometheus sample (contrib/prometheus)';
REVOKE ALL ON FUNCTION grelout.metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION grelout.metrics() TO pg_monitor;

-- grelout.capture(tbl) puts triggers on a table that publish each row
-- change in the writing transaction, as outbox_publish would; the triggers
-- call grelout._capture() with the topic and the captured columns as their
-- arguments, so pg_dump dumps them and a restore brings them back.  Run as
-- the caller: only the table's owner (current_user) or a superuser may
-- capture or uncapture it, whoever was granted EXECUTE.
CREATE FUNCTION grelout.capture(
	tbl pg_catalog.regclass,
	topic text DEFAULT NULL,
	events text[] DEFAULT '{insert,update,delete}',
	columns text[] DEFAULT NULL)
	RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_capture_1_1'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.capture(pg_catalog.regclass, text, text[], text[])
	IS 'publish the row changes of a table: topic <topic>.<op>, key its primary key';

CREATE FUNCTION grelout.uncapture(tbl pg_catalog.regclass)
	RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_uncapture_1_1'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.uncapture(pg_catalog.regclass)
	IS 'stop publishing the row changes of a table';

-- Live counters of the relays of this database, from shared memory (1.0's;
-- grelout.relays reads relay_stats_by_database).
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

-- Live counters of the relays of every served database, and a row (relay
-- and pid null) for a database left unserved for lack of relays.
CREATE FUNCTION grelout.relay_stats_by_database(
	OUT relay integer,
	OUT pid integer,
	OUT activity text,
	OUT in_flight integer,
	OUT delivered bigint,
	OUT retried bigint,
	OUT dead_lettered bigint,
	OUT last_error text,
	OUT last_error_at timestamptz,
	OUT started_at timestamptz,
	OUT database name)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'grelout_relay_stats_1_1'
	LANGUAGE C STRICT VOLATILE;

------------------------------------------------------------------------
-- Functions: internal helpers
------------------------------------------------------------------------

-- Handler URLs are shown with their userinfo, query values and fragment
-- masked.  Executable by PUBLIC, unlike every other grelout function but
-- _topic_matches: it reads nothing, and whoever may read
-- grelout.handlers_masked must be able to call it.
CREATE FUNCTION grelout._mask_url(url text) RETURNS text
	AS 'MODULE_PATHNAME', 'grelout_mask_url'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION grelout._mask_url(text)
	IS 'a URL with its userinfo, query values and fragment masked';

-- Does a message's topic match a handler's topic pattern ('*' one segment,
-- '#' zero or more).  Executable by PUBLIC, like _mask_url: it reads
-- nothing, and grelout.status, which whoever may read the view runs with
-- their own rights, calls it.
CREATE FUNCTION grelout._topic_matches(pattern text, topic text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'grelout_topic_matches'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION grelout._topic_matches(text, text)
	IS 'whether a topic matches a handler''s topic pattern';

-- Wake the relays when the calling transaction commits.
CREATE FUNCTION grelout._wake() RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_wake'
	LANGUAGE C VOLATILE;

-- Whether grelout.keep_delivered keeps delivered messages.
CREATE FUNCTION grelout._keeps_delivered() RETURNS boolean
	AS 'MODULE_PATHNAME', 'grelout_keeps_delivered'
	LANGUAGE C STABLE;

-- The routing lock, in exclusive mode, until the transaction ends: the
-- handler triggers take it first; a relay routes only under it in shared
-- mode (trying, never waiting).  So a relay never routes with a view of
-- the handlers that a change in progress is about to make stale, and a
-- trigger sees what a routing that ran before it wrote.
CREATE FUNCTION grelout._lock_routing() RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_lock_routing_1_2'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION grelout._lock_routing()
	IS 'take the routing lock in exclusive mode until the transaction ends (the handler triggers)';

-- Finish the fan-out messages among ids whose deliveries are all finished,
-- as the relay does (the one statement that decides it, in the library):
-- dead if one went dead, else delivered (deleted with their rows unless
-- grelout.keep_delivered keeps them).
CREATE FUNCTION grelout._finalize_fanout(ids uuid[]) RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_finalize_fanout_1_2'
	LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout._finalize_fanout(uuid[])
	IS 'finish the fan-out messages among ids whose deliveries are all finished, by the relay''s rule';

-- The shared-memory side of the handlers' health in this database.
CREATE FUNCTION grelout._handler_live(
	OUT handler text, OUT breaker text, OUT consecutive_failures integer,
	OUT last_success_at timestamptz, OUT last_failure_at timestamptz,
	OUT last_error text, OUT in_flight integer)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'grelout_handler_live'
	LANGUAGE C VOLATILE STRICT;

------------------------------------------------------------------------
-- Functions: triggers
------------------------------------------------------------------------

-- Checks a handler row before it is written.
CREATE FUNCTION grelout._handlers_validate() RETURNS trigger
	AS 'MODULE_PATHNAME', 'grelout_handlers_validate'
	LANGUAGE C;

-- A new handler, or one whose topic or filter changes, makes the messages
-- waiting for a handler that it matches routable again: the relay routes
-- them to every handler that matches them then.  Messages already routed
-- are not touched.
CREATE FUNCTION grelout._handlers_reroute() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $reroute$
BEGIN
	PERFORM grelout._lock_routing();
	UPDATE grelout.outbox AS o SET route = 'new'
	WHERE o.route = 'waiting'
		AND grelout._topic_matches(NEW.topic, o.topic)
		AND (NEW.filter IS NULL OR o.payload OPERATOR(pg_catalog.@>) NEW.filter);
	IF FOUND THEN
		PERFORM grelout._wake();
	END IF;
	RETURN NULL;
END
$reroute$;

-- A deleted handler's unfinished deliveries go.  An inline one's message is
-- unrouted again (routed to whatever matches it now, else it waits); a
-- fan-out message that so loses its last unfinished delivery is finished
-- by the relay's rule if another handler delivered it (a delivered row, or
-- fanout_delivered: its row is gone), else it is unrouted again, its rows
-- gone.  So DELETE then INSERT of a handler loses nothing.  Finished
-- deliveries of the handler stay, for the record.  As a statement trigger
-- AFTER TRUNCATE, every handler is gone.
CREATE FUNCTION grelout._handlers_forget() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $forget$
DECLARE
	n bigint;
	touched uuid[];
	unroute_ids uuid[];
BEGIN
	PERFORM grelout._lock_routing();

	-- inline deliveries: a fresh, unrouted message (a claim in flight is
	-- fenced off: its lease is gone); a delayed one stays delayed.  Then
	-- the fan-out deliveries.
	IF TG_OP = 'DELETE' THEN
		UPDATE grelout.outbox AS o
		SET route = 'new', handler = NULL, state = 'pending', lease = NULL,
			attempts = 0, last_error = NULL, last_status = NULL,
			last_duration_ms = NULL,
			available_at = CASE WHEN o.state = 'processing'
				THEN pg_catalog.now() ELSE o.available_at END
		WHERE o.route = 'single' AND o.handler = OLD.name
			AND o.state IN ('pending', 'processing');
		GET DIAGNOSTICS n = ROW_COUNT;
		WITH gone AS (
			DELETE FROM grelout.fanout AS f
			WHERE f.handler = OLD.name AND f.state IN ('pending', 'processing')
			RETURNING f.message_id)
		SELECT pg_catalog.array_agg(DISTINCT gone.message_id) INTO touched FROM gone;
	ELSE
		UPDATE grelout.outbox AS o
		SET route = 'new', handler = NULL, state = 'pending', lease = NULL,
			attempts = 0, last_error = NULL, last_status = NULL,
			last_duration_ms = NULL,
			available_at = CASE WHEN o.state = 'processing'
				THEN pg_catalog.now() ELSE o.available_at END
		WHERE o.route = 'single' AND o.state IN ('pending', 'processing');
		GET DIAGNOSTICS n = ROW_COUNT;
		WITH gone AS (
			DELETE FROM grelout.fanout AS f
			WHERE f.state IN ('pending', 'processing')
			RETURNING f.message_id)
		SELECT pg_catalog.array_agg(DISTINCT gone.message_id) INTO touched FROM gone;
	END IF;
	IF touched IS NULL THEN
		IF n > 0 THEN
			PERFORM grelout._wake();
		END IF;
		RETURN NULL;
	END IF;

	-- Wait for the settles in flight of these messages' other deliveries
	-- (and hold theirs off): the next statement sees them, or the relay's
	-- finalize after them sees this deletion.
	PERFORM 1 FROM grelout.fanout AS f
	WHERE f.message_id = ANY (touched)
	ORDER BY f.message_id, f.handler
	FOR UPDATE;

	-- A message left with no unfinished delivery that no handler delivered
	-- (no delivered row, and not fanout_delivered) is unrouted again, its
	-- rows gone: routed to whatever matches it now, else it waits.
	SELECT pg_catalog.array_agg(d.id) INTO unroute_ids
	FROM (SELECT o.id
		FROM grelout.outbox AS o
			LEFT JOIN grelout.fanout AS f ON f.message_id = o.id
		WHERE o.id = ANY (touched) AND o.route = 'fanout'
			AND o.state IN ('pending', 'processing') AND NOT o.fanout_delivered
		GROUP BY o.id
		HAVING NOT (pg_catalog.bool_or(f.state IN ('pending', 'processing', 'delivered')) IS TRUE)) AS d;
	DELETE FROM grelout.fanout AS f WHERE f.message_id = ANY (unroute_ids);
	UPDATE grelout.outbox AS o
	SET route = 'new', handler = NULL, state = 'pending', lease = NULL,
		attempts = 0, last_error = NULL, last_status = NULL,
		last_duration_ms = NULL, dead_at = NULL
	WHERE o.id = ANY (unroute_ids);

	-- The others that another handler delivered are finished as the relay
	-- finishes them (dead if one went dead, else delivered); those still
	-- with an unfinished delivery stay as they are.
	PERFORM grelout._finalize_fanout(touched);

	PERFORM grelout._wake();
	RETURN NULL;
END
$forget$;

-- TRUNCATE of grelout.outbox takes the fan-out deliveries with it: no
-- delivery outlives its message.  (A DELETE: a TRUNCATE here would fail
-- when the same statement truncates grelout.fanout too.)
CREATE FUNCTION grelout._outbox_truncated() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $truncated$
BEGIN
	DELETE FROM grelout.fanout;
	RETURN NULL;
END
$truncated$;

-- Publishes grelout.handler.disabled when a handler is disabled, and
-- leaves a re-enabled handler's breaker half-open.
CREATE FUNCTION grelout._handlers_health() RETURNS trigger
	AS 'MODULE_PATHNAME', 'grelout_handlers_health'
	LANGUAGE C;

-- The trigger function of grelout.capture: publishes a row change.  Runs
-- as the writer (current_user is the message's publisher); it raises its
-- privileges itself for its insert, as outbox_publish does.  No SET
-- clause: it runs for every captured row (it pins the path around the
-- insert itself).
CREATE FUNCTION grelout._capture() RETURNS trigger
	AS 'MODULE_PATHNAME', 'grelout_capture_trigger_1_1'
	LANGUAGE C VOLATILE SECURITY INVOKER;
COMMENT ON FUNCTION grelout._capture()
	IS 'trigger function of grelout.capture: publishes a row change (arguments: topic, captured columns)';

------------------------------------------------------------------------
-- Triggers
------------------------------------------------------------------------

CREATE TRIGGER handlers_validate
	BEFORE INSERT OR UPDATE ON grelout.handlers
	FOR EACH ROW EXECUTE FUNCTION grelout._handlers_validate();

-- Each handler change first takes the routing lock (grelout._lock_routing).
CREATE TRIGGER handlers_reroute_insert
	AFTER INSERT ON grelout.handlers
	FOR EACH ROW EXECUTE FUNCTION grelout._handlers_reroute();
CREATE TRIGGER handlers_reroute_update
	AFTER UPDATE OF topic, filter ON grelout.handlers
	FOR EACH ROW
	WHEN (OLD.topic IS DISTINCT FROM NEW.topic OR OLD.filter IS DISTINCT FROM NEW.filter)
	EXECUTE FUNCTION grelout._handlers_reroute();
CREATE TRIGGER handlers_forget
	AFTER DELETE ON grelout.handlers
	FOR EACH ROW EXECUTE FUNCTION grelout._handlers_forget();
CREATE TRIGGER handlers_forget_all
	AFTER TRUNCATE ON grelout.handlers
	FOR EACH STATEMENT EXECUTE FUNCTION grelout._handlers_forget();

CREATE TRIGGER handlers_health
	AFTER UPDATE OF enabled, name OR DELETE ON grelout.handlers
	FOR EACH ROW EXECUTE FUNCTION grelout._handlers_health();

CREATE TRIGGER outbox_truncate_fanout
	AFTER TRUNCATE ON grelout.outbox
	FOR EACH STATEMENT EXECUTE FUNCTION grelout._outbox_truncated();

------------------------------------------------------------------------
-- Views
------------------------------------------------------------------------

-- One row for each topic that has messages or a handler; has_handler: an
-- enabled handler whose pattern matches the topic.
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
			WHERE h.enabled AND grelout._topic_matches(h.topic, t.topic)) AS has_handler
FROM (SELECT topic FROM grelout.outbox
	  UNION
	  SELECT topic FROM grelout.handlers) AS t
	LEFT JOIN grelout.outbox AS o ON o.topic = t.topic
GROUP BY t.topic;
COMMENT ON VIEW grelout.status IS 'grelout messages by topic and state';

-- The handlers as an operator may see them: no secret, no header value, the
-- URL masked, no key or client secret.  The 1.0 columns first, then 1.1's,
-- then 1.2's.
CREATE VIEW grelout.handlers_masked AS
SELECT topic, grelout._mask_url(url) AS url,
	ARRAY(SELECT pg_catalog.jsonb_object_keys(h.headers)) AS header_names,
	secret IS NOT NULL AS has_secret,
	previous_secret IS NOT NULL AS has_previous_secret,
	timeout, max_attempts, enabled,
	name, filter, max_in_flight, max_per_second, ordered, on_dead,
	tls_client_cert IS NOT NULL AS has_tls_client_cert,
	tls_ca IS NOT NULL AS has_tls_ca,
	grelout._mask_url(oauth OPERATOR(pg_catalog.->>) 'token_url') AS oauth_token_url,
	oauth OPERATOR(pg_catalog.->>) 'client_id' AS oauth_client_id
FROM grelout.handlers AS h;
COMMENT ON VIEW grelout.handlers_masked
	IS 'grelout handlers without secrets, header values or URL credentials';

-- The relays of every served database, with live counters.
CREATE VIEW grelout.relays AS
	SELECT relay, pid, activity, in_flight, delivered, retried, dead_lettered,
		last_error, last_error_at, started_at, database
	FROM grelout.relay_stats_by_database();
COMMENT ON VIEW grelout.relays
	IS 'grelout relays: one row a relay of every served database, with live counters';

-- One row a delivery: the inline deliveries of messages routed to one
-- handler, and the rows of those routed to several, with the key, the
-- routing order ("seq": an ordered handler's deliveries of one key go in
-- this order) and, for an unfinished delivery of an ordered handler with
-- on_dead = 'block', "blocked_by": the oldest dead delivery of the same
-- handler, key and publisher, which holds it.
CREATE VIEW grelout.deliveries AS
SELECT d.message_id, d.handler, d.topic, d.state, d.attempts,
	d.available_at, d.last_error, d.last_status, d.last_duration_ms,
	d.delivered_at, d.dead_at, d.created_at, d.key, d.seq,
	CASE WHEN d.blockable AND d.state IN ('pending', 'processing') THEN
	(SELECT b.message_id
	 FROM (SELECT e.id AS message_id, e.seq FROM grelout.outbox AS e
		   WHERE e.route = 'single' AND e.handler = d.handler AND e.key = d.key
			   AND coalesce(e.published_by, 0::pg_catalog.oid) = d.pub
			   AND e.state = 'dead' AND e.seq < d.seq
		   UNION ALL
		   SELECT e.message_id, e.seq FROM grelout.fanout AS e
			   JOIN grelout.outbox AS em ON em.id = e.message_id
		   WHERE e.handler = d.handler AND e.key = d.key
			   AND coalesce(em.published_by, 0::pg_catalog.oid) = d.pub
			   AND e.state = 'dead' AND e.seq < d.seq) AS b
	 ORDER BY b.seq LIMIT 1) END AS blocked_by
FROM (SELECT o.id AS message_id, o.handler, o.topic, o.state, o.attempts,
		o.available_at, o.last_error, o.last_status, o.last_duration_ms,
		o.delivered_at, o.dead_at, o.created_at, o.key, o.seq,
		h.ordered AND h.on_dead = 'block' AS blockable,
		coalesce(o.published_by, 0::pg_catalog.oid) AS pub
	  FROM grelout.outbox AS o
		  LEFT JOIN grelout.handlers AS h ON h.name = o.handler
	  WHERE o.route = 'single'
	  UNION ALL
	  SELECT f.message_id, f.handler, o.topic, f.state, f.attempts,
		f.available_at, f.last_error, f.last_status, f.last_duration_ms,
		f.delivered_at, f.dead_at, f.created_at, o.key, f.seq,
		h.ordered AND h.on_dead = 'block',
		coalesce(o.published_by, 0::pg_catalog.oid)
	  FROM grelout.fanout AS f
		  JOIN grelout.outbox AS o ON o.id = f.message_id
		  LEFT JOIN grelout.handlers AS h ON h.name = f.handler) AS d;
COMMENT ON VIEW grelout.deliveries
	IS 'grelout deliveries: one row a (message, handler)';

-- One row a handler: the breaker and the requests in flight as the relays
-- see them now (shared memory; the stored state where no relay has one),
-- its unfinished ("pending", in flight included) and dead deliveries, and
-- how long its longest-due pending delivery has been due.  Every count
-- goes through a per-handler partial index: delivered rows, however many
-- are kept, are never read.
CREATE VIEW grelout.handler_status AS
SELECT h.name AS handler, h.topic, h.enabled,
	COALESCE(l.breaker, s.breaker, 'closed') AS breaker,
	COALESCE(l.consecutive_failures, s.consecutive_failures, 0)
		AS consecutive_failures,
	COALESCE(l.last_success_at, s.last_success_at) AS last_success_at,
	COALESCE(l.last_failure_at, s.last_failure_at) AS last_failure_at,
	COALESCE(l.last_error, s.last_error) AS last_error,
	COALESCE(l.in_flight, 0) AS in_flight,
	(SELECT pg_catalog.count(*) FROM grelout.outbox AS o
	 WHERE o.route = 'single' AND o.handler = h.name
		AND o.state IN ('pending', 'processing'))
	+ (SELECT pg_catalog.count(*) FROM grelout.fanout AS f
	   WHERE f.handler = h.name AND f.state IN ('pending', 'processing'))
		AS pending,
	(SELECT pg_catalog.count(*) FROM grelout.outbox AS o
	 WHERE o.route = 'single' AND o.handler = h.name AND o.state = 'dead')
	+ (SELECT pg_catalog.count(*) FROM grelout.fanout AS f
	   WHERE f.handler = h.name AND f.state = 'dead')
		AS dead,
	pg_catalog.now() - LEAST(
		(SELECT pg_catalog.min(o.available_at) FROM grelout.outbox AS o
		 WHERE o.route = 'single' AND o.handler = h.name
			AND o.state IN ('pending', 'processing')
			AND o.available_at <= pg_catalog.now()),
		(SELECT pg_catalog.min(f.available_at) FROM grelout.fanout AS f
		 WHERE f.handler = h.name AND f.state IN ('pending', 'processing')
			AND f.available_at <= pg_catalog.now()))
		AS oldest_pending_age
FROM grelout.handlers AS h
	LEFT JOIN grelout.handler_health AS s ON s.handler = h.name
	LEFT JOIN grelout._handler_live() AS l ON l.handler = h.name;
COMMENT ON VIEW grelout.handler_status
	IS 'grelout handlers'' health: breaker, failures, requests in flight, pending and dead deliveries';

------------------------------------------------------------------------
-- Privileges
--
-- PUBLIC gets nothing: an administrator grants USAGE on the schema and
-- what each role needs (README, "Security model").  The only exceptions are
-- the two pure helpers the views call, _mask_url and _topic_matches.
------------------------------------------------------------------------

REVOKE ALL ON TABLE grelout.outbox, grelout.handlers, grelout.fanout,
	grelout.handler_health, grelout.attempts
	FROM PUBLIC;
REVOKE ALL ON SEQUENCE grelout.route_seq FROM PUBLIC;
REVOKE ALL ON TABLE grelout.status, grelout.handlers_masked, grelout.relays,
	grelout.deliveries, grelout.handler_status
	FROM PUBLIC;
REVOKE ALL ON FUNCTION
	@extschema@.outbox_publish(text, jsonb, text, jsonb, interval, text),
	@extschema@.outbox_message_status(uuid),
	@extschema@.outbox_redrive(text, text, uuid),
	@extschema@.outbox_purge(interval, text, boolean, uuid),
	grelout.set_secret(text, text, boolean),
	grelout.capture(pg_catalog.regclass, text, text[], text[]),
	grelout.uncapture(pg_catalog.regclass),
	grelout.relay_stats(),
	grelout.relay_stats_by_database(),
	grelout._assert_preloaded(),
	grelout._wake(),
	grelout._keeps_delivered(),
	grelout._lock_routing(),
	grelout._finalize_fanout(uuid[]),
	grelout._handler_live(),
	grelout._handlers_validate(),
	grelout._handlers_reroute(),
	grelout._handlers_forget(),
	grelout._outbox_truncated(),
	grelout._handlers_health(),
	grelout._capture()
	FROM PUBLIC;
