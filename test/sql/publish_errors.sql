-- publish_errors: every bad input of outbox_publish gets a clear error with
-- a specific SQLSTATE (never XX000 nor P0001) and stores nothing.
-- pg_temp.try runs a statement and shows "ok" or "SQLSTATE: message".
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

-- topic: NULL, empty, over 255 bytes (also when under 255 characters),
-- control characters
SELECT pg_temp.try($$SELECT outbox_publish(NULL, '{}')$$) AS null_topic;
SELECT pg_temp.try($$SELECT outbox_publish('', '{}')$$) AS empty_topic;
SELECT pg_temp.try($$SELECT outbox_publish(repeat('t', 256), '{}')$$) AS topic_256_bytes;
SELECT pg_temp.try($$SELECT outbox_publish(repeat('é', 128), '{}')$$) AS topic_128_chars_256_bytes;
SELECT pg_temp.try($$SELECT outbox_publish(E'a\nb', '{}')$$) AS topic_newline;
SELECT pg_temp.try($$SELECT outbox_publish(E'a\tb', '{}')$$) AS topic_tab;
SELECT pg_temp.try($$SELECT outbox_publish(E'a\rb', '{}')$$) AS topic_cr;
SELECT pg_temp.try($$SELECT outbox_publish(E'\x01ab', '{}')$$) AS topic_ctrl_a;
SELECT pg_temp.try($$SELECT outbox_publish('ab' || chr(127), '{}')$$) AS topic_del;

-- key and dedup_key over 255 bytes; an empty dedup_key
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', key => repeat('k', 256))$$) AS key_256;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', key => repeat('ü', 128))$$) AS key_256_bytes;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', dedup_key => repeat('d', 256))$$) AS dedup_256;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', dedup_key => '')$$) AS dedup_empty;

-- payload: NULL; over grelout.max_payload_size (bytes of the JSON text)
SELECT pg_temp.try($$SELECT outbox_publish('t', NULL)$$) AS null_payload;
SET grelout.max_payload_size = '1kB';
SHOW grelout.max_payload_size;
-- '{"a": "xxx..."}' is 9 bytes of JSON text around the string
SELECT pg_temp.try($$SELECT outbox_publish('size', jsonb_build_object('a', repeat('x', 1015)))$$) AS payload_1024_bytes;
SELECT pg_temp.try($$SELECT outbox_publish('size', jsonb_build_object('a', repeat('x', 1016)))$$) AS payload_1025_bytes;
SELECT pg_temp.try($$SELECT outbox_publish('size', jsonb_build_object('a', repeat('é', 600)))$$) AS payload_multibyte;
SET grelout.max_payload_size = 10;
SELECT pg_temp.try($$SELECT outbox_publish('size', '[1, 2, 3, 4]')$$) AS payload_12_bytes;
SELECT pg_temp.try($$SELECT outbox_publish('size', '[1, 2, 3]')$$) AS payload_9_bytes;
RESET grelout.max_payload_size;
SELECT pg_temp.try($$SELECT outbox_publish('size', jsonb_build_object('a', repeat('x', 1016)))$$) AS payload_1025_default_limit;
SELECT pg_temp.try($$SELECT outbox_publish('size', jsonb_build_object('a', repeat('x', 1024 * 1024)))$$) AS payload_over_1mb;
SELECT count(*) AS size_rows, sum(length(payload::text)) AS size_bytes
FROM grelout.outbox WHERE topic = 'size';
DELETE FROM grelout.outbox WHERE topic = 'size';

-- headers that are not an object of strings
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '[]')$$) AS headers_array;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '"x-a: b"')$$) AS headers_string;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => 'null')$$) AS headers_json_null;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": 1}')$$) AS value_number;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": true}')$$) AS value_bool;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": null}')$$) AS value_null;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": ["b"]}')$$) AS value_array;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": {"b": "c"}}')$$) AS value_object;
-- invalid names (not an HTTP token)
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"": "x"}')$$) AS name_empty;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x a": "x"}')$$) AS name_space;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x:a": "x"}')$$) AS name_colon;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x\na": "x"}')$$) AS name_newline;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x(a)": "x"}')$$) AS name_paren;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"é": "x"}')$$) AS name_non_ascii;
-- values with CR or LF (header injection)
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": "b\r\nx-evil: 1"}')$$) AS value_crlf;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": "b\nc"}')$$) AS value_lf;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"x-a": "b\rc"}')$$) AS value_cr;
-- reserved names, whatever their letter case, and every grelout-* name
SELECT name, pg_temp.try(format($$SELECT outbox_publish('t', '{}', headers => %L)$$,
	jsonb_build_object(name, 'v'))) AS result
FROM unnest(ARRAY['content-type', 'Content-Type', 'CONTENT-LENGTH', 'Host',
	'connection', 'Transfer-Encoding', 'User-Agent', 'webhook-id', 'Webhook-Id',
	'WEBHOOK-TIMESTAMP', 'webhook-signature', 'grelout-topic', 'Grelout-Attempt',
	'GRELOUT-KEY', 'grelout-anything', 'grelout-']) AS name;
-- one bad header among good ones is enough
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"traceparent": "00-1", "Host": "evil"}')$$) AS one_bad_among_good;
-- names that merely resemble reserved ones are fine
SELECT pg_temp.try($$SELECT outbox_publish('near', '{}', headers => '{"x-content-type": "a", "content-type-x": "b", "hosts": "c", "x-grelout-topic": "d", "grelout": "e", "webhooks-id": "f"}')$$) AS near_reserved_names;

-- a negative delay, also when mixing units
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', delay => '-1 second')$$) AS delay_negative;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', delay => '-1 day')$$) AS delay_negative_day;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', delay => '1 day -25 hours')$$) AS delay_negative_mixed;
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', delay => '-00:00:00.000001')$$) AS delay_negative_usec;

-- a bad argument with a dedup_key stores nothing and keeps the key free
SELECT pg_temp.try($$SELECT outbox_publish('t', '{}', headers => '{"Host": "x"}', dedup_key => 'free')$$) AS bad_with_dedup;

-- none of the bad calls stored anything: only the row of the names that
-- resemble reserved ones exists
SELECT topic, count(*) FROM grelout.outbox GROUP BY topic ORDER BY topic;
SELECT count(*) AS rows_with_dedup_free FROM grelout.outbox WHERE dedup_key = 'free';

-- the same errors when the failing call is one statement of a transaction:
-- the transaction is aborted, nothing of it is stored
BEGIN;
SELECT outbox_publish('tx.abort', '{}') IS NOT NULL AS staged;
SELECT outbox_publish('tx.abort', '{}', delay => '-1 hour');
\echo :LAST_ERROR_SQLSTATE
COMMIT;
SELECT count(*) AS rows_tx_abort FROM grelout.outbox WHERE topic = 'tx.abort';

TRUNCATE grelout.outbox;
