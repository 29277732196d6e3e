-- publisher_view: what a publisher can learn (1.2, issue 29 part 4).
-- A publisher cannot SHOW grelout's settings (administrators and members
-- of pg_read_all_settings can); outbox_message_status gives the outcome
-- class of each delivery's last attempt, never the endpoint's address nor
-- its response body; grelout.set_secret, for administrators only, checks
-- a secret and never quotes it.  Messages are dead rows written here, so
-- no relay touches them.
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
-- state_of: the SQLSTATE alone, where the message's wording differs
-- between PostgreSQL versions (the refusal to SHOW a setting)
CREATE FUNCTION pg_temp.state_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN others THEN
	RETURN SQLSTATE;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.state_of(text) TO PUBLIC;

CREATE ROLE regress_grelout_pub;
CREATE ROLE regress_grelout_reader IN ROLE pg_read_all_settings;
GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid) TO regress_grelout_pub;

-- settings: every grelout setting is superuser-only to read, but
-- grelout.traceparent and grelout.tracestate
SELECT count(*) > 20 AS settings, bool_and(name IS NOT NULL) AS named
FROM pg_settings WHERE name LIKE 'grelout.%';
SET ROLE regress_grelout_pub;
SELECT pg_temp.state_of($$SHOW grelout.allowed_networks$$) AS show_allowed_networks;
SELECT pg_temp.state_of($$SHOW grelout.block_private_networks$$) AS show_block_private;
SELECT pg_temp.state_of($$SHOW grelout.database$$) AS show_database;
SELECT pg_temp.state_of($$SHOW grelout.role$$) AS show_role;
SELECT pg_temp.state_of($$SHOW grelout.ca_file$$) AS show_ca_file;
SELECT pg_temp.state_of($$SELECT current_setting('grelout.max_payload_size')$$) AS current_setting_max_payload;
-- but the caller's own trace context (issue 33), which any role sets and sees
SELECT count(*) AS settings_seen FROM pg_settings WHERE name LIKE 'grelout.%';
SELECT string_agg(name, ', ' ORDER BY name) AS settings_seen_names
FROM pg_settings WHERE name LIKE 'grelout.%';
SELECT count(*) AS shown_in_show_all FROM (SELECT 1) AS x
WHERE EXISTS (SELECT 1 FROM pg_show_all_settings() WHERE name LIKE 'grelout.%');
-- a publish still works without seeing them
SELECT outbox_publish('pv.plain', '{}') IS NOT NULL AS publishes;
RESET ROLE;
-- issue 33: the attempt log's settings, and the log itself (response
-- bodies), are administrators' only, even with USAGE on the schema
GRANT USAGE ON SCHEMA grelout TO regress_grelout_pub;
SET ROLE regress_grelout_pub;
SELECT pg_temp.state_of($$SHOW grelout.log_attempts$$) AS show_log_attempts;
SELECT pg_temp.state_of($$SHOW grelout.attempt_body_max$$) AS show_attempt_body_max;
SELECT pg_temp.state_of($$SHOW grelout.keep_attempts$$) AS show_keep_attempts;
SELECT pg_temp.try($$SELECT count(*) FROM grelout.attempts$$) AS publisher_reads_attempts;
RESET ROLE;
REVOKE USAGE ON SCHEMA grelout FROM regress_grelout_pub;
SELECT current_setting('grelout.log_attempts') AS admin_log_attempts,
	current_setting('grelout.attempt_body_max') AS admin_attempt_body_max,
	current_setting('grelout.keep_attempts') AS admin_keep_attempts;
SET ROLE regress_grelout_reader;
SELECT pg_temp.state_of($$SHOW grelout.block_private_networks$$) AS reader_show;
SELECT pg_temp.state_of($$SHOW grelout.log_attempts$$) AS reader_show_log_attempts;
SELECT count(*) > 20 AS reader_sees_settings FROM pg_settings WHERE name LIKE 'grelout.%';
RESET ROLE;

-- message status: the outcome class of the last attempt
INSERT INTO grelout.outbox (id, topic, payload, state, attempts, last_error, last_status,
	route, handler, dead_at, published_by)
SELECT ('00000000-0000-7000-8000-0000000000' || lpad(n::text, 2, '0'))::uuid, 'pv.dead', '{}',
	'dead', 3, e, s, 'single', 'pv.h', now(), 'regress_grelout_pub'::regrole
FROM (VALUES
	(1, 'HTTP 503: {"error": "bad token sk_live_123", "host": "hooks.internal.example"}', 503),
	(2, 'HTTP 302 (redirects are not followed): see https://10.1.2.3/admin', 302),
	(3, 'HTTP 401: unauthorized', NULL),
	(4, 'could not resolve host: Could not resolve host: hooks.internal.example', NULL),
	(5, 'could not connect (connection refused): Failed to connect to 10.1.2.3 port 8443 after 0 ms: Couldn''t connect to server', NULL),
	(6, 'timed out after 1000 ms: Operation timed out after 1000 milliseconds with 0 bytes received', NULL),
	(7, 'TLS failure: SSL: no alternative certificate subject name matches target host name ''hooks.internal.example''', NULL),
	(8, 'refused to connect to private address 10.1.2.3 (grelout.block_private_networks is on)', NULL),
	(9, 'connection broken: Recv failure: Connection reset by peer', NULL),
	(10, 'Weird libcurl text naming hooks.internal.example', NULL),
	(11, NULL, NULL)) AS v(n, e, s);
SET ROLE regress_grelout_pub;
SELECT n AS m, s.state, s.attempts, s.last_error, s.handler
FROM generate_series(1, 11) AS n,
	LATERAL outbox_message_status(('00000000-0000-7000-8000-0000000000' ||
		lpad(n::text, 2, '0'))::uuid) AS s
ORDER BY 1;
RESET ROLE;
-- no byte of an error's text beyond the class reaches the publisher
SET ROLE regress_grelout_pub;
SELECT count(*) FILTER (WHERE s.last_error ~ 'sk_live|internal|10\.1\.2\.3|8443|Couldn') AS leaks,
	count(*) AS rows
FROM generate_series(1, 11) AS n,
	LATERAL outbox_message_status(('00000000-0000-7000-8000-0000000000' ||
		lpad(n::text, 2, '0'))::uuid) AS s;
RESET ROLE;
-- administrators still read the whole error
SELECT last_error FROM grelout.deliveries WHERE message_id = '00000000-0000-7000-8000-000000000001';

-- grelout.set_secret: administrators only; checks the secret, never quotes it
INSERT INTO grelout.handlers (name, topic, url, enabled)
VALUES ('pv.h', 'pv.nothing', 'http://127.0.0.1:9/', false);
SET ROLE regress_grelout_pub;
SELECT pg_temp.try($$SELECT grelout.set_secret('pv.h', 'whsec_' || repeat('A', 32))$$) AS publisher_set_secret;
RESET ROLE;
SELECT has_function_privilege('public', 'grelout.set_secret(text, text, boolean)', 'EXECUTE') AS public_may;
SELECT grelout.set_secret('pv.h', 'whsec_' || encode(decode(repeat('ab', 32), 'hex'), 'base64'));
SELECT grelout.set_secret('pv.h', 'whsec_' || encode(decode(repeat('cd', 24), 'hex'), 'base64'), previous => true);
SELECT secret = 'whsec_' || encode(decode(repeat('ab', 32), 'hex'), 'base64') AS secret_set,
	previous_secret = 'whsec_' || encode(decode(repeat('cd', 24), 'hex'), 'base64') AS previous_set
FROM grelout.handlers WHERE name = 'pv.h';
SELECT pg_temp.try($$SELECT grelout.set_secret('pv.h', 'whsec_NOT-BASE64-SECRET-VALUE!!')$$) AS bad_base64;
SELECT pg_temp.try($$SELECT grelout.set_secret('pv.h', 'sk_live_SECRET_VALUE')$$) AS no_prefix;
SELECT pg_temp.try($$SELECT grelout.set_secret('pv.h', 'whsec_c2hvcnQ=')$$) AS too_short;
SELECT pg_temp.try($$SELECT grelout.set_secret('pv.h', 'SECRET', previous => true)$$) AS bad_previous;
SELECT pg_temp.try($$SELECT grelout.set_secret('pv.missing', 'whsec_' || encode(decode(repeat('ab', 32), 'hex'), 'base64'))$$) AS unknown_handler;
SELECT pg_temp.try($$SELECT grelout.set_secret(NULL, NULL)$$) AS null_handler;
-- a failed call changed nothing; NULL clears
SELECT secret = 'whsec_' || encode(decode(repeat('ab', 32), 'hex'), 'base64') AS secret_kept FROM grelout.handlers WHERE name = 'pv.h';
SELECT grelout.set_secret('pv.h', NULL, previous => true);
SELECT secret IS NOT NULL AS has_secret, previous_secret IS NULL AS previous_cleared
FROM grelout.handlers WHERE name = 'pv.h';

TRUNCATE grelout.outbox, grelout.handlers;
DROP OWNED BY regress_grelout_pub;
DROP ROLE regress_grelout_pub;
DROP ROLE regress_grelout_reader;
