-- publish: what outbox_publish stores (the row of the contract), the
-- delay, the defaults of the optional arguments, and dedup_key, which
-- returns the stored message's id and stores nothing more.  The topics
-- have no handler, so the relay leaves every row pending.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

-- the stored row, checked inside the publishing transaction so that now()
-- is the same instant the function used
BEGIN;
SELECT outbox_publish('orders.created', '{"order": 42, "items": [1, 2]}',
	key => 'customer-7') AS id \gset
SELECT topic, key, payload, headers, dedup_key, attempts, state,
	available_at = now() AS due_now,
	created_at = now() AS created_now,
	last_error IS NULL AS no_error,
	delivered_at IS NULL AS not_delivered,
	dead_at IS NULL AS not_dead
FROM grelout.outbox WHERE id = :'id';
COMMIT;

-- after commit, the row is still there, unchanged (no handler: pending)
SELECT count(*) AS stored, bool_and(state = 'pending') AS pending,
	bool_and(attempts = 0) AS no_attempt
FROM grelout.outbox WHERE id = :'id';

-- the optional arguments are all nullable; positional call, JSON null and
-- scalar payloads are fine, headers are stored as given
SELECT outbox_publish('misc', 'null', NULL, NULL, NULL, NULL) IS NOT NULL AS null_json_payload;
SELECT outbox_publish('misc', '"just a string"') IS NOT NULL AS scalar_payload;
SELECT outbox_publish('misc', '[1, 2, 3]', headers => '{}') IS NOT NULL AS empty_headers;
SELECT outbox_publish('with.headers', '{}',
	headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X-Correlation-Id": "abc 123", "X-Api-Version": "2"}')
	IS NOT NULL AS valid_headers;
SELECT headers FROM grelout.outbox WHERE topic = 'with.headers';
SELECT payload, key IS NULL AS no_key, headers FROM grelout.outbox
WHERE topic = 'misc' ORDER BY id;

-- limits are in bytes: 255-byte topic, key and dedup_key are accepted
SELECT outbox_publish(repeat('t', 255), '{}', key => repeat('k', 255),
	dedup_key => repeat('d', 255)) IS NOT NULL AS max_lengths_ok;
SELECT length(topic) AS topic_len, length(key) AS key_len,
	length(dedup_key) AS dedup_len
FROM grelout.outbox WHERE topic = repeat('t', 255);
-- a topic with spaces, dots, slashes and non-ASCII letters is fine
SELECT outbox_publish('billing/invoice paid.v2-é', '{}') IS NOT NULL AS unicode_topic;

-- delay: available_at = now() + delay; zero delay is due now
BEGIN;
SELECT outbox_publish('delayed', '{"n": 1}', delay => '1 hour') AS d1 \gset
SELECT outbox_publish('delayed', '{"n": 2}', delay => '0') AS d2 \gset
SELECT outbox_publish('delayed', '{"n": 3}', delay => '1 day -1 hour') AS d3 \gset
-- a month is a calendar month, as timestamptz + interval counts it
SELECT outbox_publish('delayed', '{"n": 4}', delay => '2 mons') AS d4 \gset
SELECT payload->>'n' AS n,
	available_at = now() + CASE payload->>'n' WHEN '1' THEN interval '1 hour'
		WHEN '2' THEN interval '0' WHEN '3' THEN interval '1 day -1 hour'
		ELSE interval '2 mons' END AS available_at_now_plus_delay,
	available_at > now() AS in_future,
	created_at = now() AS created_now
FROM grelout.outbox WHERE topic = 'delayed' ORDER BY id;
SELECT available_at - now() AS one_hour FROM grelout.outbox WHERE id = :'d1';
COMMIT;

-- dedup: a second publish with the same dedup_key returns the stored id,
-- stores nothing and raises nothing, whatever its topic or payload
SELECT outbox_publish('dedup.a', '{"v": "first"}', dedup_key => 'order-42-created') AS first \gset
SELECT outbox_publish('dedup.a', '{"v": "second"}', dedup_key => 'order-42-created') AS second \gset
SELECT outbox_publish('dedup.b', '{"v": "third"}', key => 'k',
	headers => '{"x-a": "b"}', delay => '1 hour', dedup_key => 'order-42-created') AS third \gset
SELECT :'first'::uuid = :'second'::uuid AS same_topic_returns_stored_id,
	:'first'::uuid = :'third'::uuid AS other_topic_returns_stored_id;
SELECT topic, payload, key, headers, available_at <= now() AS due
FROM grelout.outbox WHERE dedup_key = 'order-42-created';
SELECT count(*) AS rows_of_dedup_b FROM grelout.outbox WHERE topic = 'dedup.b';

-- in one transaction too, and the key is case-sensitive text
BEGIN;
SELECT outbox_publish('dedup.tx', '{}', dedup_key => 'k-1') AS t1 \gset
SELECT outbox_publish('dedup.tx', '{}', dedup_key => 'k-1') AS t2 \gset
SELECT outbox_publish('dedup.tx', '{}', dedup_key => 'K-1') AS t3 \gset
COMMIT;
SELECT :'t1'::uuid = :'t2'::uuid AS same_key_same_id,
	:'t1'::uuid <> :'t3'::uuid AS other_key_new_id;
SELECT count(*) AS rows_dedup_tx FROM grelout.outbox WHERE topic = 'dedup.tx';

-- a NULL dedup_key never deduplicates
SELECT outbox_publish('nodedup', '{}') <> outbox_publish('nodedup', '{}') AS two_ids;
SELECT count(*) AS rows_nodedup FROM grelout.outbox WHERE topic = 'nodedup';

-- the dedup_key holds for as long as the row exists: once the message is
-- gone (delivered, or purged), the same key stages a new message
DELETE FROM grelout.outbox WHERE id = :'first';
SELECT outbox_publish('dedup.a', '{"v": "again"}', dedup_key => 'order-42-created') AS again \gset
SELECT :'again'::uuid <> :'first'::uuid AS new_id_after_row_gone;
SELECT topic, payload FROM grelout.outbox WHERE dedup_key = 'order-42-created';

-- a dead message still holds its key
UPDATE grelout.outbox SET state = 'dead', dead_at = now() WHERE id = :'again';
SELECT outbox_publish('dedup.a', '{"v": "while dead"}', dedup_key => 'order-42-created')
	= :'again'::uuid AS dead_row_still_dedups;
SELECT count(*) AS rows_with_key FROM grelout.outbox WHERE dedup_key = 'order-42-created';

TRUNCATE grelout.outbox;
