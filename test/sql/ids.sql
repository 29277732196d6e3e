-- ids: outbox_publish returns RFC 9562 UUIDv7 ids made in C, time-ordered
-- and strictly increasing within one backend.  The topics have no handler,
-- so the relay leaves every row pending.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

-- one id: version nibble 7, variant bits 10, text form of a uuid
SELECT outbox_publish('ids.one', '{"n": 1}') AS id \gset
SELECT pg_typeof(:'id'::uuid) AS type,
	substr(:'id', 15, 1) AS version,
	substr(:'id', 20, 1) IN ('8', '9', 'a', 'b') AS variant_rfc,
	length(:'id') AS text_length;

-- the first 48 bits are the Unix time in milliseconds of the publish
SELECT abs(('x' || lpad(replace(substr(:'id', 1, 13), '-', ''), 16, '0'))::bit(64)::bigint
	- (extract(epoch FROM clock_timestamp()) * 1000)::bigint) < 60000 AS time_is_now;

-- the row carries the returned id
SELECT count(*) AS rows_with_that_id FROM grelout.outbox WHERE id = :'id';

-- 1000 ids made in one statement: all distinct, each greater than the one
-- made before it, each a v7 id
CREATE TEMP TABLE batch AS
	SELECT g, outbox_publish('ids.batch', pg_catalog.to_jsonb(g)) AS id
	FROM generate_series(1, 1000) AS g;
SELECT count(*) AS ids,
	count(DISTINCT id) AS distinct_ids,
	bool_and(substr(id::text, 15, 1) = '7') AS all_v7,
	bool_and(substr(id::text, 20, 1) IN ('8', '9', 'a', 'b')) AS all_rfc_variant
FROM batch;
SELECT count(*) FILTER (WHERE prev IS NOT NULL AND id <= prev) AS out_of_order
FROM (SELECT id, lag(id) OVER (ORDER BY g) AS prev FROM batch) AS s;

-- sorting the stored rows by id gives the order they were published in
SELECT bool_and((payload)::int = rn) AS id_order_is_publish_order
FROM (SELECT payload, row_number() OVER (ORDER BY id) AS rn
	  FROM grelout.outbox WHERE topic = 'ids.batch') AS s;

-- ids made in a loop, one statement each, also keep increasing, and stay
-- above every id of the batch before
DO $$
DECLARE
	prev uuid := (SELECT id FROM batch ORDER BY id DESC LIMIT 1);
	cur uuid;
	bad int := 0;
BEGIN
	FOR i IN 1..500 LOOP
		cur := outbox_publish('ids.loop', '{}');
		IF cur <= prev THEN
			bad := bad + 1;
		END IF;
		prev := cur;
	END LOOP;
	RAISE NOTICE 'ids out of order in the loop: %', bad;
END $$;

-- in a later transaction of the same backend too
SELECT outbox_publish('ids.later', '{}') > (SELECT id FROM grelout.outbox
	WHERE topic IN ('ids.batch', 'ids.loop', 'ids.one')
	ORDER BY id DESC LIMIT 1) AS later_id_is_greater;

-- the time part never goes backwards across the batch either
SELECT bool_and(ms >= prev_ms) AS time_part_monotonic
FROM (SELECT ms, lag(ms) OVER (ORDER BY g) AS prev_ms
	  FROM (SELECT g, ('x' || lpad(replace(substr(id::text, 1, 13), '-', ''), 16, '0'))::bit(64)::bigint AS ms
			FROM batch) AS t) AS s
WHERE prev_ms IS NOT NULL;

SELECT count(*) AS stored FROM grelout.outbox;
TRUNCATE grelout.outbox;
