-- fanout: the SQL side of fan-out.  Handler triggers (a new or changed
-- handler makes the waiting messages it matches routable again; a deleted
-- handler's unfinished deliveries go, its messages finished or unrouted
-- again), grelout.deliveries, grelout.status with patterns,
-- handlers_masked, outbox_message_status per delivery, outbox_redrive by
-- topic, handler and message, outbox_purge with fan-out rows.  Messages
-- are put in each route and state directly, in the transaction that
-- publishes them, and every handler is disabled, so no relay routes or
-- claims anything here; what would make a message routable is checked
-- before a ROLLBACK.
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

-- pg_temp.msg(label, topic, route, handler, state[, payload]): a message so
-- routed and in that state, as a relay would have left it
CREATE FUNCTION pg_temp.msg(label text, t text, r text, h text, s text,
	p jsonb DEFAULT '{}') RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
	new_id uuid := outbox_publish(t, p || jsonb_build_object('label', label));
BEGIN
	UPDATE grelout.outbox o SET route = r, handler = h, state = s,
		attempts = CASE s WHEN 'pending' THEN 0 ELSE 3 END,
		last_error = CASE s WHEN 'dead' THEN 'HTTP 500' END,
		dead_at = CASE s WHEN 'dead' THEN now() END,
		delivered_at = CASE s WHEN 'delivered' THEN now() END
	WHERE o.id = new_id;
	RETURN new_id;
END $$;

-- pg_temp.fan(label, handler, state): a fan-out row of message "label"
CREATE FUNCTION pg_temp.fan(label text, h text, s text) RETURNS void
LANGUAGE sql AS $$
	INSERT INTO grelout.fanout (message_id, handler, state, attempts,
		available_at, last_error, delivered_at, dead_at, created_at)
	SELECT o.id, h, s, CASE s WHEN 'pending' THEN 0 ELSE 2 END, o.available_at,
		CASE s WHEN 'dead' THEN 'HTTP 410' END,
		CASE s WHEN 'delivered' THEN now() END,
		CASE s WHEN 'dead' THEN now() END, o.created_at
	FROM grelout.outbox o WHERE o.payload->>'label' = label
$$;

-- pg_temp.show(): every message, its route and its deliveries
CREATE FUNCTION pg_temp.show() RETURNS TABLE (label text, route text,
	handler text, state text, deliveries text)
LANGUAGE sql AS $$
	SELECT o.payload->>'label', o.route, o.handler, o.state,
		(SELECT string_agg(f.handler || ':' || f.state, ' ' ORDER BY f.handler)
		 FROM grelout.fanout f WHERE f.message_id = o.id)
	FROM grelout.outbox o ORDER BY 1
$$;

INSERT INTO grelout.handlers (name, topic, url, enabled) VALUES
	('billing', 'orders.*', 'http://127.0.0.1:9/billing', false),
	('email', 'orders.created', 'http://127.0.0.1:9/email', false),
	('audit', '#', 'http://127.0.0.1:9/audit', false);

BEGIN;
SELECT pg_temp.msg('m1', 'orders.created', 'fanout', NULL, 'pending') IS NOT NULL AS m1;
SELECT pg_temp.fan('m1', 'billing', 'pending'), pg_temp.fan('m1', 'email', 'pending'),
	pg_temp.fan('m1', 'audit', 'delivered');
SELECT pg_temp.msg('m2', 'orders.paid', 'single', 'billing', 'pending') IS NOT NULL AS m2;
SELECT pg_temp.msg('m3', 'invoices.sent', 'waiting', NULL, 'pending') IS NOT NULL AS m3;
SELECT pg_temp.msg('m4', 'orders.created', 'fanout', NULL, 'pending') IS NOT NULL AS m4;
SELECT pg_temp.fan('m4', 'billing', 'processing'), pg_temp.fan('m4', 'email', 'dead');
SELECT pg_temp.msg('m5', 'orders.created', 'fanout', NULL, 'pending') IS NOT NULL AS m5;
SELECT pg_temp.fan('m5', 'billing', 'pending'), pg_temp.fan('m5', 'email', 'delivered'),
	pg_temp.fan('m5', 'audit', 'dead');
SELECT pg_temp.msg('m6', 'shipments.sent', 'waiting', NULL, 'pending', '{"region": "eu"}') IS NOT NULL AS m6;
SELECT pg_temp.msg('m7', 'shipments.sent', 'waiting', NULL, 'pending', '{"region": "us"}') IS NOT NULL AS m7;
SELECT pg_temp.msg('m8', 'orders.refunded', 'single', 'billing', 'dead') IS NOT NULL AS m8;
SELECT pg_temp.msg('m9', 'orders.created', 'fanout', NULL, 'pending') IS NOT NULL AS m9;
SELECT pg_temp.fan('m9', 'billing', 'pending'), pg_temp.fan('m9', 'email', 'delivered');
SELECT pg_temp.msg('m10', 'orders.created', 'fanout', NULL, 'dead') IS NOT NULL AS m10;
SELECT pg_temp.fan('m10', 'billing', 'delivered'), pg_temp.fan('m10', 'email', 'dead');
SELECT pg_temp.msg('m11', 'legacy.topic', 'single', 'legacy.topic', 'dead') IS NOT NULL AS m11;
COMMIT;
SELECT * FROM pg_temp.show();

-- grelout.deliveries: the inline deliveries and the fan-out rows, not the
-- messages waiting for a handler
SELECT o.payload->>'label' AS label, d.handler, d.topic, d.state, d.attempts,
	d.last_error, d.created_at = o.created_at AS created_with_message
FROM grelout.deliveries d JOIN grelout.outbox o ON o.id = d.message_id
ORDER BY 1, 2;

-- a new handler: the waiting messages its pattern and filter match become
-- routable again; routed messages are not touched
BEGIN;
INSERT INTO grelout.handlers (name, topic, url, enabled, filter)
	VALUES ('ship-eu', 'shipments.*', 'http://127.0.0.1:9/ship', false, '{"region": "eu"}');
SELECT label, route FROM pg_temp.show() WHERE label IN ('m3', 'm6', 'm7', 'm2', 'm1');
ROLLBACK;
-- a pattern that matches nothing waiting changes nothing
BEGIN;
INSERT INTO grelout.handlers (name, topic, url, enabled)
	VALUES ('nothing', 'nothing.#', 'http://127.0.0.1:9/n', false);
SELECT count(*) AS made_routable FROM grelout.outbox WHERE route = 'new';
ROLLBACK;
-- a changed topic, or filter, does the same; other changes do not
BEGIN;
UPDATE grelout.handlers SET enabled = true, url = 'http://127.0.0.1:9/e2' WHERE name = 'email';
SELECT count(*) AS made_routable FROM grelout.outbox WHERE route = 'new';
UPDATE grelout.handlers SET topic = 'invoices.#' WHERE name = 'email';
SELECT label, route FROM pg_temp.show() WHERE route IN ('new', 'waiting');
ROLLBACK;
BEGIN;
INSERT INTO grelout.handlers (name, topic, url, enabled, filter)
	VALUES ('ship-none', 'shipments.sent', 'http://127.0.0.1:9/s', false, '{"region": "jp"}');
SELECT count(*) AS made_routable FROM grelout.outbox WHERE route = 'new';
UPDATE grelout.handlers SET filter = '{"region": "us"}' WHERE name = 'ship-none';
SELECT label, route FROM pg_temp.show() WHERE route IN ('new', 'waiting');
ROLLBACK;

-- a deleted handler: its inline pending delivery is unrouted again (m2);
-- its fan-out rows go: m1 keeps its other pending delivery; m4 has no
-- delivered one, so it is unrouted again with its rows gone; m5 and m9
-- were delivered by another handler and are finished: m5 dead (audit went
-- dead), m9 delivered and, as keep_delivered is off, deleted with its
-- rows.  Finished deliveries of the handler (m8, m10) stay.
BEGIN;
DELETE FROM grelout.handlers WHERE name = 'billing';
SELECT * FROM pg_temp.show();
SELECT label, attempts, lease, dead_at IS NULL AS no_dead_at, last_error
FROM (SELECT o.payload->>'label' AS label, o.* FROM grelout.outbox o) AS o
WHERE label IN ('m2', 'm4') ORDER BY label;
-- and inserted again: the unrouted messages wait for the router, which
-- routes them to it again (DELETE then INSERT loses nothing)
INSERT INTO grelout.handlers (name, topic, url, enabled)
	VALUES ('billing', 'orders.*', 'http://127.0.0.1:9/billing', false);
SELECT label, route FROM pg_temp.show() WHERE route IN ('new', 'waiting');
ROLLBACK;
-- TRUNCATE deletes every handler, as DELETE does: every unfinished
-- delivery goes; m1 and m9 were delivered by one handler and are finished
-- (and deleted, keep_delivered is off), m5 too but dead, m2 and m4 are
-- unrouted again
BEGIN;
TRUNCATE grelout.handlers;
SELECT * FROM pg_temp.show();
ROLLBACK;
-- deleting a handler with no delivery changes nothing
BEGIN;
INSERT INTO grelout.handlers (name, topic, url, enabled)
	VALUES ('idle', 'idle.#', 'http://127.0.0.1:9/i', false);
DELETE FROM grelout.handlers WHERE name = 'idle';
SELECT count(*) AS unrouted FROM grelout.outbox WHERE route = 'new';
ROLLBACK;

-- grelout.status: has_handler is an enabled handler whose pattern matches
SELECT topic, pending, dead, delivered, has_handler FROM grelout.status ORDER BY topic;
BEGIN;
UPDATE grelout.handlers SET enabled = true WHERE name = 'email';
SELECT topic, has_handler FROM grelout.status
WHERE topic IN ('orders.created', 'orders.paid') ORDER BY topic;
UPDATE grelout.handlers SET enabled = true WHERE name = 'audit';
SELECT topic, has_handler FROM grelout.status ORDER BY topic;
ROLLBACK;

-- grelout.handlers_masked: the 1.1 columns
SELECT name, topic, url, filter, max_in_flight, max_per_second, ordered, on_dead
FROM grelout.handlers_masked ORDER BY name;

-- outbox_message_status: one row a delivery; a waiting message, one row
-- without a handler
SELECT o.payload->>'label' AS label, s.handler, s.state, s.attempts, s.last_error, s.topic
FROM grelout.outbox o, outbox_message_status(o.id) AS s
WHERE o.payload->>'label' IN ('m1', 'm2', 'm3', 'm10')
ORDER BY 1, 2;

-- outbox_redrive: by handler, the dead deliveries of that handler only,
-- inline or fan-out; a fan-out message with a redriven delivery reads
-- pending again
BEGIN;
SELECT outbox_redrive(handler => 'email') AS redriven_email;
SELECT * FROM pg_temp.show() WHERE label IN ('m4', 'm5', 'm10', 'm8');
SELECT f.handler, f.attempts, f.available_at = now() AS due_now, f.dead_at IS NULL AS no_dead_at,
	f.lease IS NULL AS no_lease
FROM grelout.fanout f JOIN grelout.outbox o ON o.id = f.message_id
WHERE o.payload->>'label' = 'm10' ORDER BY 1;
ROLLBACK;
-- by message: every dead delivery of it
BEGIN;
SELECT outbox_redrive(message_id => (SELECT id FROM grelout.outbox WHERE payload->>'label' = 'm5')) AS redriven_m5;
SELECT * FROM pg_temp.show() WHERE label = 'm5';
ROLLBACK;
-- by topic and handler together: both must match
BEGIN;
SELECT outbox_redrive('orders.refunded', 'email') AS none,
	outbox_redrive('orders.refunded', 'billing') AS m8;
SELECT * FROM pg_temp.show() WHERE label = 'm8';
ROLLBACK;
-- all: an inline delivery whose handler does not exist is unrouted again
-- (m11, as a message dead-lettered under 1.0 whose handler is gone)
BEGIN;
SELECT outbox_redrive() AS redriven_all;
SELECT * FROM pg_temp.show();
ROLLBACK;
-- a dead fan-out delivery of a deleted handler stays dead
BEGIN;
DELETE FROM grelout.handlers WHERE name = 'email';
SELECT outbox_redrive(handler => 'email') AS redriven_deleted;
ROLLBACK;
SELECT outbox_redrive(handler => 'nobody') AS unknown_handler,
	outbox_redrive(message_id => '00000000-0000-0000-0000-000000000000') AS unknown_message;

-- outbox_purge: finished messages go with their fan-out rows; unfinished
-- ones stay, whatever their rows' states
BEGIN;
SELECT outbox_purge() AS purged;
SELECT * FROM pg_temp.show();
SELECT count(*) AS orphan_rows FROM grelout.fanout f
WHERE NOT EXISTS (SELECT 1 FROM grelout.outbox o WHERE o.id = f.message_id);
ROLLBACK;
-- pending => true: a topic's unfinished messages too, with their rows
BEGIN;
SELECT outbox_purge(topic => 'orders.created', pending => true) AS purged;
SELECT * FROM pg_temp.show();
SELECT count(*) AS fanout_rows FROM grelout.fanout;
ROLLBACK;

-- a role with rights on grelout.handlers only: the triggers run as the
-- extension's owner
CREATE ROLE regress_grelout_admin;
GRANT USAGE ON SCHEMA grelout TO regress_grelout_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON grelout.handlers TO regress_grelout_admin;
BEGIN;
SET LOCAL ROLE regress_grelout_admin;
INSERT INTO grelout.handlers (name, topic, url, enabled)
	VALUES ('invoices', 'invoices.#', 'http://127.0.0.1:9/i', false);
DELETE FROM grelout.handlers WHERE name = 'billing';
SELECT pg_temp.try($$SELECT count(*) FROM grelout.outbox$$) AS admin_reads_outbox;
RESET ROLE;
SELECT label, route FROM pg_temp.show() WHERE route IN ('new', 'waiting');
ROLLBACK;
REVOKE ALL ON grelout.handlers FROM regress_grelout_admin;
REVOKE ALL ON SCHEMA grelout FROM regress_grelout_admin;
DROP ROLE regress_grelout_admin;

TRUNCATE grelout.outbox, grelout.fanout, grelout.handlers;
