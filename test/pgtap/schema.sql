-- test/pgtap/schema.sql: the objects of grelout's public contract: the
-- tables with their columns, types, NOT NULLs, defaults and constraints,
-- the claim and dedup indexes, the views, the functions with their
-- signatures, and that PUBLIC is granted nothing.  Runs in one transaction
-- that is rolled back.
BEGIN;
SELECT plan(179);

-- pg_temp.plan_of(query): the EXPLAIN (COSTS OFF) text of a query
CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	line text;
	result text := '';
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
		result := result || line || E'\n';
	END LOOP;
	RETURN result;
END $$;

-- the extension and its schemas
SELECT has_extension('grelout', 'extension grelout is installed');
SELECT has_schema('grelout', 'schema grelout exists');
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'grelout'), false,
	'the extension is not relocatable');
SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'grelout'), '1.1',
	'the installed version is 1.1');
SELECT tables_are('grelout', ARRAY['outbox', 'handlers'], 'schema grelout has the tables outbox and handlers');
SELECT views_are('grelout', ARRAY['status', 'handlers_masked', 'relays'],
	'schema grelout has the views status, handlers_masked and relays');
SELECT sequences_are('grelout', ARRAY[]::name[], 'schema grelout has no sequence');

-- grelout.outbox: columns, types, NOT NULL, defaults
SELECT has_table('grelout', 'outbox', 'grelout.outbox exists');
SELECT has_column('grelout', 'outbox', c, 'grelout.outbox has column ' || c)
FROM unnest(ARRAY['id', 'topic', 'key', 'payload', 'headers', 'dedup_key', 'attempts',
	'available_at', 'state', 'last_error', 'delivered_at', 'dead_at', 'created_at',
	'published_by']) AS c;
SELECT col_type_is('grelout', 'outbox', c, t, format('grelout.outbox.%s is %s', c, t))
FROM (VALUES ('id', 'uuid'), ('topic', 'text'), ('key', 'text'), ('payload', 'jsonb'),
	('headers', 'jsonb'), ('dedup_key', 'text'), ('attempts', 'integer'),
	('available_at', 'timestamp with time zone'), ('state', 'text'), ('last_error', 'text'),
	('delivered_at', 'timestamp with time zone'), ('dead_at', 'timestamp with time zone'),
	('created_at', 'timestamp with time zone'), ('published_by', 'oid')) AS v(c, t);
SELECT col_not_null('grelout', 'outbox', c, format('grelout.outbox.%s is NOT NULL', c))
FROM unnest(ARRAY['id', 'topic', 'payload', 'headers', 'attempts', 'available_at',
	'state', 'created_at']) AS c;
SELECT col_is_null('grelout', 'outbox', c, format('grelout.outbox.%s is nullable', c))
FROM unnest(ARRAY['key', 'dedup_key', 'last_error', 'delivered_at', 'dead_at',
	'published_by']) AS c;
SELECT col_is_pk('grelout', 'outbox', 'id', 'grelout.outbox.id is the primary key');
SELECT col_default_is('grelout', 'outbox', 'headers', '{}'::jsonb, 'outbox.headers defaults to {}');
SELECT col_default_is('grelout', 'outbox', 'attempts', 0, 'outbox.attempts defaults to 0');
SELECT col_default_is('grelout', 'outbox', 'state', 'pending'::text, 'outbox.state defaults to pending');
SELECT col_default_is('grelout', 'outbox', 'available_at', 'now()', 'outbox.available_at defaults to now()');
SELECT col_default_is('grelout', 'outbox', 'created_at', 'now()', 'outbox.created_at defaults to now()');
SELECT col_hasnt_default('grelout', 'outbox', 'id', 'outbox.id has no default: ids are made in C');

-- the CHECK on state: the four states and nothing else
SELECT col_has_check('grelout', 'outbox', 'state', 'grelout.outbox.state has a CHECK constraint');
SELECT lives_ok(format($$INSERT INTO grelout.outbox (id, topic, payload, state)
	VALUES ('00000000-0000-7000-8000-00000000000%s', 'pgtap.check', '{}', %L)$$, n, s),
	format('state %s is accepted', s))
FROM (VALUES (1, 'pending'), (2, 'processing'), (3, 'delivered'), (4, 'dead')) AS v(n, s);
SELECT throws_ok(format($$INSERT INTO grelout.outbox (id, topic, payload, state)
	VALUES (gen_random_uuid(), 'pgtap.check', '{}', %L)$$, s), '23514', NULL,
	format('state %s is refused by the CHECK', coalesce(s, 'NULL')))
FROM unnest(ARRAY['Pending', 'failed', 'done', '']) AS s;
SELECT throws_ok($$UPDATE grelout.outbox SET state = 'bogus' WHERE topic = 'pgtap.check'$$,
	'23514', NULL, 'an UPDATE to an unknown state is refused');
SELECT throws_ok($$INSERT INTO grelout.outbox (id, topic, payload, state)
	VALUES (gen_random_uuid(), 'pgtap.check', '{}', NULL)$$, '23502', NULL,
	'a NULL state is refused');
SELECT throws_ok($$INSERT INTO grelout.outbox (id, topic, payload, attempts)
	VALUES (gen_random_uuid(), 'pgtap.check', '{}', -1)$$, '23514', NULL,
	'negative attempts are refused');

-- the partial index that serves the claim: due order, live states only
SELECT has_index('grelout', 'outbox', 'outbox_claim_idx', ARRAY['available_at', 'id'],
	'outbox_claim_idx is on (available_at, id)');
SELECT isnt((SELECT indisunique FROM pg_index WHERE indexrelid = 'grelout.outbox_claim_idx'::regclass),
	true, 'outbox_claim_idx is not unique');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
	WHERE indexrelid = 'grelout.outbox_claim_idx'::regclass),
	$$(state = ANY (ARRAY['pending'::text, 'processing'::text]))$$,
	'outbox_claim_idx is partial: pending and processing only');
SET LOCAL enable_seqscan = off;
SELECT matches(pg_temp.plan_of($$SELECT id FROM grelout.outbox
	WHERE state IN ('pending', 'processing') AND available_at <= now()
	ORDER BY available_at, id LIMIT 100 FOR UPDATE SKIP LOCKED$$),
	'outbox_claim_idx', 'a claim-shaped query uses outbox_claim_idx');
RESET enable_seqscan;

-- the partial unique index for dedup_key, per publishing role, across topics
SELECT has_index('grelout', 'outbox', 'outbox_dedup_key_idx', ARRAY['published_by', 'dedup_key'],
	'outbox_dedup_key_idx is on (published_by, dedup_key)');
SELECT is((SELECT indnullsnotdistinct FROM pg_index
	WHERE indexrelid = 'grelout.outbox_dedup_key_idx'::regclass),
	true, 'outbox_dedup_key_idx is NULLS NOT DISTINCT: keys stored under 1.0 stay unique');
SELECT index_is_unique('grelout', 'outbox', 'outbox_dedup_key_idx', 'outbox_dedup_key_idx is unique');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
	WHERE indexrelid = 'grelout.outbox_dedup_key_idx'::regclass),
	'(dedup_key IS NOT NULL)', 'outbox_dedup_key_idx is partial: only rows with a dedup_key');
SELECT lives_ok($$INSERT INTO grelout.outbox (id, topic, payload, dedup_key, published_by)
	VALUES (gen_random_uuid(), 'pgtap.dedup.a', '{}', 'pgtap-key', 10)$$, 'a row with a dedup_key');
SELECT throws_ok($$INSERT INTO grelout.outbox (id, topic, payload, dedup_key, published_by)
	VALUES (gen_random_uuid(), 'pgtap.dedup.b', '{}', 'pgtap-key', 10)$$, '23505', NULL,
	'the same dedup_key of the same role in another topic violates the unique index');
SELECT lives_ok($$INSERT INTO grelout.outbox (id, topic, payload, dedup_key, published_by)
	VALUES (gen_random_uuid(), 'pgtap.dedup.a', '{}', 'pgtap-key', 11)$$,
	'the same dedup_key of another role is fine');
SELECT lives_ok($$INSERT INTO grelout.outbox (id, topic, payload, dedup_key)
	VALUES (gen_random_uuid(), 'pgtap.dedup.a', '{}', 'pgtap-key')$$,
	'the same dedup_key without a publisher is fine once');
SELECT throws_ok($$INSERT INTO grelout.outbox (id, topic, payload, dedup_key)
	VALUES (gen_random_uuid(), 'pgtap.dedup.b', '{}', 'pgtap-key')$$, '23505', NULL,
	'twice without a publisher violates the unique index');
SELECT lives_ok($$INSERT INTO grelout.outbox (id, topic, payload)
	SELECT gen_random_uuid(), 'pgtap.dedup.a', '{}' FROM generate_series(1, 3)$$,
	'many rows without a dedup_key are fine');

-- grelout.handlers
SELECT has_table('grelout', 'handlers', 'grelout.handlers exists');
SELECT col_type_is('grelout', 'handlers', c, t, format('grelout.handlers.%s is %s', c, t))
FROM (VALUES ('topic', 'text'), ('url', 'text'), ('headers', 'jsonb'), ('secret', 'text'),
	('previous_secret', 'text'), ('timeout', 'interval'), ('max_attempts', 'integer'),
	('enabled', 'boolean')) AS v(c, t);
SELECT col_is_pk('grelout', 'handlers', 'topic', 'grelout.handlers.topic is the primary key');
SELECT col_not_null('grelout', 'handlers', c, format('grelout.handlers.%s is NOT NULL', c))
FROM unnest(ARRAY['topic', 'url', 'headers', 'enabled']) AS c;
SELECT col_is_null('grelout', 'handlers', c, format('grelout.handlers.%s is nullable', c))
FROM unnest(ARRAY['secret', 'previous_secret', 'timeout', 'max_attempts']) AS c;
SELECT col_default_is('grelout', 'handlers', 'headers', '{}'::jsonb, 'handlers.headers defaults to {}');
SELECT col_default_is('grelout', 'handlers', 'enabled', true, 'handlers.enabled defaults to true');
SELECT has_trigger('grelout', 'handlers', 'handlers_validate', 'handlers are validated by a trigger');
SELECT is((SELECT tgtype & 2 = 2 AND tgtype & 1 = 1 AND tgtype & 4 = 4 AND tgtype & 16 = 16
	FROM pg_trigger WHERE tgname = 'handlers_validate' AND tgrelid = 'grelout.handlers'::regclass),
	true, 'the trigger is BEFORE INSERT OR UPDATE, FOR EACH ROW');
SELECT throws_ok($$INSERT INTO grelout.handlers (topic, url) VALUES ('pgtap.h', 'ftp://example.com/')$$,
	'22023', NULL, 'the trigger refuses an ftp:// URL');

-- pg_dump keeps the handlers and every message not yet delivered
SELECT is((SELECT array_agg(c::regclass::text ORDER BY c::regclass::text)
	FROM pg_extension, unnest(extconfig) AS c WHERE extname = 'grelout'),
	ARRAY['grelout.handlers', 'grelout.outbox'], 'both tables are configuration tables of the extension');
SELECT is((SELECT cond FROM pg_extension, unnest(extconfig, extcondition) AS u(c, cond)
	WHERE extname = 'grelout' AND c = 'grelout.outbox'::regclass),
	$$WHERE state <> 'delivered'$$, 'outbox rows are dumped unless delivered');
SELECT is((SELECT cond FROM pg_extension, unnest(extconfig, extcondition) AS u(c, cond)
	WHERE extname = 'grelout' AND c = 'grelout.handlers'::regclass),
	'', 'every handler is dumped');

-- the views
SELECT has_view('grelout', v, 'view grelout.' || v || ' exists')
FROM unnest(ARRAY['status', 'handlers_masked', 'relays']) AS v;
SELECT col_type_is('grelout', 'status', c, t, format('grelout.status.%s is %s', c, t))
FROM (VALUES ('topic', 'text'), ('pending', 'bigint'), ('processing', 'bigint'),
	('dead', 'bigint'), ('delivered', 'bigint'), ('oldest_pending_age', 'interval'),
	('has_handler', 'boolean')) AS v(c, t);
SELECT hasnt_column('grelout', 'handlers_masked', c, 'handlers_masked has no column ' || c)
FROM unnest(ARRAY['secret', 'previous_secret', 'headers']) AS c;
SELECT has_column('grelout', 'handlers_masked', c, 'handlers_masked has column ' || c)
FROM unnest(ARRAY['topic', 'url', 'enabled']) AS c;
SELECT has_column('grelout', 'relays', c, 'grelout.relays has column ' || c)
FROM unnest(ARRAY['relay', 'pid', 'activity', 'in_flight', 'delivered', 'retried',
	'dead_lettered', 'last_error', 'last_error_at', 'started_at']) AS c;

-- the functions, in the extension's schema (public here)
SELECT has_function('public', 'outbox_publish',
	ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text'],
	'outbox_publish(text, jsonb, text, jsonb, interval, text) exists');
SELECT function_returns('public', 'outbox_publish',
	ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text'], 'uuid',
	'outbox_publish returns uuid');
SELECT is(pg_get_function_arguments('public.outbox_publish(text, jsonb, text, jsonb, interval, text)'::regprocedure),
	'topic text, payload jsonb, key text DEFAULT NULL::text, headers jsonb DEFAULT NULL::jsonb, delay interval DEFAULT NULL::interval, dedup_key text DEFAULT NULL::text',
	'outbox_publish has the named arguments and defaults of the contract');
SELECT has_function('public', 'outbox_redrive', ARRAY['text'], 'outbox_redrive(text) exists');
SELECT function_returns('public', 'outbox_redrive', ARRAY['text'], 'bigint', 'outbox_redrive returns bigint');
SELECT is(pg_get_function_arguments('public.outbox_redrive(text)'::regprocedure),
	'topic text DEFAULT NULL::text', 'outbox_redrive(topic DEFAULT NULL)');
SELECT has_function('public', 'outbox_purge', ARRAY['interval', 'text', 'boolean'],
	'outbox_purge(interval, text, boolean) exists');
SELECT hasnt_function('public', 'outbox_purge', ARRAY['interval'],
	'the 1.0 signature outbox_purge(interval) is gone');
SELECT function_returns('public', 'outbox_purge', ARRAY['interval', 'text', 'boolean'], 'bigint',
	'outbox_purge returns bigint');
SELECT is(pg_get_function_arguments('public.outbox_purge(interval, text, boolean)'::regprocedure),
	'older_than interval DEFAULT NULL::interval, topic text DEFAULT NULL::text, pending boolean DEFAULT false',
	'outbox_purge(older_than DEFAULT NULL, topic DEFAULT NULL, pending DEFAULT false)');
SELECT has_function('public', 'outbox_message_status', ARRAY['uuid'], 'outbox_message_status(uuid) exists');
SELECT is(pg_get_function_result('public.outbox_message_status(uuid)'::regprocedure),
	'TABLE(state text, attempts integer, last_error text, available_at timestamp with time zone, created_at timestamp with time zone, topic text, handler text)',
	'outbox_message_status returns the table of the contract');
SELECT function_lang_is('public', f, a, 'c', f || ' is written in C')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_redrive', ARRAY['text']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean']::name[]),
	('outbox_message_status', ARRAY['uuid']::name[])) AS v(f, a);
SELECT is_definer('public', f, a, f || ' is SECURITY DEFINER')
FROM (VALUES ('outbox_redrive', ARRAY['text']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean']::name[])) AS v(f, a);
SELECT isnt_definer('public', f, a, f || ' is SECURITY INVOKER: current_user is the publisher')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_message_status', ARRAY['uuid']::name[])) AS v(f, a);
SELECT volatility_is('public', f, a, 'volatile', f || ' is VOLATILE')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_redrive', ARRAY['text']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean']::name[])) AS v(f, a);
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = (f || a)::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], f || ' pins search_path to pg_catalog, pg_temp')
FROM (VALUES ('outbox_publish', '(text, jsonb, text, jsonb, interval, text)'),
	('outbox_redrive', '(text)'), ('outbox_purge', '(interval, text, boolean)'),
	('outbox_message_status', '(uuid)')) AS v(f, a);
SELECT isnt_strict('public', 'outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text'],
	'outbox_publish is not STRICT: a NULL topic or payload gets an error, not a NULL id');
SELECT functions_are('grelout',
	ARRAY['_assert_preloaded', '_handlers_validate', '_mask_url', 'relay_stats'],
	'schema grelout has the functions _assert_preloaded, _handlers_validate, _mask_url and relay_stats');
SELECT is(grelout._mask_url('https://alice:S3cr3t@host/in?token=abc'), 'https://***@host/in?token=***',
	'_mask_url masks userinfo and query values');

-- PUBLIC is granted nothing
SELECT function_privs_are('public', f, a, 'public', ARRAY[]::text[], f || ': no EXECUTE for PUBLIC')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_redrive', ARRAY['text']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean']::name[]),
	('outbox_message_status', ARRAY['uuid']::name[])) AS v(f, a);
SELECT function_privs_are('grelout', '_mask_url', ARRAY['text']::name[], 'public', ARRAY['EXECUTE'],
	'grelout._mask_url: EXECUTE for PUBLIC, who may read handlers_masked must call it (it reads nothing)');
SELECT function_privs_are('grelout', f, ARRAY[]::name[], 'public', ARRAY[]::text[],
	'grelout.' || f || ': no EXECUTE for PUBLIC')
FROM unnest(ARRAY['_assert_preloaded', '_handlers_validate', 'relay_stats']::name[]) AS f;
SELECT schema_privs_are('grelout', 'public', ARRAY[]::text[], 'schema grelout: nothing for PUBLIC');
SELECT table_privs_are('grelout', t, 'public', ARRAY[]::text[], 'grelout.' || t || ': nothing for PUBLIC')
FROM unnest(ARRAY['outbox', 'handlers', 'status', 'handlers_masked', 'relays']::name[]) AS t;

SELECT * FROM finish();
ROLLBACK;
