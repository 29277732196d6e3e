-- handler_auth: the endpoint authentication columns of a handler (1.2),
-- checked when the row is written.  oauth is an object of string members,
-- token_url, client_id and client_secret required, scope and audience
-- optional, nothing else; token_url an http(s) URL; no member empty or
-- with a control character.  tls_ca and tls_client_cert take PEM
-- certificates only, tls_client_cert and tls_client_key go together (the
-- checks of real certificates and keys, which need a CA, are in
-- test/unit/test_tls_pem.c and test/t/142_mtls.pl).  No error quotes a
-- value.  handlers_masked shows the token URL masked and the client id,
-- never the client secret.  Every handler here is disabled.
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

-- pg_temp.oauth(json): insert a disabled handler with that oauth value
CREATE FUNCTION pg_temp.oauth(value text) RETURNS text LANGUAGE sql AS $$
	SELECT pg_temp.try(format(
		'INSERT INTO grelout.handlers (name, topic, url, enabled, oauth) VALUES (%L, %L, %L, false, %L)',
		'ha.' || md5(value), 'ha.t', 'https://api.example.com/hook', value))
$$;

-- accepted
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_id": "app", "client_secret": "s3cret-value-1"}');
SELECT pg_temp.oauth('{"token_url": "http://127.0.0.1:8080/token", "client_id": "app", "client_secret": "s", "scope": "events:write read", "audience": "https://api.example.com/"}');

-- refused
SELECT pg_temp.oauth('[]');
SELECT pg_temp.oauth('"https://auth.example.com/token"');
SELECT pg_temp.oauth('{"client_id": "app", "client_secret": "s3cret-value-2"}');
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_secret": "s3cret-value-3"}');
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_id": "app"}');
SELECT pg_temp.oauth('{"token_url": "ftp://auth.example.com/token", "client_id": "app", "client_secret": "s3cret-value-4"}');
SELECT pg_temp.oauth('{"token_url": "https://", "client_id": "app", "client_secret": "s3cret-value-5"}');
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_id": "app", "client_secret": 42}');
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_id": "", "client_secret": "s3cret-value-6"}');
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_id": "app", "client_secret": "s3cret\nvalue-7"}');
SELECT pg_temp.oauth('{"token_url": "https://auth.example.com/token", "client_id": "app", "client_secret": "s3cret-value-8", "scopes": "x"}');
SELECT pg_temp.oauth(format('{"token_url": "https://auth.example.com/token", "client_id": "app", "client_secret": "%s"}', repeat('x', 4097)));

-- the Authorization header is the token's
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, enabled, headers, oauth)
	VALUES ('ha.hdr', 'ha.t', 'https://api.example.com/hook', false, '{"AUTHORIZATION": "Basic eDp5"}',
	'{"token_url": "https://auth.example.com/token", "client_id": "app", "client_secret": "s3cret-value-9"}')$$);

-- TLS columns that hold no certificate, or a certificate without its key
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, enabled, tls_ca)
	VALUES ('ha.ca', 'ha.t', 'https://api.example.com/hook', false, 'not a certificate')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, enabled, tls_ca)
	VALUES ('ha.ca', 'ha.t', 'https://api.example.com/hook', false,
	E'-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, enabled, tls_client_key)
	VALUES ('ha.key', 'ha.t', 'https://api.example.com/hook', false, 'key-material-value')$$);
SELECT pg_temp.try($$INSERT INTO grelout.handlers (name, topic, url, enabled, tls_client_cert, tls_client_key)
	VALUES ('ha.key', 'ha.t', 'https://api.example.com/hook', false, 'cert', 'key-material-value')$$);

-- an UPDATE is checked as an INSERT is
SELECT pg_temp.try($$UPDATE grelout.handlers SET oauth = oauth - 'client_secret'
	WHERE oauth ->> 'client_secret' = 's3cret-value-1'$$);

-- what an operator sees
INSERT INTO grelout.handlers (name, topic, url, enabled, oauth) VALUES ('ha.masked', 'ha.t',
	'https://api.example.com/hook', false,
	'{"token_url": "https://svc:url-password@auth.example.com/oauth/token?tenant=t1", "client_id": "grelout-app", "client_secret": "oauth-client-secret-value"}');
SELECT name, has_tls_client_cert, has_tls_ca, oauth_token_url, oauth_client_id
FROM grelout.handlers_masked WHERE name = 'ha.masked';
SELECT count(*) AS rows_leaking
FROM grelout.handlers_masked m
WHERE row_to_json(m)::text LIKE '%secret-value%'
	OR row_to_json(m)::text LIKE '%url-password%';
SELECT count(*) AS handlers FROM grelout.handlers;

TRUNCATE grelout.outbox, grelout.handlers;
