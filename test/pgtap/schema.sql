-- test/pgtap/schema.sql: the objects of grelout's public contract: the
-- tables with their columns, types, NOT NULLs, defaults and constraints,
-- the claim, routing and dedup indexes, the handlers' triggers, the views, the functions with their
-- signatures, and that PUBLIC is granted nothing.  Runs in one transaction
-- that is rolled back.
BEGIN;
SELECT plan(394);

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
SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'grelout'), '1.2',
	'the installed version is 1.2');
SELECT tables_are('grelout', ARRAY['outbox', 'handlers', 'fanout', 'handler_health', 'attempts'],
	'schema grelout has the tables outbox, handlers, fanout, handler_health and attempts');
SELECT views_are('grelout', ARRAY['status', 'handlers_masked', 'relays', 'deliveries',
	'handler_status'],
	'schema grelout has the views status, handlers_masked, relays, deliveries and handler_status');
SELECT sequences_are('grelout', ARRAY['route_seq'],
	'schema grelout has one sequence, route_seq (per-key ordering)');

-- grelout.outbox: columns, types, NOT NULL, defaults
SELECT has_table('grelout', 'outbox', 'grelout.outbox exists');
SELECT has_column('grelout', 'outbox', c, 'grelout.outbox has column ' || c)
FROM unnest(ARRAY['id', 'topic', 'key', 'payload', 'headers', 'dedup_key', 'attempts',
	'available_at', 'state', 'last_error', 'delivered_at', 'dead_at', 'created_at',
	'published_by', 'route', 'handler', 'last_status', 'last_duration_ms', 'seq']) AS c;
SELECT col_type_is('grelout', 'outbox', c, t, format('grelout.outbox.%s is %s', c, t))
FROM (VALUES ('id', 'uuid'), ('topic', 'text'), ('key', 'text'), ('payload', 'jsonb'),
	('headers', 'jsonb'), ('dedup_key', 'text'), ('attempts', 'integer'),
	('available_at', 'timestamp with time zone'), ('state', 'text'), ('last_error', 'text'),
	('delivered_at', 'timestamp with time zone'), ('dead_at', 'timestamp with time zone'),
	('created_at', 'timestamp with time zone'), ('published_by', 'regrole'), ('route', 'text'),
	('handler', 'text'), ('last_status', 'integer'), ('last_duration_ms', 'integer'),
	('seq', 'bigint')) AS v(c, t);
SELECT col_not_null('grelout', 'outbox', c, format('grelout.outbox.%s is NOT NULL', c))
FROM unnest(ARRAY['id', 'topic', 'payload', 'headers', 'attempts', 'available_at',
	'state', 'created_at', 'route']) AS c;
SELECT col_is_null('grelout', 'outbox', c, format('grelout.outbox.%s is nullable', c))
FROM unnest(ARRAY['key', 'dedup_key', 'last_error', 'delivered_at', 'dead_at',
	'published_by', 'handler', 'last_status', 'last_duration_ms', 'seq']) AS c;
SELECT col_is_pk('grelout', 'outbox', 'id', 'grelout.outbox.id is the primary key');
SELECT col_default_is('grelout', 'outbox', 'headers', '{}'::jsonb, 'outbox.headers defaults to {}');
SELECT col_default_is('grelout', 'outbox', 'attempts', 0, 'outbox.attempts defaults to 0');
SELECT col_default_is('grelout', 'outbox', 'state', 'pending'::text, 'outbox.state defaults to pending');
SELECT col_default_is('grelout', 'outbox', 'available_at', 'now()', 'outbox.available_at defaults to now()');
SELECT col_default_is('grelout', 'outbox', 'created_at', 'now()', 'outbox.created_at defaults to now()');
SELECT col_hasnt_default('grelout', 'outbox', 'id', 'outbox.id has no default: ids are made in C');
SELECT col_default_is('grelout', 'outbox', 'route', 'new'::text, 'outbox.route defaults to new: not yet routed');

-- the CHECK on route: new, waiting, single, fanout
SELECT col_has_check('grelout', 'outbox', 'route', 'grelout.outbox.route has a CHECK constraint');
SELECT lives_ok(format($$INSERT INTO grelout.outbox (id, topic, payload, route)
	VALUES ('00000000-0000-7000-8000-00000000010%s', 'pgtap.route', '{}', %L)$$, n, r),
	format('route %s is accepted', r))
FROM (VALUES (1, 'new'), (2, 'waiting'), (3, 'single'), (4, 'fanout')) AS v(n, r);
SELECT throws_ok($$INSERT INTO grelout.outbox (id, topic, payload, route)
	VALUES (gen_random_uuid(), 'pgtap.route', '{}', 'multi')$$, '23514', NULL,
	'an unknown route is refused by the CHECK');

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
SELECT has_index('grelout', 'outbox', 'outbox_claim_idx', ARRAY['handler', 'available_at', 'id'],
	'outbox_claim_idx is on (handler, available_at, id)');
SELECT isnt((SELECT indisunique FROM pg_index WHERE indexrelid = 'grelout.outbox_claim_idx'::regclass),
	true, 'outbox_claim_idx is not unique');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
	WHERE indexrelid = 'grelout.outbox_claim_idx'::regclass),
	$$((route = 'single'::text) AND (state = ANY (ARRAY['pending'::text, 'processing'::text])))$$,
	'outbox_claim_idx is partial: inline deliveries, pending and processing only');
SET LOCAL enable_seqscan = off;
SELECT matches(pg_temp.plan_of($$SELECT id FROM grelout.outbox
	WHERE handler = 'h' AND route = 'single' AND state IN ('pending', 'processing')
	AND available_at <= now()
	ORDER BY available_at, id LIMIT 100 FOR UPDATE SKIP LOCKED$$),
	'outbox_claim_idx', 'a claim-shaped query uses outbox_claim_idx');
RESET enable_seqscan;

-- the router's and the handler triggers' partial indexes
SELECT has_index('grelout', 'outbox', 'outbox_route_idx', ARRAY['id'],
	'outbox_route_idx is on (id)');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
	WHERE indexrelid = 'grelout.outbox_route_idx'::regclass),
	$$(route = 'new'::text)$$, 'outbox_route_idx is partial: messages not yet routed');
SELECT has_index('grelout', 'outbox', 'outbox_waiting_idx', ARRAY['topic'],
	'outbox_waiting_idx is on (topic)');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
	WHERE indexrelid = 'grelout.outbox_waiting_idx'::regclass),
	$$(route = 'waiting'::text)$$, 'outbox_waiting_idx is partial: messages waiting for a handler');

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
	('enabled', 'boolean'), ('name', 'text'), ('filter', 'jsonb'), ('max_in_flight', 'integer'),
	('max_per_second', 'integer'), ('ordered', 'boolean'), ('on_dead', 'text')) AS v(c, t);
SELECT col_is_pk('grelout', 'handlers', 'name', 'grelout.handlers.name is the primary key');
SELECT is((SELECT conname::text FROM pg_constraint
	WHERE conrelid = 'grelout.handlers'::regclass AND contype = 'p'),
	'handlers_pkey', 'the primary key is handlers_pkey');
SELECT col_not_null('grelout', 'handlers', c, format('grelout.handlers.%s is NOT NULL', c))
FROM unnest(ARRAY['topic', 'url', 'headers', 'enabled', 'name', 'ordered', 'on_dead']) AS c;
SELECT col_is_null('grelout', 'handlers', c, format('grelout.handlers.%s is nullable', c))
FROM unnest(ARRAY['secret', 'previous_secret', 'timeout', 'max_attempts', 'filter',
	'max_in_flight', 'max_per_second']) AS c;
SELECT col_default_is('grelout', 'handlers', 'headers', '{}'::jsonb, 'handlers.headers defaults to {}');
SELECT col_default_is('grelout', 'handlers', 'enabled', true, 'handlers.enabled defaults to true');
SELECT col_default_is('grelout', 'handlers', 'ordered', false, 'handlers.ordered defaults to false');
SELECT col_default_is('grelout', 'handlers', 'on_dead', 'block'::text, 'handlers.on_dead defaults to block');
SELECT col_hasnt_default('grelout', 'handlers', 'name', 'handlers.name has no default: the trigger sets the topic');
SELECT has_trigger('grelout', 'handlers', 'handlers_validate', 'handlers are validated by a trigger');
SELECT is((SELECT tgtype & 2 = 2 AND tgtype & 1 = 1 AND tgtype & 4 = 4 AND tgtype & 16 = 16
	FROM pg_trigger WHERE tgname = 'handlers_validate' AND tgrelid = 'grelout.handlers'::regclass),
	true, 'the trigger is BEFORE INSERT OR UPDATE, FOR EACH ROW');
SELECT throws_ok($$INSERT INTO grelout.handlers (topic, url) VALUES ('pgtap.h', 'ftp://example.com/')$$,
	'22023', NULL, 'the trigger refuses an ftp:// URL');
SELECT lives_ok($$INSERT INTO grelout.handlers (topic, url, enabled) VALUES ('pgtap.h', 'http://127.0.0.1:9/', false)$$,
	'a handler without a name');
SELECT is((SELECT name FROM grelout.handlers WHERE topic = 'pgtap.h'), 'pgtap.h',
	'a handler without a name is named by its topic');
SELECT throws_ok($$UPDATE grelout.handlers SET name = 'pgtap.renamed' WHERE name = 'pgtap.h'$$,
	'22023', NULL, 'a rename is refused');
SELECT throws_ok($$INSERT INTO grelout.handlers (name, topic, url) VALUES ('pgtap.p', 'a.b*', 'http://x/')$$,
	'22023', NULL, 'a wildcard inside a segment is refused');
SELECT trigger_is('grelout', 'handlers', t, 'grelout', f, format('%s runs grelout.%s', t, f))
FROM (VALUES ('handlers_reroute_insert', '_handlers_reroute'),
	('handlers_reroute_update', '_handlers_reroute'),
	('handlers_forget', '_handlers_forget'),
	('handlers_forget_all', '_handlers_forget'),
	('handlers_health', '_handlers_health')) AS v(t, f);
SELECT is((SELECT array_agg(tgname::text || ':' ||
		CASE WHEN tgtype & 2 = 2 THEN 'before' ELSE 'after' END || ':' ||
		CASE WHEN tgtype & 1 = 1 THEN 'row' ELSE 'statement' END || ':' ||
		concat_ws(',', CASE WHEN tgtype & 4 = 4 THEN 'insert' END,
			CASE WHEN tgtype & 8 = 8 THEN 'delete' END,
			CASE WHEN tgtype & 16 = 16 THEN 'update' END,
			CASE WHEN tgtype & 32 = 32 THEN 'truncate' END) ORDER BY tgname)
	FROM pg_trigger WHERE tgrelid = 'grelout.handlers'::regclass AND NOT tgisinternal),
	ARRAY['handlers_forget:after:row:delete', 'handlers_forget_all:after:statement:truncate',
		'handlers_health:after:row:delete,update',
		'handlers_reroute_insert:after:row:insert',
		'handlers_reroute_update:after:row:update', 'handlers_validate:before:row:insert,update'],
	'the triggers of grelout.handlers: validate before, re-route and forget after (TRUNCATE too)');
SELECT is((SELECT array_agg(a.attname::text ORDER BY a.attname)
	FROM pg_trigger t JOIN pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr)
	WHERE t.tgname = 'handlers_reroute_update' AND t.tgrelid = 'grelout.handlers'::regclass),
	ARRAY['filter', 'topic'], 'handlers_reroute_update fires on UPDATE OF topic, filter');

-- grelout.fanout: one row a delivery of a message routed to several handlers
SELECT has_table('grelout', 'fanout', 'grelout.fanout exists');
SELECT col_type_is('grelout', 'fanout', c, t, format('grelout.fanout.%s is %s', c, t))
FROM (VALUES ('message_id', 'uuid'), ('handler', 'text'), ('state', 'text'),
	('attempts', 'integer'), ('available_at', 'timestamp with time zone'), ('lease', 'bigint'),
	('last_error', 'text'), ('last_status', 'integer'), ('last_duration_ms', 'integer'),
	('delivered_at', 'timestamp with time zone'), ('dead_at', 'timestamp with time zone'),
	('created_at', 'timestamp with time zone'), ('key', 'text'), ('seq', 'bigint')) AS v(c, t);
SELECT col_not_null('grelout', 'fanout', c, format('grelout.fanout.%s is NOT NULL', c))
FROM unnest(ARRAY['message_id', 'handler', 'state', 'attempts', 'available_at', 'created_at']) AS c;
SELECT col_is_null('grelout', 'fanout', c, format('grelout.fanout.%s is nullable', c))
FROM unnest(ARRAY['lease', 'last_error', 'last_status', 'last_duration_ms', 'delivered_at',
	'dead_at', 'key', 'seq']) AS c;
SELECT col_is_pk('grelout', 'fanout', ARRAY['message_id', 'handler'],
	'grelout.fanout''s primary key is (message_id, handler)');
SELECT col_default_is('grelout', 'fanout', 'state', 'pending'::text, 'fanout.state defaults to pending');
SELECT col_default_is('grelout', 'fanout', 'attempts', 0, 'fanout.attempts defaults to 0');
SELECT throws_ok($$INSERT INTO grelout.fanout (message_id, handler, state, available_at, created_at)
	VALUES (gen_random_uuid(), 'h', 'sent', now(), now())$$, '23514', NULL,
	'an unknown fan-out state is refused by the CHECK');
SELECT throws_ok($$INSERT INTO grelout.fanout (message_id, handler, attempts, available_at, created_at)
	VALUES (gen_random_uuid(), 'h', -1, now(), now())$$, '23514', NULL,
	'negative fan-out attempts are refused');
SELECT has_index('grelout', 'fanout', 'fanout_claim_idx', ARRAY['handler', 'available_at', 'message_id'],
	'fanout_claim_idx is on (handler, available_at, message_id)');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
	WHERE indexrelid = 'grelout.fanout_claim_idx'::regclass),
	$$(state = ANY (ARRAY['pending'::text, 'processing'::text]))$$,
	'fanout_claim_idx is partial: pending and processing only');
-- per-key ordering: the head test of the claim (1.2, issue 29: per
-- publisher on grelout.outbox)
SELECT has_index('grelout', t, i, c, i || ' is on (' || array_to_string(c, ', ') || ')')
FROM (VALUES ('outbox', 'outbox_publisher_key_idx',
		ARRAY['handler', 'key', 'COALESCE(published_by, ((0)::oid)::regrole)', 'seq']::name[]),
	('outbox', 'outbox_key_processing_idx', ARRAY['handler', 'key']::name[]),
	('fanout', 'fanout_key_idx', ARRAY['handler', 'key', 'seq']::name[]),
	('fanout', 'fanout_key_processing_idx', ARRAY['handler', 'key']::name[])) AS v(t, i, c);
SELECT trigger_is('grelout', 'outbox', 'outbox_truncate_fanout', 'grelout', '_outbox_truncated',
	'TRUNCATE of grelout.outbox empties grelout.fanout too');
SELECT lives_ok($$INSERT INTO grelout.fanout (message_id, handler, available_at, created_at)
	VALUES (gen_random_uuid(), 'pgtap.h', now(), now()); TRUNCATE grelout.outbox$$,
	'TRUNCATE grelout.outbox');
SELECT is((SELECT count(*) FROM grelout.fanout), 0::bigint, '... leaves no fan-out row');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'grelout.fanout'::regclass),
	(SELECT reloptions FROM pg_class WHERE oid = 'grelout.outbox'::regclass),
	'grelout.fanout is vacuumed as grelout.outbox is');

-- pg_dump keeps the handlers and every message not yet delivered
SELECT is((SELECT array_agg(c::regclass::text ORDER BY c::regclass::text)
	FROM pg_extension, unnest(extconfig) AS c WHERE extname = 'grelout'),
	ARRAY['grelout.fanout', 'grelout.handler_health', 'grelout.handlers', 'grelout.outbox',
		'grelout.route_seq'],
	'the three tables are configuration tables of the extension, and route_seq (its value is dumped)');
SELECT is((SELECT cond FROM pg_extension, unnest(extconfig, extcondition) AS u(c, cond)
	WHERE extname = 'grelout' AND c = 'grelout.fanout'::regclass),
	$$WHERE state <> 'delivered'$$, 'fanout rows are dumped unless delivered');
SELECT is((SELECT cond FROM pg_extension, unnest(extconfig, extcondition) AS u(c, cond)
	WHERE extname = 'grelout' AND c = 'grelout.outbox'::regclass),
	$$WHERE state <> 'delivered'$$, 'outbox rows are dumped unless delivered');
SELECT is((SELECT cond FROM pg_extension, unnest(extconfig, extcondition) AS u(c, cond)
	WHERE extname = 'grelout' AND c = 'grelout.handlers'::regclass),
	'', 'every handler is dumped');

-- the views
SELECT has_view('grelout', v, 'view grelout.' || v || ' exists')
FROM unnest(ARRAY['status', 'handlers_masked', 'relays', 'deliveries']) AS v;
SELECT col_type_is('grelout', 'status', c, t, format('grelout.status.%s is %s', c, t))
FROM (VALUES ('topic', 'text'), ('pending', 'bigint'), ('processing', 'bigint'),
	('dead', 'bigint'), ('delivered', 'bigint'), ('oldest_pending_age', 'interval'),
	('has_handler', 'boolean')) AS v(c, t);
SELECT hasnt_column('grelout', 'handlers_masked', c, 'handlers_masked has no column ' || c)
FROM unnest(ARRAY['secret', 'previous_secret', 'headers']) AS c;
SELECT has_column('grelout', 'handlers_masked', c, 'handlers_masked has column ' || c)
FROM unnest(ARRAY['topic', 'url', 'enabled', 'name', 'filter', 'max_in_flight',
	'max_per_second', 'ordered', 'on_dead']) AS c;
SELECT col_type_is('grelout', 'deliveries', c, t, format('grelout.deliveries.%s is %s', c, t))
FROM (VALUES ('message_id', 'uuid'), ('handler', 'text'), ('topic', 'text'), ('state', 'text'),
	('attempts', 'integer'), ('available_at', 'timestamp with time zone'), ('last_error', 'text'),
	('last_status', 'integer'), ('last_duration_ms', 'integer'),
	('delivered_at', 'timestamp with time zone'), ('dead_at', 'timestamp with time zone'),
	('created_at', 'timestamp with time zone'), ('key', 'text'), ('seq', 'bigint'),
	('blocked_by', 'uuid')) AS v(c, t);
SELECT columns_are('grelout', 'deliveries', ARRAY['message_id', 'handler', 'topic', 'state',
	'attempts', 'available_at', 'last_error', 'last_status', 'last_duration_ms', 'delivered_at',
	'dead_at', 'created_at', 'key', 'seq', 'blocked_by'],
	'grelout.deliveries has the columns of the contract, and those of per-key ordering');
SELECT has_column('grelout', 'relays', c, 'grelout.relays has column ' || c)
FROM unnest(ARRAY['relay', 'pid', 'activity', 'in_flight', 'delivered', 'retried',
	'dead_lettered', 'last_error', 'last_error_at', 'started_at', 'database']) AS c;

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
SELECT has_function('public', 'outbox_redrive', ARRAY['text', 'text', 'uuid'],
	'outbox_redrive(text, text, uuid) exists');
SELECT hasnt_function('public', 'outbox_redrive', ARRAY['text'],
	'the 1.0 signature outbox_redrive(text) is gone');
SELECT function_returns('public', 'outbox_redrive', ARRAY['text', 'text', 'uuid'], 'bigint',
	'outbox_redrive returns bigint');
SELECT is(pg_get_function_arguments('public.outbox_redrive(text, text, uuid)'::regprocedure),
	'topic text DEFAULT NULL::text, handler text DEFAULT NULL::text, message_id uuid DEFAULT NULL::uuid',
	'outbox_redrive(topic DEFAULT NULL, handler DEFAULT NULL, message_id DEFAULT NULL)');
SELECT has_function('public', 'outbox_purge', ARRAY['interval', 'text', 'boolean', 'uuid'],
	'outbox_purge(interval, text, boolean, uuid) exists');
SELECT hasnt_function('public', 'outbox_purge', ARRAY['interval'],
	'the 1.0 signature outbox_purge(interval) is gone');
SELECT function_returns('public', 'outbox_purge', ARRAY['interval', 'text', 'boolean', 'uuid'], 'bigint',
	'outbox_purge returns bigint');
SELECT is(pg_get_function_arguments('public.outbox_purge(interval, text, boolean, uuid)'::regprocedure),
	'older_than interval DEFAULT NULL::interval, topic text DEFAULT NULL::text, pending boolean DEFAULT false, message_id uuid DEFAULT NULL::uuid',
	'outbox_purge(older_than DEFAULT NULL, topic DEFAULT NULL, pending DEFAULT false, message_id DEFAULT NULL)');
SELECT has_function('public', 'outbox_message_status', ARRAY['uuid'], 'outbox_message_status(uuid) exists');
SELECT is(pg_get_function_result('public.outbox_message_status(uuid)'::regprocedure),
	'TABLE(state text, attempts integer, last_error text, available_at timestamp with time zone, created_at timestamp with time zone, topic text, handler text)',
	'outbox_message_status returns the table of the contract');
SELECT function_lang_is('public', f, a, 'c', f || ' is written in C')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_redrive', ARRAY['text', 'text', 'uuid']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean', 'uuid']::name[]),
	('outbox_message_status', ARRAY['uuid']::name[])) AS v(f, a);
SELECT is_definer('public', f, a, f || ' is SECURITY DEFINER')
FROM (VALUES ('outbox_redrive', ARRAY['text', 'text', 'uuid']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean', 'uuid']::name[])) AS v(f, a);
SELECT isnt_definer('public', f, a, f || ' is SECURITY INVOKER: current_user is the publisher')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_message_status', ARRAY['uuid']::name[])) AS v(f, a);
SELECT volatility_is('public', f, a, 'volatile', f || ' is VOLATILE')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_redrive', ARRAY['text', 'text', 'uuid']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean', 'uuid']::name[])) AS v(f, a);
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = (f || a)::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], f || ' pins search_path to pg_catalog, pg_temp')
FROM (VALUES ('outbox_publish', '(text, jsonb, text, jsonb, interval, text)'),
	('outbox_redrive', '(text, text, uuid)'), ('outbox_purge', '(interval, text, boolean, uuid)'),
	('outbox_message_status', '(uuid)')) AS v(f, a);
SELECT isnt_strict('public', 'outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text'],
	'outbox_publish is not STRICT: a NULL topic or payload gets an error, not a NULL id');
SELECT functions_are('grelout',
	ARRAY['_assert_preloaded', '_handlers_validate', '_mask_url', 'relay_stats', '_topic_matches',
		'_wake', '_keeps_delivered', '_handlers_reroute', '_handlers_forget', '_outbox_truncated',
		'capture', 'uncapture', '_capture', 'relay_stats_by_database', '_handler_live',
		'_handlers_health', 'set_secret', '_lock_routing', '_finalize_fanout',
		'new_signing_key', 'handler_public_key', 'metrics'],
	'schema grelout has the functions _assert_preloaded, _handlers_validate, _mask_url, relay_stats, _topic_matches, _wake, _keeps_delivered, _handlers_reroute, _handlers_forget, _outbox_truncated, capture, uncapture, _capture, relay_stats_by_database, _handler_live, _handlers_health and (1.2) set_secret, _lock_routing, _finalize_fanout, new_signing_key, handler_public_key, metrics');
-- capture (issue 13): run as the caller (the table's owner is checked as
-- current_user), search_path pinned; the trigger function runs as the writer
SELECT isnt_definer('grelout', f, a, 'grelout.' || f || ' is SECURITY INVOKER')
FROM (VALUES ('capture', ARRAY['regclass', 'text', 'text[]', 'text[]']::name[]),
	('uncapture', ARRAY['regclass']::name[]), ('_capture', ARRAY[]::name[])) AS v(f, a);
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = ('grelout.' || f || a)::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], 'grelout.' || f || ' pins search_path to pg_catalog, pg_temp')
FROM (VALUES ('capture', '(regclass, text, text[], text[])'), ('uncapture', '(regclass)')) AS v(f, a);
SELECT function_returns('grelout', '_capture', ARRAY[]::name[], 'trigger',
	'grelout._capture is a trigger function');
SELECT is(grelout._topic_matches('orders.#', 'orders.created.eu'), true, '_topic_matches: # takes segments');
SELECT is(grelout._topic_matches('#', 'grelout.handler.disabled'), false,
	'_topic_matches: a leading wildcard never matches a grelout. topic');
SELECT volatility_is('grelout', '_topic_matches', ARRAY['text', 'text'], 'immutable',
	'_topic_matches is IMMUTABLE');
SELECT is_strict('grelout', '_topic_matches', ARRAY['text', 'text'], '_topic_matches is STRICT');
SELECT is((SELECT proparallel FROM pg_proc WHERE oid = 'grelout._topic_matches(text, text)'::regprocedure),
	's', '_topic_matches is PARALLEL SAFE');
SELECT is_definer('grelout', f, ARRAY[]::name[], 'grelout.' || f || ' is SECURITY DEFINER')
FROM unnest(ARRAY['_handlers_reroute', '_handlers_forget', '_outbox_truncated']::name[]) AS f;
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = ('grelout.' || f || '()')::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], 'grelout.' || f || ' pins search_path to pg_catalog, pg_temp')
FROM unnest(ARRAY['_handlers_reroute', '_handlers_forget', '_outbox_truncated']) AS f;
SELECT is(grelout._mask_url('https://alice:S3cr3t@host/in?token=abc'), 'https://***@host/in?token=***',
	'_mask_url masks userinfo and query values');

-- PUBLIC is granted nothing
SELECT function_privs_are('public', f, a, 'public', ARRAY[]::text[], f || ': no EXECUTE for PUBLIC')
FROM (VALUES ('outbox_publish', ARRAY['text', 'jsonb', 'text', 'jsonb', 'interval', 'text']::name[]),
	('outbox_redrive', ARRAY['text', 'text', 'uuid']::name[]),
	('outbox_purge', ARRAY['interval', 'text', 'boolean', 'uuid']::name[]),
	('outbox_message_status', ARRAY['uuid']::name[])) AS v(f, a);
SELECT function_privs_are('grelout', '_mask_url', ARRAY['text']::name[], 'public', ARRAY['EXECUTE'],
	'grelout._mask_url: EXECUTE for PUBLIC, who may read handlers_masked must call it (it reads nothing)');
SELECT function_privs_are('grelout', f, ARRAY[]::name[], 'public', ARRAY[]::text[],
	'grelout.' || f || ': no EXECUTE for PUBLIC')
FROM unnest(ARRAY['_assert_preloaded', '_handlers_validate', 'relay_stats', '_wake',
	'_keeps_delivered', '_handlers_reroute', '_handlers_forget', '_outbox_truncated',
	'_capture', 'relay_stats_by_database', '_handler_live', '_handlers_health',
	'_lock_routing']::name[]) AS f;
SELECT function_privs_are('grelout', '_finalize_fanout', ARRAY['uuid[]']::name[], 'public', ARRAY[]::text[],
	'grelout._finalize_fanout: no EXECUTE for PUBLIC');
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = 'grelout._finalize_fanout(uuid[])'::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], 'grelout._finalize_fanout pins search_path to pg_catalog, pg_temp');
SELECT function_privs_are('grelout', f, a, 'public', ARRAY[]::text[],
	'grelout.' || f || ': no EXECUTE for PUBLIC')
FROM (VALUES ('capture', ARRAY['regclass', 'text', 'text[]', 'text[]']::name[]),
	('uncapture', ARRAY['regclass']::name[])) AS v(f, a);
SELECT function_privs_are('grelout', '_topic_matches', ARRAY['text', 'text']::name[], 'public', ARRAY['EXECUTE'],
	'grelout._topic_matches: EXECUTE for PUBLIC, who may read grelout.status must call it (it reads nothing)');
SELECT schema_privs_are('grelout', 'public', ARRAY[]::text[], 'schema grelout: nothing for PUBLIC');
SELECT table_privs_are('grelout', t, 'public', ARRAY[]::text[], 'grelout.' || t || ': nothing for PUBLIC')
FROM unnest(ARRAY['outbox', 'handlers', 'status', 'handlers_masked', 'relays', 'fanout',
	'deliveries', 'handler_health', 'handler_status', 'attempts']::name[]) AS t;

-- issue 33: the attempt log, administrators' only, not dumped
SELECT columns_are('grelout', 'attempts',
	ARRAY['message_id', 'handler', 'attempt', 'started_at', 'duration_ms', 'status',
		'error', 'response_body', 'content_type'],
	'grelout.attempts has the columns of the contract');
SELECT col_type_is('grelout', 'attempts', c, t, 'grelout.attempts.' || c || ' is ' || t)
FROM (VALUES ('message_id', 'uuid'), ('handler', 'text'), ('attempt', 'integer'),
	('started_at', 'timestamp with time zone'), ('duration_ms', 'integer'),
	('status', 'integer'), ('error', 'text'), ('response_body', 'text'),
	('content_type', 'text')) AS v(c, t);
SELECT col_not_null('grelout', 'attempts', c, 'grelout.attempts.' || c || ' is NOT NULL')
FROM unnest(ARRAY['message_id', 'handler', 'attempt', 'started_at']::name[]) AS c;
SELECT col_is_null('grelout', 'attempts', c, 'grelout.attempts.' || c || ' may be NULL')
FROM unnest(ARRAY['duration_ms', 'status', 'error', 'response_body', 'content_type']::name[]) AS c;
SELECT has_index('grelout', 'attempts', 'attempts_message_idx', ARRAY['message_id', 'attempt']::name[],
	'attempts_message_idx: a message''s attempts in order');
SELECT has_index('grelout', 'attempts', 'attempts_started_idx', ARRAY['started_at']::name[],
	'attempts_started_idx: the purge, oldest first');
SELECT is((SELECT count(*) FROM pg_extension, unnest(extconfig) AS c
	WHERE extname = 'grelout' AND c = 'grelout.attempts'::regclass), 0::bigint,
	'grelout.attempts is no configuration table: pg_dump leaves the log out');

-- issue 33: grelout.metrics() is not PUBLIC's (it names every database's
-- handlers) but pg_monitor's; the schema is not (the administrator grants
-- USAGE to the exporter's role); it runs as its caller, search_path pinned
SELECT function_privs_are('grelout', 'metrics', ARRAY[]::name[], 'public', ARRAY[]::text[],
	'grelout.metrics: no EXECUTE for PUBLIC');
SELECT function_privs_are('grelout', 'metrics', ARRAY[]::name[], 'pg_monitor', ARRAY['EXECUTE'],
	'grelout.metrics: EXECUTE for pg_monitor');
SELECT schema_privs_are('grelout', 'pg_monitor', ARRAY[]::text[], 'schema grelout: nothing for pg_monitor');
SELECT isnt_definer('grelout', 'metrics', ARRAY[]::name[], 'grelout.metrics is SECURITY INVOKER');
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = 'grelout.metrics()'::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], 'grelout.metrics pins search_path to pg_catalog, pg_temp');

-- issue 34: asymmetric signatures.  new_signing_key() runs as its caller;
-- handler_public_key(name) reads the handler's secret as the extension's
-- owner and returns its public key only; neither is PUBLIC's.
SELECT function_returns('grelout', 'new_signing_key', ARRAY[]::name[], 'text',
	'grelout.new_signing_key() returns text');
SELECT function_returns('grelout', 'handler_public_key', ARRAY['text']::name[], 'text',
	'grelout.handler_public_key(text) returns text');
SELECT isnt_definer('grelout', 'new_signing_key', ARRAY[]::name[],
	'grelout.new_signing_key is SECURITY INVOKER');
SELECT is_definer('grelout', 'handler_public_key', ARRAY['text']::name[],
	'grelout.handler_public_key is SECURITY DEFINER: who may call it needs not read grelout.handlers');
SELECT function_lang_is('grelout', f, a, 'c', 'grelout.' || f || ' is written in C')
FROM (VALUES ('new_signing_key', ARRAY[]::name[]), ('handler_public_key', ARRAY['text']::name[])) AS v(f, a);
SELECT volatility_is('grelout', 'new_signing_key', ARRAY[]::name[], 'volatile',
	'grelout.new_signing_key is VOLATILE');
SELECT volatility_is('grelout', 'handler_public_key', ARRAY['text']::name[], 'stable',
	'grelout.handler_public_key is STABLE');
SELECT is_strict('grelout', 'handler_public_key', ARRAY['text']::name[],
	'grelout.handler_public_key is STRICT');
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = ('grelout.' || f || a)::regprocedure),
	ARRAY['search_path=pg_catalog, pg_temp'], 'grelout.' || f || ' pins search_path to pg_catalog, pg_temp')
FROM (VALUES ('new_signing_key', '()'), ('handler_public_key', '(text)')) AS v(f, a);
SELECT function_privs_are('grelout', f, a, 'public', ARRAY[]::text[],
	'grelout.' || f || ': no EXECUTE for PUBLIC')
FROM (VALUES ('new_signing_key', ARRAY[]::name[]), ('handler_public_key', ARRAY['text']::name[])) AS v(f, a);
SELECT matches(grelout.new_signing_key(), '^whsk_[A-Za-z0-9+/]{43}=$',
	'new_signing_key: whsk_ + base64 of 32 bytes');
SELECT isnt(grelout.new_signing_key(), grelout.new_signing_key(), 'new_signing_key: a new key each call');
INSERT INTO grelout.handlers (name, topic, url, secret, enabled) VALUES
	('pgtap.sk', 'pgtap.sk', 'http://127.0.0.1:9/',
		'whsk_' || encode('\x9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60'::bytea, 'base64'), false),
	('pgtap.hmac', 'pgtap.hmac', 'http://127.0.0.1:9/', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false);
SELECT is(grelout.handler_public_key('pgtap.sk'),
	'whpk_' || encode('\xd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a'::bytea, 'base64'),
	'handler_public_key: the public key of RFC 8032''s test vector 1');
SELECT is(grelout.handler_public_key('pgtap.hmac'), NULL, 'handler_public_key: NULL for a whsec_ secret');
SELECT throws_ok($$SELECT grelout.handler_public_key('pgtap.missing')$$, '42704',
	'handler "pgtap.missing" does not exist', 'handler_public_key: an unknown handler is an error');
SELECT throws_ok($$UPDATE grelout.handlers SET secret = 'whsk_' || encode('\x00'::bytea, 'base64') WHERE name = 'pgtap.sk'$$,
	'22023', 'invalid handler secret', 'a malformed whsk_ key is refused');
DELETE FROM grelout.handlers WHERE name IN ('pgtap.sk', 'pgtap.hmac');

-- issue 11: the stored breakers, the handlers' health view and its indexes
SELECT columns_are('grelout', 'handler_health',
	ARRAY['handler', 'breaker', 'consecutive_failures', 'opened_at', 'probe_at',
		'cooldown_ms', 'version', 'last_success_at', 'last_failure_at', 'last_error'],
	'grelout.handler_health has the breaker''s columns');
SELECT col_is_pk('grelout', 'handler_health', 'handler', 'handler_health is keyed by handler');
SELECT columns_are('grelout', 'handler_status',
	ARRAY['handler', 'topic', 'enabled', 'breaker', 'consecutive_failures',
		'last_success_at', 'last_failure_at', 'last_error', 'in_flight', 'pending', 'dead',
		'oldest_pending_age'],
	'grelout.handler_status has the columns of the contract');
SELECT has_index('grelout', t, i, ARRAY['handler']::name[], i || ' is on (handler)')
FROM (VALUES ('outbox', 'outbox_dead_idx'), ('fanout', 'fanout_dead_idx')) AS v(t, i);
SELECT throws_ok($$INSERT INTO grelout.handler_health (handler, breaker) VALUES ('x', 'ajar')$$,
	'23514', NULL, 'a breaker is closed, open or half-open');
INSERT INTO grelout.handlers (name, topic, url) VALUES ('pgtap.health', 'pgtap.health', 'http://127.0.0.1:9/');
SELECT results_eq($$SELECT breaker, consecutive_failures, last_success_at, last_failure_at,
		last_error, in_flight, pending, dead, oldest_pending_age
	FROM grelout.handler_status WHERE handler = 'pgtap.health'$$,
	$$VALUES ('closed'::text, 0, NULL::timestamptz, NULL::timestamptz, NULL::text, 0, 0::bigint,
		0::bigint, NULL::interval)$$,
	'a new handler reads closed, zeros and NULLs in handler_status');
INSERT INTO grelout.handler_health (handler, breaker, consecutive_failures, version)
VALUES ('pgtap.health', 'open', 7, 1);
SELECT is((SELECT breaker || ':' || consecutive_failures FROM grelout.handler_status
	WHERE handler = 'pgtap.health'), 'open:7',
	'handler_status shows a stored breaker no relay holds in memory');
DELETE FROM grelout.handlers WHERE name = 'pgtap.health';
SELECT is((SELECT count(*) FROM grelout.handler_health WHERE handler = 'pgtap.health'), 0::bigint,
	'deleting a handler forgets its stored breaker');

SELECT * FROM finish();
ROLLBACK;
