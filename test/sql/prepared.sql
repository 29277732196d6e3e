-- prepared: a prepared transaction's messages exist only after COMMIT
-- PREPARED; ROLLBACK PREPARED discards them; a dedup key is taken at COMMIT
-- PREPARED.  The topics have no handler: rows stay pending.  Needs
-- max_prepared_transactions > 0; on a server without it (the default, as
-- under "make installcheck" with only the settings README.md asks for),
-- PREPARE TRANSACTION fails and prepared_1.out is the expected output.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

CREATE TABLE orders (id int PRIMARY KEY);

-- prepared transactions: nothing is visible until COMMIT PREPARED
BEGIN;
INSERT INTO orders VALUES (3);
SELECT outbox_publish('tx.prepared', '{"order": 3}') AS prepared_id \gset
PREPARE TRANSACTION 'grelout_p1';
SELECT count(*) AS visible_while_prepared FROM grelout.outbox WHERE topic = 'tx.prepared';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'grelout_p1';
COMMIT PREPARED 'grelout_p1';
SELECT id = :'prepared_id' AS same_id, state, attempts,
	(SELECT count(*) FROM orders WHERE id = 3) AS orders
FROM grelout.outbox WHERE topic = 'tx.prepared';

-- ROLLBACK PREPARED: the message never exists
BEGIN;
INSERT INTO orders VALUES (4);
SELECT outbox_publish('tx.prepared.rollback', '{"order": 4}') IS NOT NULL AS staged;
PREPARE TRANSACTION 'grelout_p2';
SELECT count(*) AS visible_while_prepared FROM grelout.outbox WHERE topic = 'tx.prepared.rollback';
ROLLBACK PREPARED 'grelout_p2';
SELECT count(*) AS messages,
	(SELECT count(*) FROM orders WHERE id = 4) AS orders
FROM grelout.outbox WHERE topic = 'tx.prepared.rollback';

-- a prepared transaction with a dedup_key, committed: the key is taken
BEGIN;
SELECT outbox_publish('tx.prepared.dedup', '{"n": 1}', dedup_key => 'prep-key') AS pk1 \gset
PREPARE TRANSACTION 'grelout_p3';
COMMIT PREPARED 'grelout_p3';
SELECT outbox_publish('tx.prepared.dedup', '{"n": 2}', dedup_key => 'prep-key') = :'pk1'::uuid
	AS dedup_after_commit_prepared;
SELECT count(*) AS rows_prep_key FROM grelout.outbox WHERE dedup_key = 'prep-key';

-- the session that published goes on normally after a prepared transaction
SELECT outbox_publish('tx.after', '{}') IS NOT NULL AS publishes_after_prepare;

SELECT topic, count(*) FROM grelout.outbox GROUP BY topic ORDER BY topic;
SELECT count(*) AS left_prepared FROM pg_prepared_xacts;

DROP TABLE orders;
TRUNCATE grelout.outbox;
