-- transactions: outbox_publish is part of the caller's transaction.  The
-- message commits or rolls back with it, savepoints and PL/pgSQL exception
-- blocks included (prepared transactions: see prepared.sql).  The topics
-- have no handler: rows stay pending.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

CREATE TABLE orders (id int PRIMARY KEY);

-- commit: the message and the application's row are both stored
BEGIN;
INSERT INTO orders VALUES (1);
SELECT outbox_publish('tx.commit', '{"order": 1}') AS committed_id \gset
COMMIT;
SELECT count(*) AS messages,
	(SELECT count(*) FROM orders WHERE id = 1) AS orders
FROM grelout.outbox WHERE id = :'committed_id';

-- rollback: neither is stored
BEGIN;
INSERT INTO orders VALUES (2);
SELECT outbox_publish('tx.rollback', '{"order": 2}') IS NOT NULL AS staged;
SELECT count(*) AS visible_inside FROM grelout.outbox WHERE topic = 'tx.rollback';
ROLLBACK;
SELECT count(*) AS messages,
	(SELECT count(*) FROM orders WHERE id = 2) AS orders
FROM grelout.outbox WHERE topic = 'tx.rollback';

-- a failed statement aborts the transaction: its earlier message is gone
BEGIN;
SELECT outbox_publish('tx.failed', '{}') IS NOT NULL AS staged;
INSERT INTO orders VALUES (1);
\echo :LAST_ERROR_SQLSTATE
COMMIT;
SELECT count(*) AS messages FROM grelout.outbox WHERE topic = 'tx.failed';

-- savepoints: a message published after the savepoint is gone after
-- ROLLBACK TO, those before it and after it stay; RELEASE keeps
BEGIN;
SELECT outbox_publish('tx.sp', '{"n": "before"}') IS NOT NULL AS staged;
SAVEPOINT s1;
SELECT outbox_publish('tx.sp', '{"n": "rolled back"}') IS NOT NULL AS staged;
SAVEPOINT s2;
SELECT outbox_publish('tx.sp', '{"n": "nested, rolled back"}') IS NOT NULL AS staged;
ROLLBACK TO SAVEPOINT s1;
SELECT outbox_publish('tx.sp', '{"n": "after"}') IS NOT NULL AS staged;
SAVEPOINT s3;
SELECT outbox_publish('tx.sp', '{"n": "released"}') IS NOT NULL AS staged;
RELEASE SAVEPOINT s3;
COMMIT;
SELECT payload->>'n' AS n FROM grelout.outbox WHERE topic = 'tx.sp' ORDER BY id;

-- a savepoint rollback also frees a dedup_key taken inside it
BEGIN;
SAVEPOINT s;
SELECT outbox_publish('tx.sp.dedup', '{"n": 1}', dedup_key => 'sp-key') AS sp1 \gset
ROLLBACK TO SAVEPOINT s;
SELECT outbox_publish('tx.sp.dedup', '{"n": 2}', dedup_key => 'sp-key') AS sp2 \gset
COMMIT;
SELECT :'sp1'::uuid <> :'sp2'::uuid AS new_id_after_savepoint_rollback;
SELECT payload FROM grelout.outbox WHERE dedup_key = 'sp-key';

-- a PL/pgSQL exception block is a subtransaction: same as a savepoint
DO $$
BEGIN
	PERFORM outbox_publish('tx.plpgsql', '{"n": "kept"}');
	BEGIN
		PERFORM outbox_publish('tx.plpgsql', '{"n": "undone"}');
		RAISE EXCEPTION 'undo the block' USING ERRCODE = 'raise_exception';
	EXCEPTION WHEN raise_exception THEN
		NULL;
	END;
END $$;
SELECT payload->>'n' AS n FROM grelout.outbox WHERE topic = 'tx.plpgsql' ORDER BY id;

SELECT topic, count(*) FROM grelout.outbox GROUP BY topic ORDER BY topic;

DROP TABLE orders;
TRUNCATE grelout.outbox;
