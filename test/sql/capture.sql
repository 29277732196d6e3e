-- capture: grelout.capture puts triggers on a table that publish each row
-- change in the writing transaction (topic <topic>.<op>, key the primary
-- key, payload {op, schema, table, new, old}); column lists, an UPDATE of
-- uncaptured columns only, TRUNCATE, rollbacks and savepoints, partitioned
-- tables, the payload limit, ownership, capturing twice, uncapture.  The
-- topics have no handler, so the relay leaves every message pending.
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

-- the messages published so far, oldest first, then forgotten
CREATE FUNCTION pg_temp.published() RETURNS TABLE (topic text, key text, payload jsonb)
LANGUAGE sql AS $$
	WITH d AS (DELETE FROM grelout.outbox RETURNING id, topic, key, payload)
	SELECT topic, key, payload FROM d ORDER BY id
$$;

-- a composite primary key: the key is the JSON array of its values
CREATE TABLE accounts (region text, id int, balance numeric, note text,
	PRIMARY KEY (region, id));
SELECT grelout.capture('accounts');
SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
WHERE tgrelid = 'accounts'::regclass ORDER BY tgname;
INSERT INTO accounts VALUES ('eu', 7, 10.50, 'first'), ('us', 8, 0, NULL);
UPDATE accounts SET balance = balance + 1 WHERE id = 7;
DELETE FROM accounts WHERE id = 8;
SELECT * FROM pg_temp.published();

-- an UPDATE that changes nothing publishes nothing
UPDATE accounts SET note = note;
SELECT count(*) AS after_noop_update FROM grelout.outbox;
-- TRUNCATE is not among the default events
TRUNCATE accounts;
SELECT count(*) AS after_uncaptured_truncate FROM grelout.outbox;

-- the message is part of the writing transaction: a rollback, or a
-- savepoint rolled back, takes it away with the row
BEGIN;
INSERT INTO accounts VALUES ('eu', 1, 1, 'rolled back');
ROLLBACK;
BEGIN;
INSERT INTO accounts VALUES ('eu', 2, 2, 'kept');
SAVEPOINT s;
INSERT INTO accounts VALUES ('eu', 3, 3, 'rolled back to the savepoint');
UPDATE accounts SET note = 'changed, then rolled back' WHERE id = 2;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT * FROM pg_temp.published();
SELECT region, id, note FROM accounts ORDER BY id;

-- capturing twice is refused, naming the table
SELECT pg_temp.try($$SELECT grelout.capture('accounts')$$) AS capture_twice;
SELECT pg_temp.try($$SELECT grelout.capture('accounts', 'other')$$) AS capture_twice_other_topic;

-- a column list and a topic of one's own, with TRUNCATE; the key is the
-- primary key's text, whether or not its column is captured
CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(8,2),
	stock int, updated_at timestamptz);
SELECT grelout.capture('items', topic => 'shop.items',
	events => '{insert,update,delete,truncate}', columns => '{name,price}');
SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
WHERE tgrelid = 'items'::regclass ORDER BY tgname;
INSERT INTO items VALUES (42, 'lamp', 19.90, 5, '2026-01-01 00:00+00');
-- an UPDATE of uncaptured columns only: no message
UPDATE items SET stock = stock - 1, updated_at = '2026-01-02 00:00+00';
SELECT count(*) AS after_uncaptured_update FROM grelout.outbox
WHERE topic = 'shop.items.update';
-- one that also changes a captured column: a message, with the captured
-- columns only
UPDATE items SET stock = stock - 1, price = 17.50;
-- setting a captured column to the value it has: no message
UPDATE items SET name = 'lamp';
DELETE FROM items;
INSERT INTO items SELECT g, 'item ' || g, g, g FROM generate_series(1, 3) AS g;
TRUNCATE items;
SELECT * FROM pg_temp.published();

-- a table without a primary key: the key is NULL; every column's type as
-- to_jsonb renders it
CREATE TABLE events_log (at timestamptz, tags text[], doc jsonb, flag boolean,
	n numeric, b bytea);
SELECT grelout.capture('events_log', events => '{insert}');
INSERT INTO events_log VALUES ('2026-03-04 05:06:07+00', '{a,b}', '{"x": [1, null]}',
	true, 1e3, '\x00ff');
SELECT topic, key IS NULL AS no_key, payload->'new' AS new FROM pg_temp.published();
-- only the events asked for
UPDATE events_log SET flag = false;
DELETE FROM events_log;
SELECT count(*) AS not_captured_events FROM grelout.outbox;
-- a DEFERRABLE primary key is no key (it may not hold yet), on every
-- version: 18 can report one, grelout does not ask (src/compat.h)
CREATE TABLE deferred_keys (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text);
SELECT grelout.capture('deferred_keys', events => '{insert}');
INSERT INTO deferred_keys VALUES (7, 'x');
SELECT topic, key IS NULL AS no_key FROM pg_temp.published();
SELECT grelout.uncapture('deferred_keys');
DROP TABLE deferred_keys;
-- the payload follows the table as it is now (a new column, a new name);
-- the topic stays the one captured
ALTER TABLE events_log ADD COLUMN extra int DEFAULT 5;
ALTER TABLE events_log RENAME TO events_log_renamed;
INSERT INTO events_log_renamed (flag) VALUES (true);
SELECT topic, payload->>'table' AS "table", payload->'new' AS new FROM pg_temp.published();

-- a partitioned table: present and future partitions, under the parent's
-- name, even a partition attached with its columns in another order and a
-- dropped column, and writes made to a partition directly
CREATE TABLE measures (id int, site text, v text, PRIMARY KEY (id, site))
	PARTITION BY LIST (site);
CREATE TABLE measures_a PARTITION OF measures FOR VALUES IN ('a');
SELECT grelout.capture('measures', events => '{insert,update,delete,truncate}');
CREATE TABLE measures_b (v text, site text NOT NULL, gone int, id int NOT NULL);
ALTER TABLE measures_b DROP COLUMN gone;
ALTER TABLE measures ATTACH PARTITION measures_b FOR VALUES IN ('b');
CREATE TABLE measures_c PARTITION OF measures FOR VALUES IN ('c');
INSERT INTO measures VALUES (1, 'a', 'one'), (2, 'b', 'two'), (3, 'c', 'three');
INSERT INTO measures_b VALUES ('four', 'b', 4);
UPDATE measures SET v = 'TWO' WHERE id = 2;
DELETE FROM measures_c;
TRUNCATE measures;
SELECT * FROM pg_temp.published();
SELECT tgrelid::regclass AS captured_through_clone FROM pg_trigger
WHERE tgfoid = 'grelout._capture'::regproc AND tgparentid <> 0 ORDER BY tgrelid::regclass::text;
-- a partition of a captured table cannot be captured or uncaptured alone
SELECT pg_temp.try($$SELECT grelout.capture('measures_a')$$) AS capture_partition;
SELECT pg_temp.try($$SELECT grelout.uncapture('measures_a')$$) AS uncapture_partition;

-- a payload over grelout.max_payload_size fails the write (54000)
SET grelout.max_payload_size = '200B';
SELECT pg_temp.try($$INSERT INTO accounts VALUES ('eu', 9, 0, repeat('x', 300))$$) AS oversized;
INSERT INTO accounts VALUES ('eu', 10, 0, 'small');
RESET grelout.max_payload_size;
SELECT count(*) AS oversized_rows FROM accounts WHERE id = 9;
SELECT topic, key FROM pg_temp.published();
-- the key follows outbox_publish's rules too
CREATE TABLE tags (name text PRIMARY KEY);
SELECT grelout.capture('tags');
SELECT pg_temp.try($$INSERT INTO tags VALUES (repeat('k', 256))$$) AS long_key;
SELECT pg_temp.try($$INSERT INTO tags VALUES (E'a\nb')$$) AS control_key;

-- bad arguments
CREATE TABLE spare (id int PRIMARY KEY, v text);
SELECT pg_temp.try($$SELECT grelout.capture(NULL)$$) AS null_table;
SELECT pg_temp.try($$SELECT grelout.capture('spare', events => NULL)$$) AS null_events;
SELECT pg_temp.try($$SELECT grelout.capture('spare', events => '{}')$$) AS no_events;
SELECT pg_temp.try($$SELECT grelout.capture('spare', events => '{insert,upsert}')$$) AS unknown_event;
SELECT pg_temp.try($$SELECT grelout.capture('spare', columns => '{}')$$) AS no_columns;
SELECT pg_temp.try($$SELECT grelout.capture('spare', columns => '{v,nope}')$$) AS unknown_column;
SELECT pg_temp.try($$SELECT grelout.capture('spare', columns => '{v,v}')$$) AS column_twice;
SELECT pg_temp.try($$SELECT grelout.capture('spare', columns => '{ctid}')$$) AS system_column;
SELECT pg_temp.try($$SELECT grelout.capture('spare', topic => '')$$) AS empty_topic;
SELECT pg_temp.try($$SELECT grelout.capture('spare', topic => 'grelout')$$) AS reserved_topic;
SELECT pg_temp.try($$SELECT grelout.capture('spare', topic => repeat('t', 249))$$) AS long_topic;
SELECT pg_temp.try($$SELECT grelout.capture('spare', topic => E'a\tb')$$) AS control_topic;
SELECT pg_temp.try($$SELECT grelout.capture('grelout.outbox')$$) AS own_table;
SELECT pg_temp.try($$SELECT grelout.capture('grelout.status')$$) AS a_view;
SELECT pg_temp.try($$SELECT grelout.uncapture('spare')$$) AS not_captured;
SELECT count(*) AS spare_triggers FROM pg_trigger WHERE tgrelid = 'spare'::regclass;
-- the trigger function is for triggers only
SELECT pg_temp.try($$SELECT grelout._capture()$$) AS direct_call;

-- ownership: the functions are granted to no one by default; once
-- granted, only the table's owner (current_user at the call) may capture
-- or uncapture it; a writer of a captured table needs no grant at all;
-- the table's owner is the messages' publisher, whoever writes (issue 29:
-- a row's changes are one publisher's, in order for an ordered handler)
CREATE ROLE regress_capture_owner;
CREATE ROLE regress_capture_other;
CREATE ROLE regress_capture_writer;
SET ROLE regress_capture_other;
SELECT pg_temp.try($$SELECT grelout.capture('spare')$$) AS without_grant;
RESET ROLE;
GRANT USAGE ON SCHEMA grelout TO regress_capture_owner, regress_capture_other;
GRANT EXECUTE ON FUNCTION grelout.capture(regclass, text, text[], text[]),
	grelout.uncapture(regclass) TO regress_capture_owner, regress_capture_other;
CREATE TABLE owned (id int PRIMARY KEY, v text);
ALTER TABLE owned OWNER TO regress_capture_owner;
GRANT INSERT, UPDATE, DELETE ON owned TO regress_capture_writer;
SET ROLE regress_capture_other;
SELECT pg_temp.try($$SELECT grelout.capture('owned')$$) AS non_owner_capture;
RESET ROLE;
SELECT count(*) AS owned_triggers FROM pg_trigger WHERE tgrelid = 'owned'::regclass;
SET ROLE regress_capture_owner;
SELECT pg_temp.try($$SELECT grelout.capture('owned')$$) AS owner_capture;
RESET ROLE;
SET ROLE regress_capture_other;
SELECT pg_temp.try($$SELECT grelout.uncapture('owned')$$) AS non_owner_uncapture;
RESET ROLE;
SET ROLE regress_capture_writer;
INSERT INTO owned VALUES (1, 'by the writer');
RESET ROLE;
SELECT o.topic, o.key, o.published_by::regrole AS publisher
FROM grelout.outbox AS o;
TRUNCATE grelout.outbox;

-- uncapture drops the triggers (with their clones on partitions): no more
-- messages
SET ROLE regress_capture_owner;
SELECT grelout.uncapture('owned');
RESET ROLE;
SELECT grelout.uncapture('accounts');
SELECT grelout.uncapture('items');
SELECT grelout.uncapture('measures');
SELECT count(*) AS capture_triggers_left FROM pg_trigger
WHERE tgfoid = 'grelout._capture'::regproc
	AND tgrelid IN ('owned'::regclass, 'accounts'::regclass, 'items'::regclass,
		'measures'::regclass, 'measures_a'::regclass, 'measures_b'::regclass,
		'measures_c'::regclass);
INSERT INTO owned VALUES (2, 'uncaptured');
INSERT INTO accounts VALUES ('eu', 11, 0, 'uncaptured');
UPDATE items SET price = 1;
INSERT INTO measures VALUES (5, 'a', 'uncaptured');
TRUNCATE items;
SELECT count(*) AS after_uncapture FROM grelout.outbox;
SELECT pg_temp.try($$SELECT grelout.uncapture('accounts')$$) AS uncapture_twice;
-- and the table can be captured again
SELECT grelout.capture('accounts', columns => '{id}');
UPDATE accounts SET note = 'uncaptured column';
DELETE FROM accounts WHERE id = 10;
SELECT * FROM pg_temp.published();

DROP TABLE accounts, items, events_log_renamed, measures, tags, spare, owned;
REVOKE ALL ON SCHEMA grelout FROM regress_capture_owner, regress_capture_other;
REVOKE ALL ON FUNCTION grelout.capture(regclass, text, text[], text[]),
	grelout.uncapture(regclass) FROM regress_capture_owner, regress_capture_other;
DROP ROLE regress_capture_owner, regress_capture_other, regress_capture_writer;
