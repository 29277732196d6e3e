-- publisher_isolation: several roles publish into one outbox (issue 15).
-- Each role's dedup_key is its own: another role's identical key stores a
-- new message and learns nothing; outbox_message_status shows a role its
-- own messages only; control characters, credential header names, empty
-- header values, reserved topics and bypassing delays are refused; errors
-- quoting input never cut a multibyte character; outbox_purge can remove
-- the undelivered messages of a topic; handlers_masked masks URL secrets.
-- The topics have no handler (or a disabled one), so rows stay pending.
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

CREATE ROLE regress_grelout_app;
CREATE ROLE regress_grelout_app2;
GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid) TO regress_grelout_app, regress_grelout_app2;

-- published_by is current_user at the call, shown as regrole
SET ROLE regress_grelout_app;
SELECT outbox_publish('iso.plain', '{}') AS plain \gset
RESET ROLE;
SELECT published_by::regrole AS published_by FROM grelout.outbox WHERE id = :'plain';
SELECT outbox_publish('iso.plain', '{}') AS by_superuser \gset
SELECT published_by::regrole::text = current_user AS published_by_current_user
FROM grelout.outbox WHERE id = :'by_superuser';

-- issue 15, 1: a decoy with the same key, delayed ten years, published
-- first by one role does not swallow another role's message
SET ROLE regress_grelout_app;
SELECT outbox_publish('iso.invoice', '{"decoy": true}', delay => '10 years',
	dedup_key => 'invoice-44') AS decoy \gset
SET ROLE regress_grelout_app2;
SELECT outbox_publish('iso.invoice', '{"invoice": 44}', dedup_key => 'invoice-44') AS invoice \gset
SELECT outbox_publish('iso.invoice', '{"invoice": 44, "again": true}', dedup_key => 'invoice-44') AS invoice_again \gset
SET ROLE regress_grelout_app;
SELECT outbox_publish('iso.invoice', '{"decoy": "again"}', dedup_key => 'invoice-44') AS decoy_again \gset
RESET ROLE;
SELECT :'decoy'::uuid <> :'invoice'::uuid AS two_messages,
	:'invoice'::uuid = :'invoice_again'::uuid AS app2_dedups_its_own,
	:'decoy'::uuid = :'decoy_again'::uuid AS app_dedups_its_own,
	:'invoice'::uuid > :'decoy'::uuid AS app2_got_a_fresh_id;
SELECT published_by::regrole AS published_by, payload, available_at > now() + '9 years' AS delayed
FROM grelout.outbox WHERE dedup_key = 'invoice-44' ORDER BY id;

-- the same key in a transaction of each role, both open at once: neither
-- waits for the other (see also test/specs/dedup_roles.spec)
BEGIN;
SET LOCAL ROLE regress_grelout_app;
SELECT outbox_publish('iso.tx', '{}', dedup_key => 'tx-1') AS tx_app \gset
SET LOCAL ROLE regress_grelout_app2;
SELECT outbox_publish('iso.tx', '{}', dedup_key => 'tx-1') AS tx_app2 \gset
COMMIT;
SELECT :'tx_app'::uuid <> :'tx_app2'::uuid AS one_message_each;

-- a key stored before the upgrade to 1.1 (no published_by) matches any
-- role's publish of it, as it did under 1.0
INSERT INTO grelout.outbox (id, topic, payload, dedup_key)
VALUES ('00000000-0000-7000-8000-000000000001', 'iso.legacy', '{}', 'legacy-1');
SET ROLE regress_grelout_app;
SELECT outbox_publish('iso.legacy', '{}', dedup_key => 'legacy-1') AS legacy_app;
SET ROLE regress_grelout_app2;
SELECT outbox_publish('iso.legacy', '{}', dedup_key => 'legacy-1') AS legacy_app2;
RESET ROLE;
SELECT count(*) AS legacy_rows FROM grelout.outbox WHERE topic = 'iso.legacy';

-- outbox_message_status: a role's own message, one row a handler; no row
-- for another role's message nor for an unknown id; the publisher still
-- cannot read grelout.outbox
INSERT INTO grelout.handlers (topic, url, enabled) VALUES ('iso.invoice', 'http://127.0.0.1:9/', false);
-- routed to it, as a relay does at first sight (the handler is disabled:
-- nothing is sent)
UPDATE grelout.outbox SET route = 'single', handler = 'iso.invoice' WHERE topic = 'iso.invoice';
SET ROLE regress_grelout_app2;
SELECT state, attempts, last_error, available_at <= now() AS due, created_at <= now() AS created,
	topic, handler
FROM outbox_message_status(:'invoice');
SELECT count(*) AS rows_for_other_role FROM outbox_message_status(:'decoy');
SELECT count(*) AS rows_for_unknown FROM outbox_message_status('00000000-0000-7000-8000-0000000000ff');
SELECT count(*) AS rows_for_legacy FROM outbox_message_status('00000000-0000-7000-8000-000000000001');
SELECT pg_temp.try($$SELECT count(*) FROM grelout.outbox$$) AS select_outbox;
SET ROLE regress_grelout_app;
SELECT state, available_at > now() + '9 years' AS delayed, topic, handler
FROM outbox_message_status(:'decoy');
SELECT state, topic, handler FROM outbox_message_status(:'plain');
SELECT count(*) AS rows_for_other_role FROM outbox_message_status(:'invoice');
RESET ROLE;
-- outbox_publish runs its insert as the owner of grelout.outbox (a
-- trigger sees it), records the caller, and gives the caller's identity
-- back also when the insert fails
CREATE FUNCTION public.regress_outbox_probe() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.topic = 'iso.probe' THEN
		RAISE EXCEPTION 'probe: insert as owner %, published_by %',
			current_user = (SELECT relowner::regrole::name FROM pg_class
							WHERE oid = 'grelout.outbox'::regclass),
			NEW.published_by::regrole;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER regress_probe BEFORE INSERT ON grelout.outbox
	FOR EACH ROW EXECUTE FUNCTION public.regress_outbox_probe();
SET ROLE regress_grelout_app;
SELECT pg_temp.try($$SELECT outbox_publish('iso.probe', '{}')$$) AS probe;
SELECT current_user AS after_error, pg_temp.try($$SELECT 1 FROM grelout.outbox$$) AS still_no_access;
RESET ROLE;
DROP TRIGGER regress_probe ON grelout.outbox;
DROP FUNCTION public.regress_outbox_probe();

-- control characters: every control but HTAB in header values (message
-- and handler), C0 and C1 in topics and keys (U+0085 is C2 85 in UTF-8)
SELECT v AS value, pg_temp.try(format($$SELECT outbox_publish('iso.ctl', '{}', headers => %L)$$,
	jsonb_build_object('x-a', v))) AS result
FROM unnest(ARRAY[E'a\x01b', E'a\x0bb', E'a\x0cb', 'a' || chr(127) || 'b', E'a\x1fb', 'a' || chr(133) || 'b']) AS v;
SELECT pg_temp.try($$SELECT outbox_publish('iso.ctl', '{}', headers => '{"x-a": "a\tb é"}')$$) AS value_htab_ok;
SELECT pg_temp.try($$SELECT outbox_publish('iso.ctl' || chr(133), '{}')$$) AS topic_c1;
SELECT pg_temp.try($$SELECT outbox_publish('iso.ctl' || chr(159), '{}')$$) AS topic_c1_last;
SELECT pg_temp.try($$SELECT outbox_publish('iso.nbsp' || chr(160), '{}')$$) AS topic_nbsp_ok;
SELECT pg_temp.try($$SELECT outbox_publish('iso.ctl', '{}', key => 'k' || chr(133))$$) AS key_c1;
SELECT pg_temp.try($$SELECT outbox_publish('iso.ctl', '{}', key => E'k\tx')$$) AS key_tab;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url) VALUES ('iso.h' || chr(133), 'http://127.0.0.1:9/')$$) AS handler_topic_c1;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url, headers) VALUES ('iso.h', 'http://127.0.0.1:9/', '{"x-a": "a\u000bb"}')$$) AS handler_value_vt;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url, headers) VALUES ('iso.h', 'http://127.0.0.1:9/', E'{"x-a": "a\x7fb"}')$$) AS handler_value_del;

-- message headers never replace or remove the handler's: credentials are
-- reserved for handlers, empty values refused
SELECT name, pg_temp.try(format($$SELECT outbox_publish('iso.hdr', '{}', headers => %L)$$,
	jsonb_build_object(name, 'Bearer attacker'))) AS result
FROM unnest(ARRAY['authorization', 'Authorization', 'PROXY-AUTHORIZATION', 'Cookie']) AS name;
SELECT pg_temp.try($$SELECT outbox_publish('iso.hdr', '{}', headers => '{"Accept": ""}')$$) AS empty_value;
SELECT pg_temp.try($$SELECT outbox_publish('iso.hdr', '{}', headers => '{"X-HTTP-Method-Override": "PUT", "Set-Cookie": "a=b"}')$$) AS other_names_ok;
SELECT pg_temp.try($$INSERT INTO grelout.handlers (topic, url, headers, enabled)
	VALUES ('iso.hdr', 'http://127.0.0.1:9/', '{"Authorization": "Bearer h", "Cookie": "s=1", "Proxy-Authorization": "Basic x"}', false)$$) AS handler_credentials_ok;

-- topics whose first segment is "grelout" are grelout's own, in any
-- letter case, the bare "grelout" too (1.2, issue 29; 1.1 took these two)
SELECT pg_temp.try($$SELECT outbox_publish('grelout.handler.disabled', '{}')$$) AS reserved_topic;
SELECT pg_temp.try($$SELECT outbox_publish('grelout.', '{}')$$) AS reserved_prefix;
SELECT pg_temp.try($$SELECT outbox_publish('grelout', '{}')$$) AS grelout_alone_reserved;
SELECT pg_temp.try($$SELECT outbox_publish('Grelout.x', '{}')$$) AS other_case_reserved;

-- delays and timeouts are converted once, overflow-checked (issue 9, 8;
-- issue 15, 4): a month counts 30 days, a year 365.25, as extract(epoch)
SELECT pg_temp.try($$SELECT outbox_publish('iso.delay', '{}', delay => '-80000 months 2400000 days')$$) AS delay_months_days;
SELECT pg_temp.try($$SELECT outbox_publish('iso.delay', '{}', delay => '1000000 years')$$) AS delay_million_years;
SELECT pg_temp.try($$SELECT outbox_publish('iso.delay', '{}', delay => '-1 year 366 days')$$) AS delay_year_366_days_ok;
SELECT t AS timeout, pg_temp.try(format($$INSERT INTO grelout.handlers (topic, url, timeout)
	VALUES ('iso.timeout', 'http://127.0.0.1:9/', %L)$$, t)) AS result
FROM unnest(ARRAY['-1 year 360 days 1 second', '593000 years', '7115004 months', '1 hour 1 second', '1 hour']) AS t;

-- an error quoting a long header name cuts it at a character boundary: a
-- LATIN1 client gets the real error, not an encoding error
SET client_encoding = 'LATIN1';
SELECT outbox_publish('iso.latin1', '{}', headers => jsonb_build_object(repeat('x', 63) || repeat(U&'\00E9', 10), 'v'));
RESET client_encoding;
SELECT pg_temp.try(format($$SELECT outbox_publish('iso.latin1', '{}', headers => %L)$$,
	jsonb_build_object(repeat('x', 63) || repeat(U&'\00E9', 10), 'v'))) ~ ('"' || repeat('x', 63) || '"') AS cut_before_the_character;

-- none of the refused calls stored anything
SELECT topic, count(*) FROM grelout.outbox WHERE topic LIKE 'iso.%' GROUP BY topic ORDER BY topic;

-- outbox_purge: pending messages only with pending => true, and only of
-- the topic named; delivered and dead of any topic as in 1.0
SELECT outbox_publish('iso.nohandler', '{}') IS NOT NULL AS staged FROM generate_series(1, 3);
UPDATE grelout.outbox SET state = 'dead', dead_at = now() - interval '2 days' WHERE topic = 'iso.plain';
SELECT outbox_purge(topic => 'iso.nohandler') AS purge_topic_without_pending;
-- one message by its id: pending only with pending => true
SELECT outbox_purge(message_id => (SELECT id FROM grelout.outbox WHERE topic = 'iso.nohandler' ORDER BY id LIMIT 1))
	AS purge_pending_id_without_pending;
SELECT outbox_purge(message_id => (SELECT id FROM grelout.outbox WHERE topic = 'iso.nohandler' ORDER BY id LIMIT 1),
	pending => true) AS purge_one_pending_by_id;
SELECT pg_temp.try($$SELECT outbox_purge(pending => true)$$) AS pending_without_topic;
SELECT outbox_purge('1 hour', 'iso.nohandler', true) AS pending_older_than_an_hour;
SELECT outbox_purge(topic => 'iso.nohandler', pending => true) AS pending_purged;
SELECT outbox_purge('1 day', 'iso.invoice') AS other_topic_dead;
SELECT outbox_purge('1 day') AS dead_older_than_a_day;
SELECT outbox_purge('30 days') AS one_argument_still_unambiguous;
SELECT topic, state, count(*) FROM grelout.outbox WHERE topic IN ('iso.nohandler', 'iso.plain', 'iso.invoice')
GROUP BY topic, state ORDER BY topic, state;

-- handlers_masked: no URL credentials, query values or fragment
DELETE FROM grelout.handlers;
INSERT INTO grelout.handlers (topic, url, enabled) VALUES
	('iso.m1', 'https://alice:S3cr3t@hooks.example.com/in?token=abc', false),
	('iso.m2', 'http://hooks.example.com:8080/a/b?x=1&sig=zz#frag', false),
	('iso.m3', 'https://hooks.example.com/plain', false);
SELECT topic, url FROM grelout.handlers_masked ORDER BY topic;
SELECT count(*) AS secrets_shown FROM grelout.handlers_masked
WHERE url ~ '(alice|S3cr3t|abc|zz|frag)';

RESET ROLE;
TRUNCATE grelout.outbox, grelout.handlers;
REVOKE ALL ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid) FROM regress_grelout_app, regress_grelout_app2;
DROP ROLE regress_grelout_app, regress_grelout_app2;
