-- signing_keys: asymmetric signatures (Standard Webhooks "v1a", ed25519).
-- grelout.new_signing_key() makes whsk_ keys (32 random bytes: unique, of
-- the documented form); a handler's secret and previous_secret take them
-- (the 32-byte seed, or the 64 bytes of seed and public key when the
-- public half is the seed's), and refuse malformed ones without quoting
-- them; grelout.handler_public_key(name) derives the whpk_ public key
-- (RFC 8032's test vector 1 here), NULL for a handler without a signing
-- key, an error for no such handler; neither function is PUBLIC's.
-- Every handler here is disabled and no message is published.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS grelout;
RESET client_min_messages;
\set VERBOSITY terse
TRUNCATE grelout.outbox, grelout.handlers;

CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	detail text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' (' || nullif(detail, '') || ')', '');
END $$;

-- pg_temp.whsk(hex): "whsk_" + base64 of the bytes
CREATE FUNCTION pg_temp.whsk(hex text) RETURNS text LANGUAGE sql AS $$
	SELECT 'whsk_' || replace(encode(decode(hex, 'hex'), 'base64'), E'\n', '')
$$;
-- RFC 8032 section 7.1, TEST 1: the seed and its public key
CREATE TEMP TABLE rfc (seed text, pub text);
INSERT INTO rfc VALUES ('9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60',
	'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a');

-- the functions: signatures, language, security, volatility, privileges
SELECT p.oid::regprocedure AS function, p.prorettype::regtype AS returns,
	p.prosecdef AS security_definer, p.provolatile, p.proisstrict, p.proconfig,
	has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p
WHERE p.pronamespace = 'grelout'::regnamespace
	AND p.proname IN ('new_signing_key', 'handler_public_key')
ORDER BY 1::text;

-- new_signing_key: "whsk_" + base64 of 32 bytes, each one new
SELECT grelout.new_signing_key() ~ '^whsk_[A-Za-z0-9+/]{43}=$' AS key_form,
	length(decode(substr(grelout.new_signing_key(), 6), 'base64')) AS seed_bytes;
SELECT count(DISTINCT k) AS distinct_keys, count(*) AS keys
FROM (SELECT grelout.new_signing_key() AS k FROM generate_series(1, 1000)) AS g;
-- no key repeats a byte pattern: the seeds are random, not a counter
SELECT count(DISTINCT substr(k, 6, 8)) AS distinct_prefixes
FROM (SELECT grelout.new_signing_key() AS k FROM generate_series(1, 100)) AS g;

-- a handler takes a new key, as secret and as previous_secret, alone or
-- with a whsec_ secret (a rotation between the two kinds)
SELECT pg_temp.try(format($$INSERT INTO grelout.handlers (name, topic, url, secret, enabled)
	VALUES ('sk.new', 'sk.new', 'http://127.0.0.1:9/', %L, false)$$,
	grelout.new_signing_key())) AS new_key;
SELECT pg_temp.try(format($$INSERT INTO grelout.handlers (name, topic, url, secret, previous_secret, enabled)
	VALUES ('sk.mixed', 'sk.mixed', 'http://127.0.0.1:9/', %L, %L, false)$$,
	grelout.new_signing_key(), 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')) AS whsk_then_whsec;
SELECT pg_temp.try(format($$UPDATE grelout.handlers SET secret = %L, previous_secret = secret
	WHERE name = 'sk.mixed'$$, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')) AS whsec_then_whsk;

-- the public key of RFC 8032's seed, in both key forms
SELECT pg_temp.try(format($$INSERT INTO grelout.handlers (name, topic, url, secret, enabled)
	VALUES ('sk.rfc', 'sk.rfc', 'http://127.0.0.1:9/', %L, false)$$,
	pg_temp.whsk(seed))) AS rfc_seed FROM rfc;
SELECT grelout.handler_public_key('sk.rfc') AS public_key,
	grelout.handler_public_key('sk.rfc') = 'whpk_' || encode(decode(pub, 'hex'), 'base64') AS is_rfc_public_key
FROM rfc;
SELECT pg_temp.try(format($$INSERT INTO grelout.handlers (name, topic, url, secret, enabled)
	VALUES ('sk.rfc64', 'sk.rfc64', 'http://127.0.0.1:9/', %L, false)$$,
	pg_temp.whsk(seed || pub))) AS rfc_seed_and_public FROM rfc;
SELECT grelout.handler_public_key('sk.rfc64') = grelout.handler_public_key('sk.rfc') AS same_public_key;
-- a new key's public key: whpk_ + base64 of 32 bytes
SELECT grelout.handler_public_key('sk.new') ~ '^whpk_[A-Za-z0-9+/]{43}=$' AS public_form,
	length(decode(substr(grelout.handler_public_key('sk.new'), 6), 'base64')) AS public_bytes;
-- only the current secret counts: a whsec_ secret with a whsk_ previous one
SELECT grelout.handler_public_key('sk.mixed') IS NULL AS hmac_current_gives_null;

-- no signing key: NULL; no such handler: an error; NULL name: NULL (strict)
INSERT INTO grelout.handlers (name, topic, url, secret, enabled)
VALUES ('sk.hmac', 'sk.hmac', 'http://127.0.0.1:9/', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false),
	('sk.none', 'sk.none', 'http://127.0.0.1:9/', NULL, false);
SELECT grelout.handler_public_key('sk.hmac') IS NULL AS hmac_null,
	grelout.handler_public_key('sk.none') IS NULL AS none_null,
	grelout.handler_public_key(NULL) IS NULL AS null_name_null;
SELECT pg_temp.try($$SELECT grelout.handler_public_key('sk.missing')$$) AS missing_handler;

-- malformed keys are refused (22023) with the reason, never quoting the key
SELECT label, pg_temp.try(format($$UPDATE grelout.handlers SET secret = %L WHERE name = 'sk.rfc'$$, key)) AS result
FROM rfc, LATERAL (VALUES
	('31 bytes', pg_temp.whsk(substr(seed, 3))),
	('33 bytes', pg_temp.whsk(seed || '00')),
	('48 bytes', pg_temp.whsk(seed || substr(pub, 1, 32))),
	('65 bytes', pg_temp.whsk(seed || pub || '00')),
	('empty', 'whsk_'),
	('not base64', 'whsk_' || repeat('*', 43) || '='),
	('trailing newline', pg_temp.whsk(seed) || E'\n'),
	('another public half', pg_temp.whsk(seed || overlay(pub placing 'ff' from 63 for 2))),
	('the seed twice', pg_temp.whsk(seed || seed)),
	('upper-case prefix', 'WHSK_' || substr(pg_temp.whsk(seed), 6)),
	('no underscore', 'whsk' || substr(pg_temp.whsk(seed), 6))) AS v(label, key)
ORDER BY label;
SELECT pg_temp.try(format($$UPDATE grelout.handlers SET previous_secret = %L WHERE name = 'sk.rfc'$$,
	pg_temp.whsk(seed || overlay(pub placing 'ff' from 63 for 2)))) AS previous_mismatch FROM rfc;
-- the refusals quote no part of the key
SELECT bool_or(strpos(r, substr(pg_temp.whsk(seed || '00'), 6, 16)) > 0) AS key_echoed
FROM rfc, LATERAL (SELECT pg_temp.try(format($$UPDATE grelout.handlers SET secret = %L WHERE name = 'sk.rfc'$$,
	pg_temp.whsk(seed || '00'))) AS r
	UNION ALL
	SELECT pg_temp.try(format($$SELECT grelout.set_secret('sk.rfc', %L)$$, pg_temp.whsk(seed || '00')))) AS t;
SELECT handler_public_key = 'whpk_' || encode(decode(pub, 'hex'), 'base64') AS refused_updates_changed_nothing
FROM rfc, grelout.handler_public_key('sk.rfc');

-- set_secret takes signing keys too, and refuses malformed ones the same way
SELECT grelout.set_secret('sk.none', pg_temp.whsk(seed)) FROM rfc;
SELECT grelout.handler_public_key('sk.none') = grelout.handler_public_key('sk.rfc') AS set_secret_whsk;
SELECT pg_temp.try(format($$SELECT grelout.set_secret('sk.none', %L, previous => true)$$,
	pg_temp.whsk(seed || seed))) AS set_secret_mismatch FROM rfc;

-- handlers_masked says there is a secret, never which
SELECT name, has_secret, has_previous_secret FROM grelout.handlers_masked
WHERE name LIKE 'sk.%' ORDER BY name;
SELECT count(*) AS keys_shown FROM grelout.handlers_masked AS m
WHERE m::text LIKE '%whsk_%' OR m::text LIKE '%whsec_%';

DELETE FROM grelout.handlers WHERE name LIKE 'sk.%';
