-- fanout_handlers: the 1.1 columns of grelout.handlers.  A handler's name
-- defaults to its topic and cannot change; its topic is a pattern ('*' one
-- segment, '#' zero or more, no empty segment, no wildcard inside a
-- segment); filter is NULL or a JSON object; max_in_flight and
-- max_per_second are NULL or positive; on_dead is block or skip.  Also
-- grelout._topic_matches.  Every handler here is disabled and no message
-- is published, so the relay never sends anything.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.fanout, grelout.handlers;

CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN others THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- names: the topic when none is given; several handlers per topic
INSERT INTO grelout.handlers (topic, url, enabled)
	VALUES ('orders.created', 'http://127.0.0.1:9/a', false);
INSERT INTO grelout.handlers (name, topic, url, enabled)
	VALUES ('billing', 'orders.created', 'http://127.0.0.1:9/b', false),
		('audit', '#', 'http://127.0.0.1:9/c', false);
SELECT name, topic, filter, max_in_flight, max_per_second, ordered, on_dead
FROM grelout.handlers ORDER BY name;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url) VALUES ('orders.created', 'http://x/')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url) VALUES ('', 'a', 'http://x/')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url) VALUES (repeat('n', 256), 'a', 'http://x/')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, enabled) VALUES (repeat('n', 255), 'a', 'http://x/', false)$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url) VALUES (E'bad\nname', 'a', 'http://x/')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url) VALUES (U&'c1\0085', 'a', 'http://x/')$$);

-- a rename is refused; other updates are not
SELECT pg_temp.try($$UPDATE grelout.handlers SET name = 'invoices' WHERE name = 'billing'$$);
SELECT pg_temp.try($$UPDATE grelout.handlers SET name = NULL WHERE name = 'billing'$$);
SELECT pg_temp.try($$UPDATE grelout.handlers SET name = 'billing', topic = 'orders.*' WHERE name = 'billing'$$);
SELECT name, topic FROM grelout.handlers WHERE name = 'billing';
\set VERBOSITY default
UPDATE grelout.handlers SET name = 'invoices' WHERE name = 'billing';
\set VERBOSITY terse

-- topic patterns
SELECT p AS pattern, pg_temp.try(format(
	'INSERT INTO grelout.handlers (name, topic, url, enabled) VALUES (%L, %L, %L, false)',
	'p' || n, p, 'http://127.0.0.1:9/')) AS result
FROM unnest(ARRAY['orders.*', '*.created', 'orders.#', '#', '#.#', 'a.*.#.b', 'grelout.#',
	'', '.orders', 'orders.', 'orders..created', '.', 'orders*', 'orders.#x', '**',
	'a.*#', E'a\tb']) WITH ORDINALITY AS t(p, n);
SELECT pg_temp.try($$UPDATE grelout.handlers SET topic = 'orders.cr*' WHERE name = 'billing'$$);

-- filter
SELECT f AS filter, pg_temp.try(format(
	'INSERT INTO grelout.handlers (name, topic, url, enabled, filter) VALUES (%L, %L, %L, false, %L)',
	'f' || n, 'orders.created', 'http://127.0.0.1:9/', f)) AS result
FROM unnest(ARRAY['{"region": "eu"}', '{}', '{"a": {"b": [1]}}', '[]', '"eu"', '1', 'null',
	'[{"region": "eu"}]']) WITH ORDINALITY AS t(f, n);
SELECT pg_temp.try($$UPDATE grelout.handlers SET filter = '[1]' WHERE name = 'billing'$$);

-- caps and on_dead
SELECT c AS "column", v AS value, pg_temp.try(format(
	'INSERT INTO grelout.handlers (name, topic, url, enabled, %I) VALUES (%L, %L, %L, false, %L)',
	c, c || n, 'orders.created', 'http://127.0.0.1:9/', v)) AS result
FROM (SELECT c, v, row_number() OVER () AS n
	FROM (VALUES ('max_in_flight', '1'), ('max_in_flight', '0'), ('max_in_flight', '-1'),
		('max_per_second', '1000'), ('max_per_second', '0'), ('max_per_second', '-5'),
		('on_dead', 'block'), ('on_dead', 'skip'), ('on_dead', 'Skip'), ('on_dead', ''))
		AS v(c, v)) AS t;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, on_dead) VALUES ('x', 'a', 'http://x/', NULL)$$);
SELECT pg_temp.try($$UPDATE grelout.handlers SET max_in_flight = 0 WHERE name = 'billing'$$);
SELECT pg_temp.try($$UPDATE grelout.handlers SET on_dead = 'drop' WHERE name = 'billing'$$);
SELECT pg_temp.try($$UPDATE grelout.handlers SET ordered = true, on_dead = 'skip', max_in_flight = 4, max_per_second = 10, filter = '{"k": 1}' WHERE name = 'billing'$$);
SELECT name, filter, max_in_flight, max_per_second, ordered, on_dead
FROM grelout.handlers WHERE name = 'billing';

-- grelout._topic_matches
SELECT p AS pattern, t AS topic, grelout._topic_matches(p, t) AS matches
FROM (VALUES ('orders.created', 'orders.created'), ('orders.created', 'orders.created.eu'),
	('orders.*', 'orders.created'), ('orders.*', 'orders'), ('orders.*', 'orders.created.eu'),
	('*.created', 'orders.created'), ('orders.#', 'orders'), ('orders.#', 'orders.created.eu'),
	('#', 'anything.at.all'), ('#.created', 'created'), ('a.#.b.#.c', 'a.b.x.b.c'),
	('#', 'grelout.handler.disabled'), ('*.handler.disabled', 'grelout.handler.disabled'),
	('grelout.#', 'grelout.handler.disabled'), ('grelout.handler.disabled', 'grelout.handler.disabled'))
	AS t(p, t);
SELECT grelout._topic_matches(NULL, 'a') IS NULL AS strict;

TRUNCATE grelout.handlers;
