-- reserved_names: names a publisher may not use (1.2, issue 29 part 3).
-- Topics whose first segment is "grelout", in any letter case, the bare
-- "grelout" included, are grelout's own: refused for outbox_publish and
-- capture topics.  Message headers may not use webhook-*, nor the
-- hop-by-hop and framing headers; a blank value is refused; a name may
-- appear once whatever its letter case; errors quote at most 64 bytes of a
-- name.  Handler headers keep their 1.1 rules.  Nothing refused is stored.
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

-- topics: the first segment "grelout" in any case, alone or not
SELECT t AS topic, pg_temp.try(format($$SELECT outbox_publish(%L, '{}')$$, t)) AS result
FROM unnest(ARRAY['grelout', 'GRELOUT', 'Grelout', 'Grelout.x', 'gReLoUt.handler.disabled',
	'GRELOUT.', 'grelout.breaker.opened', 'greloutx', 'greloutx.a', 'x.grelout', 'x.GRELOUT.y',
	'grel', 'grelout_events']) AS t;

-- capture topics too: <topic>.<op> may not start with a grelout segment
CREATE TABLE reserved_names_t (id int PRIMARY KEY);
SELECT pg_temp.try($$SELECT grelout.capture('reserved_names_t', topic => 'GRELOUT')$$) AS capture_upper;
SELECT pg_temp.try($$SELECT grelout.capture('reserved_names_t', topic => 'Grelout.rows')$$) AS capture_mixed;
SELECT pg_temp.try($$SELECT grelout.capture('reserved_names_t', topic => 'rows.grelout')$$) AS capture_later_segment;
SELECT grelout.uncapture('reserved_names_t');
DROP TABLE reserved_names_t;

-- message headers: the webhook-* namespace and the hop-by-hop and framing
-- headers, in any case, with 1.1's reserved names
SELECT name, pg_temp.try(format($$SELECT outbox_publish('t', '{}', headers => %L)$$,
	jsonb_build_object(name, 'v'))) AS result
FROM unnest(ARRAY['webhook-version', 'Webhook-Anything', 'WEBHOOK-', 'keep-alive',
	'Keep-Alive', 'proxy-connection', 'te', 'TE', 'trailer', 'upgrade', 'Expect', 'host',
	'content-length', 'content-encoding', 'Content-Encoding', 'transfer-encoding',
	'connection', 'authorization', 'cookie', 'grelout-x']) AS name;
-- names that only resemble them are fine
SELECT pg_temp.try($$SELECT outbox_publish('near', '{}', headers => '{"webhook": "a", "webhooks-id": "b", "x-webhook-id": "c", "tes": "d", "trailers": "e", "expected": "f", "content-language": "g", "keepalive": "h"}')$$) AS near_names;

-- blank values: libcurl would drop them and a default header with them
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": " "}')$$) AS value_space;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"accept": "\t  "}')$$) AS value_tabs;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": ""}')$$) AS value_empty;
SELECT pg_temp.try($$SELECT outbox_publish('near', '{}', headers => '{"x-a": " a "}')$$) AS value_padded_ok;

-- one name once, whatever its case
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"X-Trace": "1", "x-trace": "2"}')$$) AS same_name_twice;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-request-id": "1", "X-REQUEST-ID": "2", "x-b": "3"}')$$) AS same_name_twice_among_others;
-- (but traceparent and tracestate twice are a malformed trace context:
-- dropped, not refused; test/sql/trace_context.sql)

-- an error quotes at most 64 bytes of a name (names are up to 256)
SELECT pg_temp.try(format($$SELECT outbox_publish('t', '{}', headers => %L)$$,
	jsonb_build_object('webhook-' || repeat('x', 200), 'v'))) AS long_reserved_name;
SELECT pg_temp.try(format($$SELECT outbox_publish('t', '{}', headers => %L)$$,
	jsonb_build_object('grelout-' || repeat('y', 200), 'v'))) AS long_relay_name;
SELECT pg_temp.try(format($$SELECT outbox_publish('t', '{}', headers => %L)$$,
	jsonb_build_object('x-' || repeat('z', 100), 'a', 'X-' || repeat('Z', 100), 'b'))) AS long_twice;
SELECT length(substring(pg_temp.try(format($$SELECT outbox_publish('t', '{}', headers => %L)$$,
	jsonb_build_object('webhook-' || repeat('x', 200), 'v'))) FROM '"([^"]*)"')) AS quoted_bytes;

-- handlers keep their 1.1 rules: an administrator may set these
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url, headers, enabled) VALUES ('rn.h', 'http://127.0.0.1:9/', '{"keep-alive": "timeout=5", "webhook-version": "1", "x-a": " "}', false)$$) AS handler_headers;

-- only the calls that were fine stored anything
SELECT topic, count(*) FROM grelout.outbox GROUP BY topic ORDER BY topic;

TRUNCATE grelout.outbox, grelout.handlers;
