-- trace_context: the publisher's W3C trace context recorded with a message
-- (issue 33 part 1), as its "traceparent" and "tracestate" headers, from
-- the first of: the message's own headers (any letter case), the settings
-- grelout.traceparent and grelout.tracestate, a sqlcommenter comment of
-- the statement; malformed values are dropped, never refused; a captured
-- row change carries the writing statement's context.  The topics have no
-- handler, so the relay leaves every message pending.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

-- the headers of the messages published so far, oldest first, then forgotten
CREATE FUNCTION pg_temp.published() RETURNS TABLE (topic text, headers jsonb)
LANGUAGE sql AS $$
	WITH d AS (DELETE FROM grelout.outbox RETURNING id, topic, headers)
	SELECT topic, headers FROM d ORDER BY id
$$;

-- no context anywhere: headers as given
SELECT outbox_publish('tc.none', '{}') IS NOT NULL AS published;
SELECT outbox_publish('tc.none', '{}', headers => '{"x-a": "b"}') IS NOT NULL AS published;
SELECT * FROM pg_temp.published();

-- 1. the message's own headers, names normalized to lower case
SELECT outbox_publish('tc.header', '{}', headers => '{"TraceParent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "TRACESTATE": "congo=t61rcWkgMzE", "x-a": "b"}') IS NOT NULL AS published;
-- they come first: before the setting and a comment
BEGIN;
SET LOCAL grelout.traceparent = '00-11111111111111111111111111111111-2222222222222222-01';
SELECT outbox_publish('tc.header_first', '{}', headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}') /*traceparent='00-33333333333333333333333333333333-4444444444444444-01'*/ IS NOT NULL AS published;
COMMIT;
-- malformed: upper-case hex, zero trace id, version ff, a non-string, a
-- control character, an empty value; dropped, and no error
SELECT outbox_publish('tc.header_bad', '{}', headers => '{"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", "tracestate": "a=b"}') IS NOT NULL AS published;
SELECT outbox_publish('tc.header_bad', '{}', headers => '{"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01", "x-a": "b"}') IS NOT NULL AS published;
SELECT outbox_publish('tc.header_bad', '{}', headers => '{"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}') IS NOT NULL AS published;
SELECT outbox_publish('tc.header_bad', '{}', headers => '{"traceparent": 1}') IS NOT NULL AS published;
SELECT outbox_publish('tc.header_bad', '{}', headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"}') IS NOT NULL AS published;
SELECT outbox_publish('tc.header_bad', '{}', headers => '{"traceparent": ""}') IS NOT NULL AS published;
-- a lone tracestate is dropped; a malformed tracestate is dropped, its
-- traceparent kept
SELECT outbox_publish('tc.header_state', '{}', headers => '{"tracestate": "a=b"}') IS NOT NULL AS published;
SELECT outbox_publish('tc.header_state', '{}', headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=\u0001"}') IS NOT NULL AS published;
-- the same name twice in different letter cases: ambiguous, dropped
SELECT outbox_publish('tc.header_twice', '{}', headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}') IS NOT NULL AS published;
-- a malformed header falls back on the setting
BEGIN;
SET LOCAL grelout.traceparent = '00-11111111111111111111111111111111-2222222222222222-01';
SELECT outbox_publish('tc.header_fallback', '{}', headers => '{"traceparent": "bad"}') IS NOT NULL AS published;
COMMIT;
-- the other header rules still hold
SELECT outbox_publish('tc.header_rules', '{}', headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Host": "x"}');
SELECT * FROM pg_temp.published();

-- 2. the settings, e.g. SET LOCAL: anyone sets and sees them
SHOW grelout.traceparent;
BEGIN;
SET LOCAL grelout.traceparent = '00-11111111111111111111111111111111-2222222222222222-01';
SET LOCAL grelout.tracestate = 'vendor=opaque';
SHOW grelout.traceparent;
SELECT outbox_publish('tc.setting', '{}', headers => '{"x-a": "b"}') IS NOT NULL AS published;
-- before a comment
SELECT outbox_publish('tc.setting_first', '{}') /*traceparent='00-33333333333333333333333333333333-4444444444444444-01'*/ IS NOT NULL AS published;
COMMIT;
SHOW grelout.traceparent;
-- malformed: ignored, no error (nor at SET)
BEGIN;
SET LOCAL grelout.traceparent = 'not a traceparent';
SET LOCAL grelout.tracestate = 'vendor=opaque';
SELECT outbox_publish('tc.setting_bad', '{}') IS NOT NULL AS published;
-- and then a comment is taken
SELECT outbox_publish('tc.setting_bad_comment', '{}') /*traceparent='00-33333333333333333333333333333333-4444444444444444-01'*/ IS NOT NULL AS published;
COMMIT;
-- a malformed tracestate setting is dropped
BEGIN;
SET LOCAL grelout.traceparent = '00-11111111111111111111111111111111-2222222222222222-00';
SET LOCAL grelout.tracestate = E'tab\there';
SELECT outbox_publish('tc.setting_state_bad', '{}') IS NOT NULL AS published;
COMMIT;
SELECT * FROM pg_temp.published();

-- 3. a sqlcommenter comment, with other keys, URL-encoded values
SELECT outbox_publish('tc.comment', '{}') /*action='publish',traceparent='00-33333333333333333333333333333333-4444444444444444-01',tracestate='rojo%3D00f067aa0ba902b7%2Ccongo%3Dt61rcWkgMzE'*/ IS NOT NULL AS published;
SELECT outbox_publish('tc.comment_encoded', '{}') /*traceparent='00%2D33333333333333333333333333333333%2D4444444444444444%2D01'*/ IS NOT NULL AS published;
-- malformed or not a comment: ignored
SELECT outbox_publish('tc.comment_bad', '{}') /*traceparent='00-33333333333333333333333333333333-4444444444444444-1'*/ IS NOT NULL AS published;
SELECT outbox_publish('tc.comment_bad', '{}') /*traceparent='%zz'*/ IS NOT NULL AS published;
SELECT outbox_publish('tc.comment_literal', '{"note": "/*traceparent=''00-33333333333333333333333333333333-4444444444444444-01''*/"}') IS NOT NULL AS published;
-- through a function, the client's statement is read
CREATE FUNCTION pg_temp.publish_in_function() RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
	RETURN outbox_publish('tc.comment_function', '{}');
END $$;
SELECT pg_temp.publish_in_function() IS NOT NULL AS published /*traceparent='00-55555555555555555555555555555555-6666666666666666-01'*/;
SELECT * FROM pg_temp.published();

-- 4. capture: the row change carries the writing statement's context
CREATE TABLE tc_items (id int PRIMARY KEY, name text);
SELECT grelout.capture('tc_items', topic => 'tc.items');
INSERT INTO tc_items VALUES (1, 'a'), (2, 'b') /*traceparent='00-77777777777777777777777777777777-8888888888888888-01'*/;
BEGIN;
SET LOCAL grelout.traceparent = '00-11111111111111111111111111111111-2222222222222222-01';
UPDATE tc_items SET name = 'c' WHERE id = 1;
COMMIT;
DELETE FROM tc_items WHERE id = 2;
SELECT * FROM pg_temp.published();
SELECT grelout.uncapture('tc_items');
DROP TABLE tc_items;

-- the most headers a message may have, and a trace context on top: not
-- refused (the trace context is not counted)
BEGIN;
SET LOCAL grelout.traceparent = '00-11111111111111111111111111111111-2222222222222222-01';
SELECT outbox_publish('tc.many', '{}', headers =>
	(SELECT jsonb_object_agg('x-h' || i, 'v') FROM generate_series(1, 64) AS i)) IS NOT NULL AS published;
COMMIT;
SELECT count(*) AS headers, bool_or(k = 'traceparent') AS traced
FROM pg_temp.published() AS p, jsonb_object_keys(p.headers) AS k;

-- 5. a publisher (who sees no other grelout setting) sets and sees it
CREATE ROLE regress_grelout_tracer;
GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO regress_grelout_tracer;
SET ROLE regress_grelout_tracer;
BEGIN;
SET LOCAL grelout.traceparent = '00-99999999999999999999999999999999-aaaaaaaaaaaaaaaa-01';
SELECT current_setting('grelout.traceparent') AS seen;
SELECT outbox_publish('tc.role', '{}') IS NOT NULL AS published;
COMMIT;
SELECT name FROM pg_settings WHERE name LIKE 'grelout.%' ORDER BY name;
RESET ROLE;
SELECT * FROM pg_temp.published();
REVOKE ALL ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) FROM regress_grelout_tracer;
DROP ROLE regress_grelout_tracer;
