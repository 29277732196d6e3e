-- status: grelout.status has one row for each topic that has messages or
-- a handler, with counts per state (0 when none), the age of the oldest
-- due pending message (NULL when none) and whether an enabled handler
-- exists; grelout.handlers_masked shows handlers without their secrets or
-- header values.  Handlers here are disabled, or have no message, so the
-- relay sends nothing.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

-- empty: no rows
SELECT count(*) AS status_rows FROM grelout.status;

-- pg_temp.stage(topic, state, label): a message in that state
CREATE FUNCTION pg_temp.stage(t text, s text, label text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	new_id uuid := outbox_publish(t, jsonb_build_object('label', label));
BEGIN
	UPDATE grelout.outbox o SET state = s,
		attempts = CASE s WHEN 'pending' THEN 0 ELSE 1 END,
		available_at = CASE s WHEN 'processing' THEN now() + interval '1 hour'
			ELSE now() END,
		dead_at = CASE s WHEN 'dead' THEN now() END,
		delivered_at = CASE s WHEN 'delivered' THEN now() END
	WHERE o.id = new_id;
END $$;

SELECT pg_temp.stage('st.a', 'pending', 'due, created 1 hour ago'),
	pg_temp.stage('st.a', 'pending', 'due, created 10 minutes ago'),
	pg_temp.stage('st.a', 'pending', 'delayed, created 5 hours ago'),
	pg_temp.stage('st.a', 'processing', 'processing, created 9 hours ago'),
	pg_temp.stage('st.a', 'dead', 'dead, created 8 hours ago'),
	pg_temp.stage('st.a', 'dead', 'dead'),
	pg_temp.stage('st.a', 'delivered', 'delivered, created 7 hours ago'),
	pg_temp.stage('st.delayed', 'pending', 'only delayed'),
	pg_temp.stage('st.dead', 'dead', 'only dead');
UPDATE grelout.outbox SET created_at = now() - interval '1 hour'
WHERE payload->>'label' = 'due, created 1 hour ago';
UPDATE grelout.outbox SET created_at = now() - interval '10 minutes'
WHERE payload->>'label' = 'due, created 10 minutes ago';
UPDATE grelout.outbox SET created_at = now() - interval '5 hours',
	available_at = now() + interval '1 hour'
WHERE payload->>'label' = 'delayed, created 5 hours ago';
UPDATE grelout.outbox SET created_at = now() - interval '9 hours'
WHERE payload->>'label' = 'processing, created 9 hours ago';
UPDATE grelout.outbox SET created_at = now() - interval '8 hours'
WHERE payload->>'label' = 'dead, created 8 hours ago';
UPDATE grelout.outbox SET created_at = now() - interval '7 hours'
WHERE payload->>'label' = 'delivered, created 7 hours ago';
UPDATE grelout.outbox SET available_at = now() + interval '1 day'
WHERE payload->>'label' = 'only delayed';

-- handlers: disabled for topics with messages (so nothing is sent), one
-- enabled handler for a topic without messages
INSERT INTO grelout.handlers (topic, url, enabled) VALUES
	('st.a', 'http://127.0.0.1:9/a', false),
	('st.handler.disabled', 'http://127.0.0.1:9/d', false),
	('st.handler.enabled', 'http://127.0.0.1:9/e', true);

-- the age is now() minus created_at of the oldest due pending message:
-- the delayed one (older) and the older non-pending ones do not count
SELECT topic, pending, processing, dead, delivered,
	oldest_pending_age IS NULL AS age_null,
	oldest_pending_age >= interval '1 hour' AND oldest_pending_age < interval '2 hours' AS age_about_1h,
	has_handler
FROM grelout.status ORDER BY topic;
-- the counts are bigint, the age an interval, has_handler a boolean
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = 'grelout' AND table_name = 'status' ORDER BY ordinal_position;

-- the age follows the messages: once the 1-hour-old one is gone, the
-- 10-minute-old one is the oldest
DELETE FROM grelout.outbox WHERE payload->>'label' = 'due, created 1 hour ago';
SELECT oldest_pending_age >= interval '10 minutes'
	AND oldest_pending_age < interval '1 hour' AS age_about_10min
FROM grelout.status WHERE topic = 'st.a';
-- and a delayed message becomes the oldest once it is due
UPDATE grelout.outbox SET available_at = now() - interval '1 second'
WHERE payload->>'label' = 'delayed, created 5 hours ago';
SELECT oldest_pending_age >= interval '5 hours'
	AND oldest_pending_age < interval '6 hours' AS age_about_5h
FROM grelout.status WHERE topic = 'st.a';

-- enabling and disabling a handler shows in has_handler
UPDATE grelout.handlers SET enabled = true WHERE topic = 'st.handler.disabled';
UPDATE grelout.handlers SET enabled = false WHERE topic = 'st.handler.enabled';
SELECT topic, has_handler FROM grelout.status WHERE topic LIKE 'st.handler.%' ORDER BY topic;
-- a topic disappears from the view with its last message and handler
DELETE FROM grelout.handlers WHERE topic LIKE 'st.handler.%';
DELETE FROM grelout.outbox WHERE topic = 'st.dead';
SELECT topic FROM grelout.status ORDER BY topic;

-- handlers_masked: the handler without secret or header values
INSERT INTO grelout.handlers (topic, url, headers, secret, previous_secret, timeout, max_attempts, enabled)
VALUES ('st.masked', 'https://hooks.example.com/in',
	'{"Authorization": "Bearer top-secret-token", "X-Api-Key": "another-secret-value"}',
	'whsec_' || replace(encode(convert_to(repeat('s', 32), 'UTF8'), 'base64'), E'\n', ''),
	'whsec_' || replace(encode(convert_to(repeat('p', 24), 'UTF8'), 'base64'), E'\n', ''),
	'3 seconds', 4, false);
SELECT * FROM grelout.handlers_masked WHERE topic = 'st.masked';
SELECT * FROM grelout.handlers_masked WHERE topic = 'st.a';
-- no column carries a secret or a header value
SELECT column_name FROM information_schema.columns
WHERE table_schema = 'grelout' AND table_name = 'handlers_masked' ORDER BY ordinal_position;
SELECT count(*) AS rows_leaking
FROM grelout.handlers_masked m
WHERE row_to_json(m)::text LIKE '%top-secret-token%'
	OR row_to_json(m)::text LIKE '%another-secret-value%'
	OR row_to_json(m)::text LIKE '%whsec_%'
	OR row_to_json(m)::text LIKE '%' || replace(encode(convert_to(repeat('s', 32), 'UTF8'), 'base64'), E'\n', '') || '%';

TRUNCATE grelout.outbox, grelout.handlers;
