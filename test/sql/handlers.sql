-- handlers: grelout.handlers refuses, at INSERT and at UPDATE, a URL that
-- is not http:// or https:// with a host, a malformed whsec_ secret or
-- previous_secret, headers that are not an object of valid strings or that
-- use a reserved name, and a non-positive timeout or max_attempts.  Every
-- handler here is disabled and no message is published, so the relay never
-- sends anything.
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

-- pg_temp.try_detail: the same, with the error's DETAIL, which says what
-- is wrong with a secret (without showing it)
CREATE FUNCTION pg_temp.try_detail(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	detail text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' (' || nullif(detail, '') || ')', '');
END $$;

-- pg_temp.whsec(n): "whsec_" + base64 of n bytes (no line breaks)
CREATE FUNCTION pg_temp.whsec(n int) RETURNS text LANGUAGE sql AS $$
	SELECT 'whsec_' || replace(encode(convert_to(repeat('k', n), 'UTF8'), 'base64'), E'\n', '')
$$;

-- pg_temp.add(columns, values[, with_detail]): insert a disabled handler
-- for a new topic, show the outcome
CREATE SEQUENCE pg_temp.topic_no;
CREATE FUNCTION pg_temp.add(cols text, vals text, with_detail boolean DEFAULT false)
RETURNS text LANGUAGE sql AS $$
	SELECT CASE WHEN with_detail THEN pg_temp.try_detail(q) ELSE pg_temp.try(q) END
	FROM format('INSERT INTO grelout.handlers (topic, enabled, %s) VALUES (%L, false, %s)',
		cols, 'h' || nextval('pg_temp.topic_no'), vals) AS q
$$;

-- URLs
SELECT url, pg_temp.add('url', quote_literal(url)) AS result
FROM unnest(ARRAY[
	'http://127.0.0.1:9/hook',
	'https://example.com/webhooks/orders?x=1#frag',
	'http://[::1]:8080/',
	'https://user:password@hooks.example.com:8443/p',
	'HTTPS://EXAMPLE.COM',
	'http://localhost',
	'file:///etc/passwd',
	'ftp://example.com/x',
	'gopher://example.com:70/1',
	'javascript:alert(1)',
	'data:text/plain,hi',
	'mailto:a@example.com',
	'example.com/hook',
	'//example.com/hook',
	'http:/example.com',
	'http:example.com',
	'http://',
	'https://',
	'http:///path',
	'http://:8080/path',
	'http://user@/path',
	'http://[]/',
	'http://[::1/',
	' http://example.com',
	'http://example.com ',
	'http://exa mple.com/',
	'http://example.com/a b',
	E'http://example.com/\n',
	E'http://example.com/\tx',
	E'http://example.com/\r\nHost: evil',
	'']) AS url;
SELECT pg_temp.add('url', quote_literal('http://example.com/' || repeat('a', 5000))) AS url_5000_bytes;
SELECT pg_temp.add('url', 'NULL') AS url_null;

-- secrets: whsec_ + base64 of 24 to 64 bytes
SELECT n, pg_temp.add('url, secret', format('%L, %L', 'http://127.0.0.1:9/', pg_temp.whsec(n)), true) AS result
FROM unnest(ARRAY[1, 23, 24, 25, 32, 63, 64, 65, 100]) AS n;
SELECT secret, pg_temp.add('url, secret', format('%L, %L', 'http://127.0.0.1:9/', secret), true) AS result
FROM unnest(ARRAY[
	'whsec_',
	'whsec_!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!',
	'whsec_a2tra2tra2tra2tra2tra2tra2tra2tra2tr*',
	'whsec_a2tra2tra2tra2tr a2tra2tra2tra2tra2tr',
	'a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tr',
	'whsec-a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tr',
	'sk_a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tr',
	'']) AS secret;
-- the secret never appears in the error message
SELECT pg_temp.add('url, secret', format('%L, %L', 'http://127.0.0.1:9/', 'whsec_c2VjcmV0LXNob3J0'), true)
	LIKE '%c2VjcmV0%' AS short_secret_echoed;
-- previous_secret: the same rules
SELECT n, pg_temp.add('url, secret, previous_secret', format('%L, %L, %L',
	'http://127.0.0.1:9/', pg_temp.whsec(32), pg_temp.whsec(n)), true) AS result
FROM unnest(ARRAY[23, 24, 64, 65]) AS n;
SELECT pg_temp.add('url, secret, previous_secret', format('%L, %L, %L',
	'http://127.0.0.1:9/', pg_temp.whsec(32), 'not-a-secret'), true) AS previous_no_prefix;
SELECT pg_temp.add('url, secret, previous_secret', format('%L, %L, %L',
	'http://127.0.0.1:9/', pg_temp.whsec(32), 'whsec_%%%'), true) AS previous_bad_base64;

-- headers: an object of valid string values, no reserved name
SELECT headers, pg_temp.add('url, headers', format('%L, %L', 'http://127.0.0.1:9/', headers)) AS result
FROM unnest(ARRAY[
	'{}',
	'{"Authorization": "Bearer abc", "X-Api-Key": "k1", "x-tenant": "a b c"}',
	'[]',
	'"Authorization: x"',
	'{"x-a": 1}',
	'{"x-a": null}',
	'{"x-a": ["v"]}',
	'{"bad name": "v"}',
	'{"": "v"}',
	'{"x:y": "v"}',
	'{"x-a": "v\r\nx-evil: 1"}',
	'{"x-a": "v\nw"}',
	'{"Content-Type": "text/plain"}',
	'{"HOST": "evil.example.com"}',
	'{"content-length": "1"}',
	'{"Connection": "close"}',
	'{"transfer-encoding": "chunked"}',
	'{"User-Agent": "x"}',
	'{"Webhook-Signature": "v1,forged"}',
	'{"webhook-id": "x"}',
	'{"webhook-timestamp": "1"}',
	'{"Grelout-Topic": "x"}',
	'{"grelout-whatever": "x"}']::jsonb[]) AS headers;
SELECT pg_temp.add('url, headers', format('%L, NULL', 'http://127.0.0.1:9/')) AS headers_null;

-- timeout and max_attempts: positive
SELECT t AS timeout, pg_temp.add('url, timeout', format('%L, %L', 'http://127.0.0.1:9/', t)) AS result
FROM unnest(ARRAY['5 seconds', '1 millisecond', '0.000001 s', '1 hour', '0',
	'-1 second', '1 day -25 hours', '2 hours']) AS t;
SELECT n AS max_attempts, pg_temp.add('url, max_attempts', format('%L, %s', 'http://127.0.0.1:9/', n)) AS result
FROM unnest(ARRAY[1, 3, 1000, 0, -1]) AS n;

-- a complete, valid handler, and what was stored for it
INSERT INTO grelout.handlers (topic, url, headers, secret, previous_secret, timeout, max_attempts, enabled)
VALUES ('orders', 'https://hooks.example.com/orders', '{"Authorization": "Bearer t"}',
	pg_temp.whsec(32), pg_temp.whsec(24), '5 seconds', 3, false);
SELECT topic, url, headers, secret = pg_temp.whsec(32) AS secret_kept,
	previous_secret = pg_temp.whsec(24) AS previous_kept, timeout, max_attempts, enabled
FROM grelout.handlers WHERE topic = 'orders';
-- defaults: headers '{}', enabled true, the rest NULL
INSERT INTO grelout.handlers (topic, url) VALUES ('defaults', 'http://127.0.0.1:9/');
UPDATE grelout.handlers SET enabled = false WHERE topic = 'defaults';
SELECT headers, secret, previous_secret, timeout, max_attempts
FROM grelout.handlers WHERE topic = 'defaults';

-- UPDATE is validated like INSERT, and a refused UPDATE changes nothing
SELECT pg_temp.try($$UPDATE grelout.handlers SET url = 'file:///etc/shadow' WHERE topic = 'orders'$$) AS update_url;
SELECT pg_temp.try($$UPDATE grelout.handlers SET secret = 'whsec_short' WHERE topic = 'orders'$$) AS update_secret;
SELECT pg_temp.try($$UPDATE grelout.handlers SET previous_secret = 'nope' WHERE topic = 'orders'$$) AS update_previous;
SELECT pg_temp.try($$UPDATE grelout.handlers SET headers = '{"Host": "x"}' WHERE topic = 'orders'$$) AS update_headers;
SELECT pg_temp.try($$UPDATE grelout.handlers SET timeout = '-5 s' WHERE topic = 'orders'$$) AS update_timeout;
SELECT pg_temp.try($$UPDATE grelout.handlers SET max_attempts = 0 WHERE topic = 'orders'$$) AS update_attempts;
SELECT pg_temp.try($$UPDATE grelout.handlers SET url = 'http://127.0.0.1:9/ok' WHERE topic = 'orders'$$) AS update_ok;
SELECT topic, url, headers, secret = pg_temp.whsec(32) AS secret_kept, timeout, max_attempts
FROM grelout.handlers WHERE topic = 'orders';
-- rotation: the new secret, the old one as previous_secret
SELECT pg_temp.try(format('UPDATE grelout.handlers SET secret = %L, previous_secret = secret WHERE topic = %L',
	pg_temp.whsec(64), 'orders')) AS rotate;
SELECT secret = pg_temp.whsec(64) AS new_secret, previous_secret = pg_temp.whsec(32) AS old_secret
FROM grelout.handlers WHERE topic = 'orders';
-- secrets may be removed
SELECT pg_temp.try($$UPDATE grelout.handlers SET secret = NULL, previous_secret = NULL WHERE topic = 'orders'$$) AS unsign;

-- one handler a topic
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url, enabled) VALUES ('orders', 'http://127.0.0.1:9/', false)$$) AS duplicate_topic;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url, enabled) VALUES (NULL, 'http://127.0.0.1:9/', false)$$) AS null_topic;

-- only the valid rows were stored
SELECT count(*) AS handlers,
	count(*) FILTER (WHERE url ~* '^https?://[^/?#@]') AS http_urls,
	bool_and(NOT enabled) AS all_disabled
FROM grelout.handlers;

TRUNCATE grelout.handlers;
