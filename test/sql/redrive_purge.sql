-- redrive_purge: outbox_redrive moves dead messages (all, or one topic's)
-- back to pending, due now, attempts 0, and returns how many;
-- outbox_purge deletes delivered and dead messages (all, or those
-- delivered or dead longer ago than older_than), never pending or
-- processing ones.  Rows are put in each state directly, as superuser.
-- The topics have no handler, so the relay never claims them.
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

-- pg_temp.stage(topic, state, label): a message in that state, as a relay
-- would have left it
CREATE FUNCTION pg_temp.stage(t text, s text, label text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
	new_id uuid := outbox_publish(t, jsonb_build_object('label', label));
BEGIN
	UPDATE grelout.outbox o SET state = s,
		attempts = CASE s WHEN 'pending' THEN 0 ELSE 5 END,
		available_at = CASE s WHEN 'processing' THEN now() + interval '1 hour'
			ELSE now() - interval '1 hour' END,
		last_error = CASE s WHEN 'dead' THEN 'HTTP 500: boom' END,
		dead_at = CASE s WHEN 'dead' THEN now() - interval '1 minute' END,
		delivered_at = CASE s WHEN 'delivered' THEN now() - interval '1 minute' END,
		lease = CASE s WHEN 'processing' THEN 7 END
	WHERE o.id = new_id;
	RETURN new_id;
END $$;

SELECT pg_temp.stage('rd.a', 'dead', 'a1') IS NOT NULL,
	pg_temp.stage('rd.a', 'dead', 'a2') IS NOT NULL,
	pg_temp.stage('rd.a', 'pending', 'a3') IS NOT NULL,
	pg_temp.stage('rd.a', 'processing', 'a4') IS NOT NULL,
	pg_temp.stage('rd.a', 'delivered', 'a5') IS NOT NULL,
	pg_temp.stage('rd.b', 'dead', 'b1') IS NOT NULL,
	pg_temp.stage('rd.c', 'pending', 'c1') IS NOT NULL;

-- one topic: only its dead messages move, with attempts reset, due now,
-- dead_at and the lease cleared
BEGIN;
SELECT outbox_redrive('rd.a') AS redriven_a;
SELECT payload->>'label' AS label, state, attempts,
	available_at = now() AS due_now, dead_at IS NULL AS no_dead_at,
	lease IS NULL AS no_lease
FROM grelout.outbox ORDER BY payload->>'label';
COMMIT;

-- a topic with nothing dead, and an unknown topic: 0
SELECT outbox_redrive('rd.a') AS again_a, outbox_redrive('rd.c') AS none_c,
	outbox_redrive('no.such.topic') AS unknown;

-- all topics: the remaining dead message of rd.b, nothing else
SELECT pg_temp.stage('rd.c', 'dead', 'c2') IS NOT NULL;
BEGIN;
SELECT outbox_redrive() AS redriven_all;
SELECT payload->>'label' AS label, topic, state, attempts, available_at = now() AS due_now
FROM grelout.outbox ORDER BY payload->>'label';
COMMIT;
SELECT outbox_redrive() AS nothing_left, outbox_redrive(NULL) AS null_is_all;

-- a rolled-back redrive changes nothing
UPDATE grelout.outbox SET state = 'dead', dead_at = now(), attempts = 3
WHERE payload->>'label' = 'b1';
BEGIN;
SELECT outbox_redrive('rd.b') AS redriven_then_rolled_back;
ROLLBACK;
SELECT state, attempts FROM grelout.outbox WHERE payload->>'label' = 'b1';

TRUNCATE grelout.outbox;

-- purge.  Ages are set so that the right column decides: a dead message
-- counts from dead_at, a delivered one from delivered_at, not created_at.
SELECT pg_temp.stage('pg', 'pending', 'pending old') IS NOT NULL,
	pg_temp.stage('pg', 'processing', 'processing old') IS NOT NULL,
	pg_temp.stage('pg', 'delivered', 'delivered 2 days ago') IS NOT NULL,
	pg_temp.stage('pg', 'delivered', 'delivered 1 hour ago, created long ago') IS NOT NULL,
	pg_temp.stage('pg', 'dead', 'dead 3 days ago, created just now') IS NOT NULL,
	pg_temp.stage('pg', 'dead', 'dead 1 hour ago, created long ago') IS NOT NULL,
	pg_temp.stage('pg.other', 'dead', 'other topic dead 3 days ago') IS NOT NULL;
UPDATE grelout.outbox SET created_at = now() - interval '30 days'
WHERE payload->>'label' IN ('pending old', 'processing old',
	'delivered 1 hour ago, created long ago', 'dead 1 hour ago, created long ago');
UPDATE grelout.outbox SET created_at = now() - interval '3 days',
	delivered_at = now() - interval '2 days'
WHERE payload->>'label' = 'delivered 2 days ago';
UPDATE grelout.outbox SET delivered_at = now() - interval '1 hour'
WHERE payload->>'label' = 'delivered 1 hour ago, created long ago';
UPDATE grelout.outbox SET dead_at = now() - interval '3 days'
WHERE payload->>'label' IN ('dead 3 days ago, created just now', 'other topic dead 3 days ago');
UPDATE grelout.outbox SET dead_at = now() - interval '1 hour'
WHERE payload->>'label' = 'dead 1 hour ago, created long ago';

-- a negative interval is an error, and deletes nothing
SELECT pg_temp.try($$SELECT outbox_purge('-1 day')$$) AS negative;
SELECT pg_temp.try($$SELECT outbox_purge('-00:00:01')$$) AS negative_second;
SELECT count(*) AS rows_after_errors FROM grelout.outbox;

-- older than 10 days: nothing is that old by its own clock
SELECT outbox_purge('10 days') AS purged_10_days;
-- older than 1 day: the delivered and dead ones of 2 and 3 days, any topic
SELECT outbox_purge('1 day') AS purged_1_day;
SELECT payload->>'label' AS label, state FROM grelout.outbox ORDER BY payload->>'label';
-- a purge rolled back deletes nothing
BEGIN;
SELECT outbox_purge() AS purged_then_rolled_back;
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM grelout.outbox;
-- no argument: every delivered and dead message
SELECT outbox_purge() AS purged_all;
SELECT payload->>'label' AS label, state FROM grelout.outbox ORDER BY payload->>'label';
-- pending and processing are never purged, whatever their age
SELECT outbox_purge() AS purged_again, outbox_purge('0') AS purged_zero,
	outbox_purge(NULL) AS purged_null;
SELECT count(*) AS left_rows FROM grelout.outbox;

TRUNCATE grelout.outbox;
