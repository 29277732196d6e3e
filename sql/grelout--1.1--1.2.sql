/* grelout--1.1--1.2.sql: from grelout 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION grelout UPDATE TO '1.2'" to load this file. \quit

-- A fresh 1.2 install reads grelout--1.2.sql instead; test/t/092_schema_identity.pl
-- checks that a database upgraded here and a fresh one have the same schema.
-- As in the earlier scripts, nothing is created with IF NOT EXISTS, and
-- OR REPLACE only where replacing the extension's own object (keeping its
-- grants) is the point.

------------------------------------------------------------------------
-- issue 29: per-key ordering per publishing role
--
-- Head of line is per (handler, published_by, key): a delayed or dead
-- message of one role never holds back another role's messages of the
-- same key text.  A message stored under 1.0 (published_by NULL) counts as
-- a publisher of its own: the claim compares publishers as
-- coalesce(published_by, 0) (no role has oid 0), NULL-safe as
-- IS NOT DISTINCT FROM, and in a form this index answers.  The library
-- runs the same statements on a 1.1 schema, where outbox_key_idx answers
-- (handler, key) and the publisher is a filter.  See README, "Per-key
-- ordering".
------------------------------------------------------------------------

-- published_by becomes a regrole (1.1: oid), so that pg_dump writes the
-- role's name and a restore into another cluster, where the role has
-- another oid, keeps each message's publisher (dedup keys and ordered keys
-- hold across the move; a 1.1 dump has bare oids).  Binary-coercible: the
-- table is not rewritten and outbox_dedup_key_idx is kept.  Before the
-- index and the view below use the column, so that they are made on the
-- new type as in grelout--1.2.sql.
ALTER TABLE grelout.outbox ALTER COLUMN published_by TYPE pg_catalog.regrole;

-- The head test of the claim: the unfinished inline deliveries of a
-- (handler, key, publisher) in routing order.  It replaces outbox_key_idx
-- (handler, key, seq), whose every probe it answers as well.
CREATE INDEX outbox_publisher_key_idx ON grelout.outbox
	(handler, key, (coalesce(published_by, 0::pg_catalog.oid)), seq)
	WHERE route = 'single' AND key IS NOT NULL
		AND state IN ('pending', 'processing', 'dead');
DROP INDEX grelout.outbox_key_idx;

-- grelout.deliveries: "blocked_by" follows the new rule, the oldest dead
-- delivery of the same handler, key and publisher.  Same columns, so its
-- grants and what depends on it stay.
CREATE OR REPLACE VIEW grelout.deliveries AS
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

-- issue 29 (parts 3, 4, 5b): names a publisher may not use, what it can learn
--
-- grelout.set_secret sets a handler's signing secret (or, with previous,
-- its previous_secret; NULL clears it) after checking it, and never quotes
-- it in an error.  Called with the secret as a bind parameter, the secret
-- is in no statement's text, so the server log line PostgreSQL writes for
-- a failing statement cannot carry it (an INSERT or UPDATE with the secret
-- as a literal can).  Administrators only: not executable by PUBLIC, and it
-- runs as its caller, who must be able to UPDATE grelout.handlers.
-- Everything else of these parts is in the library: reserved topics and
-- header names, the settings shown to administrators only, the outcome
-- class in outbox_message_status, relay errors per database, the blocked
-- address ranges.
CREATE FUNCTION grelout.set_secret(handler text, secret text,
	previous boolean DEFAULT false)
	RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_set_secret_1_2'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.set_secret(text, text, boolean)
	IS 'set a handler''s signing secret (previous => true: its previous_secret) without the secret in the statement''s text';
REVOKE ALL ON FUNCTION grelout.set_secret(text, text, boolean) FROM PUBLIC;

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

------------------------------------------------------------------------
-- issue 34: endpoints that demand more than a shared secret
--
-- Per handler: a client certificate and key for mutual TLS, a CA bundle
-- trusted instead of grelout.ca_file, and OAuth2 client credentials.  The
-- trigger grelout._handlers_validate (C) checks them when a row is
-- written: a certificate that does not match its key, or is expired, a CA
-- bundle with no certificate, an oauth object without token_url,
-- client_id or client_secret, are refused.  tls_client_key and
-- oauth.client_secret are secrets, like secret: grelout.handlers is
-- readable by administrators only (and so dumped only by them), and
-- handlers_masked shows neither.  The columns come after 1.1's, as in
-- grelout--1.2.sql.
------------------------------------------------------------------------
ALTER TABLE grelout.handlers
	ADD COLUMN tls_client_cert text,
	ADD COLUMN tls_client_key text,
	ADD COLUMN tls_ca text,
	ADD COLUMN oauth jsonb;
COMMENT ON COLUMN grelout.handlers.tls_client_cert
	IS 'PEM: the client certificate (and its chain) this handler presents to its HTTPS endpoint (mutual TLS); with tls_client_key';
COMMENT ON COLUMN grelout.handlers.tls_client_key
	IS 'PEM, unencrypted: the private key of tls_client_cert (a secret)';
COMMENT ON COLUMN grelout.handlers.tls_ca
	IS 'PEM: the certificates this handler trusts for its endpoint, instead of grelout.ca_file';
COMMENT ON COLUMN grelout.handlers.oauth
	IS 'OAuth2 client credentials: {"token_url", "client_id", "client_secret", "scope", "audience"} (client_secret is a secret)';

-- handlers_masked: the new columns masked, appended (its grants stay).
CREATE OR REPLACE VIEW grelout.handlers_masked AS
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

------------------------------------------------------------------------
-- issue 30: each rule and each number written once
--
-- The handler triggers of 1.1 typed the routing lock's key, and their
-- finish of a fan-out message repeated the relay's rule in plpgsql.  They
-- now call the library for both: grelout._lock_routing() takes the lock
-- whose key only the library knows (src/pure/constants.h), and
-- grelout._finalize_fanout() finishes fan-out messages by the relay's own
-- statement.  Replaced in place: same signatures, so the triggers and the
-- grants stay.
------------------------------------------------------------------------

-- The routing lock, in exclusive mode, until the transaction ends.
CREATE FUNCTION grelout._lock_routing() RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_lock_routing_1_2'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION grelout._lock_routing()
	IS 'take the routing lock in exclusive mode until the transaction ends (the handler triggers)';
REVOKE ALL ON FUNCTION grelout._lock_routing() FROM PUBLIC;

-- Finish the fan-out messages among ids whose deliveries are all finished,
-- as the relay does: dead if one went dead, else delivered (deleted with
-- their rows unless grelout.keep_delivered keeps them).
CREATE FUNCTION grelout._finalize_fanout(ids uuid[]) RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_finalize_fanout_1_2'
	LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout._finalize_fanout(uuid[])
	IS 'finish the fan-out messages among ids whose deliveries are all finished, by the relay''s rule';
REVOKE ALL ON FUNCTION grelout._finalize_fanout(uuid[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION grelout._handlers_reroute() RETURNS trigger
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

CREATE OR REPLACE FUNCTION grelout._handlers_forget() RETURNS trigger
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

------------------------------------------------------------------------
-- issue 33 (part 3): the attempt log
------------------------------------------------------------------------

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
REVOKE ALL ON TABLE grelout.attempts FROM PUBLIC;
-- Not a configuration table: pg_dump leaves the log out (grelout--1.2.sql).
