# pg_dump and restore keep the handlers and every undelivered message
# (pending, processing, dead) with all their columns, drop delivered ones,
# and keep the grants on the producer functions; dedup keeps working on the
# restored rows.  Mid-fan-out, a message routed to several handlers keeps
# its undelivered deliveries (grelout.fanout rows) and drops its delivered
# ones.  Both the custom and the plain format are restored into
# new databases of the same cluster (which preloads grelout).  The relay is
# off, so nothing is delivered while the test looks.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $node = grelout_node('dump', 'grelout.relay = off');
my $whsec = 'whsec_' . 'a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tr';    # 30 bytes
my $whsec_old = 'whsec_' . 'b2xkb2xkb2xkb2xkb2xkb2xkb2xkb2xkb2xk';     # 27 bytes

$node->safe_psql('app', qq{
	CREATE ROLE app_writer;
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO app_writer;
	CREATE TABLE orders (id int PRIMARY KEY, total numeric);
	INSERT INTO grelout.handlers (topic, url, headers, secret, previous_secret, timeout, max_attempts, enabled)
	VALUES ('orders', 'http://127.0.0.1:9/orders', '{"Authorization": "Bearer abc"}',
		'$whsec', '$whsec_old', '5 seconds', 4, true),
		('paused', 'https://hooks.example.com/paused', '{}', NULL, NULL, NULL, NULL, false);
	BEGIN;
	INSERT INTO orders VALUES (1, 9.99);
	SELECT outbox_publish('orders', '{"order": 1}', key => 'c-1',
		headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}', dedup_key => 'order-1');
	SELECT outbox_publish('orders', '{"order": 2}', delay => '1 hour');
	SELECT outbox_publish('paused', '{"p": true}');
	SELECT outbox_publish('orders', '{"order": "dead"}', dedup_key => 'order-dead');
	SELECT outbox_publish('orders', '{"order": "processing"}');
	SELECT outbox_publish('orders', '{"order": "delivered"}', dedup_key => 'order-delivered');
	COMMIT;
	UPDATE grelout.outbox SET state = 'dead', attempts = 4, last_error = 'HTTP 500: boom',
		dead_at = now() - interval '1 hour' WHERE payload->>'order' = 'dead';
	UPDATE grelout.outbox SET state = 'processing', attempts = 1, lease = 42,
		available_at = now() + interval '30 seconds' WHERE payload->>'order' = 'processing';
	UPDATE grelout.outbox SET state = 'delivered', attempts = 1, delivered_at = now()
		WHERE payload->>'order' = 'delivered';

	-- fan-out, as the relay would have left it mid-way: "fan 1" went to
	-- three handlers, delivered to one, dead at one, pending at the third;
	-- "fan 2" went to two, one pending under a lease
	INSERT INTO grelout.handlers (name, topic, url, filter, max_in_flight, ordered, on_dead, enabled)
	VALUES ('fan-a', 'fan.*', 'http://127.0.0.1:9/a', '{"fan": true}', 3, true, 'skip', true),
		('fan-b', 'fan.#', 'http://127.0.0.1:9/b', NULL, NULL, false, 'block', true),
		('fan-c', '#', 'http://127.0.0.1:9/c', NULL, NULL, false, 'block', false);
	BEGIN;
	SELECT outbox_publish('fan.x', '{"fan": true, "n": 1}');
	SELECT outbox_publish('fan.x', '{"fan": false, "n": 2}');
	UPDATE grelout.outbox SET route = 'fanout' WHERE topic = 'fan.x';
	INSERT INTO grelout.fanout (message_id, handler, state, attempts, available_at, lease,
		last_error, last_status, last_duration_ms, delivered_at, dead_at, created_at)
	SELECT o.id, h, s, a, o.available_at, l, e, st, d,
		CASE s WHEN 'delivered' THEN now() END, CASE s WHEN 'dead' THEN now() END, o.created_at
	FROM grelout.outbox o JOIN (VALUES
		(1, 'fan-a', 'delivered', 1, NULL::bigint, NULL, 200, 12),
		(1, 'fan-b', 'dead', 4, NULL, 'HTTP 500: boom', 500, 30),
		(1, 'fan-c', 'pending', 0, NULL, NULL, NULL, NULL),
		(2, 'fan-b', 'processing', 2, 77, 'HTTP 503', 503, 5),
		(2, 'fan-c', 'pending', 0, NULL, NULL, NULL, NULL))
		AS v(n, h, s, a, l, e, st, d) ON (o.payload->>'n')::int = v.n;
	COMMIT;
});

# every column of every row, in a stable order, as text
my $handlers_sql = q{SELECT string_agg(h::text, E'\n' ORDER BY name) FROM grelout.handlers h};
my $fanout_sql = q{SELECT string_agg(f::text, E'\n' ORDER BY message_id, handler) FROM grelout.fanout f
	WHERE state <> 'delivered'};
my $outbox_sql = q{SELECT string_agg(o::text, E'\n' ORDER BY id) FROM grelout.outbox o
	WHERE state <> 'delivered'};
my $handlers = $node->safe_psql('app', $handlers_sql);
my $undelivered = $node->safe_psql('app', $outbox_sql);
my $fanout = $node->safe_psql('app', $fanout_sql);
is($node->safe_psql('app', q{SELECT string_agg(state, ',' ORDER BY state) FROM grelout.outbox}),
	'dead,delivered,pending,pending,pending,pending,pending,processing', 'source: one message in each state, two fanned out');
is($node->safe_psql('app', q{SELECT string_agg(topic || ':' || enabled || ':' || (secret IS NOT NULL), ',' ORDER BY topic)
	FROM grelout.handlers WHERE name = topic}), 'orders:true:true,paused:false:false', 'source: two handlers, one signed, one paused');
is($node->safe_psql('app', q{SELECT string_agg(d.handler || ':' || d.state, ',' ORDER BY d.message_id, d.handler)
	FROM grelout.deliveries d WHERE d.topic = 'fan.x'}),
	'fan-a:delivered,fan-b:dead,fan-c:pending,fan-b:processing,fan-c:pending', 'source: five fan-out deliveries');

my $dir = PostgreSQL::Test::Utils::tempdir();
$node->command_ok([ 'pg_dump', '-Fc', '-f', "$dir/app.dump", '-d', 'app' ], 'pg_dump -Fc of app');
$node->command_ok([ 'pg_dump', '-Fp', '-f', "$dir/app.sql", '-d', 'app' ], 'pg_dump -Fp of app');

$node->safe_psql('postgres', 'CREATE DATABASE app_custom');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'app_custom', "$dir/app.dump" ],
	'pg_restore of the custom dump into a new database');
$node->safe_psql('postgres', 'CREATE DATABASE app_plain');
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'app_plain', '-f', "$dir/app.sql" ],
	'psql restore of the plain dump into a new database');

for my $db ('app_custom', 'app_plain')
{
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}),
		'1.2', "$db: extension grelout 1.2 created by the restore");
	is($node->safe_psql($db, $handlers_sql), $handlers,
		"$db: handlers restored with every column (url, headers, secrets, timeout, attempts, enabled)");
	is($node->safe_psql($db, $outbox_sql), $undelivered,
		"$db: pending, processing and dead messages restored with every column, ids included");
	is($node->safe_psql($db, q{SELECT string_agg(state, ',' ORDER BY state) FROM grelout.outbox}),
		'dead,pending,pending,pending,pending,pending,processing', "$db: the delivered message was not dumped");
	is($node->safe_psql($db, $fanout_sql), $fanout,
		"$db: undelivered fan-out deliveries restored with every column (lease, last_status, ...)");
	is($node->safe_psql($db, q{SELECT string_agg(d.handler || ':' || d.state, ',' ORDER BY d.message_id, d.handler)
		FROM grelout.deliveries d WHERE d.topic = 'fan.x'}),
		'fan-b:dead,fan-c:pending,fan-b:processing,fan-c:pending',
		"$db: mid-fan-out, every undelivered delivery is back, the delivered one is not");
	is($node->safe_psql($db, q{SELECT count(*) FROM grelout.outbox WHERE dedup_key = 'order-delivered'}),
		'0', "$db: no trace of the delivered message");
	is($node->safe_psql($db, q{SELECT total FROM orders WHERE id = 1}), '9.99',
		"$db: the application's table came along");

	# dedup holds on restored rows: the stored id comes back, nothing is added
	my $orig = $node->safe_psql('app', q{SELECT id FROM grelout.outbox WHERE dedup_key = 'order-1'});
	is($node->safe_psql($db, q{SELECT outbox_publish('orders', '{"order": "again"}', dedup_key => 'order-1')}),
		$orig, "$db: a publish with a restored dedup_key returns the restored id");
	is($node->safe_psql($db, q{SELECT outbox_publish('orders', '{"order": "dead again"}', dedup_key => 'order-dead')}),
		$node->safe_psql('app', q{SELECT id FROM grelout.outbox WHERE dedup_key = 'order-dead'}),
		"$db: a restored dead message still holds its dedup_key");
	is($node->safe_psql($db, q{SELECT count(*) FROM grelout.outbox}), '7', "$db: nothing was added");

	# the indexes, the validation trigger and the privileges came back too
	is($node->safe_psql($db, q{SELECT count(*) FROM pg_indexes WHERE schemaname = 'grelout'
		AND indexname IN ('outbox_claim_idx', 'outbox_dedup_key_idx', 'fanout_claim_idx',
			'outbox_route_idx', 'outbox_waiting_idx')}), '5', "$db: claim, routing and dedup indexes exist");
	is($node->safe_psql($db, q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'grelout.handlers'::regclass
		AND NOT tgisinternal}), '6', "$db: the handlers' triggers exist (validate, reroute x2, forget x2, health)");
	my ($rc, $out, $err) = $node->psql($db,
		q{INSERT INTO grelout.handlers (topic, url) VALUES ('bad', 'file:///etc/passwd')});
	like($err, qr/handler url must start with http/, "$db: handlers are still validated");
	is($node->safe_psql($db, q{SELECT has_function_privilege('app_writer',
		'outbox_publish(text, jsonb, text, jsonb, interval, text)', 'EXECUTE')}), 't',
		"$db: the EXECUTE grant to app_writer was restored");
	is($node->safe_psql($db, q{SELECT has_function_privilege('public',
		'outbox_publish(text, jsonb, text, jsonb, interval, text)', 'EXECUTE')
		OR has_table_privilege('public', 'grelout.outbox', 'SELECT')
		OR has_table_privilege('public', 'grelout.handlers', 'SELECT')
		OR has_schema_privilege('public', 'grelout', 'USAGE')}), 'f',
		"$db: PUBLIC still has nothing");
	is($node->safe_psql($db, q{SET ROLE app_writer; SELECT outbox_publish('orders', '{"by": "writer"}') IS NOT NULL}),
		't', "$db: app_writer can publish");
}

# the source database is untouched
is($node->safe_psql('app', $outbox_sql), $undelivered, 'source messages unchanged');
is($node->safe_psql('app', q{SELECT count(*) FROM grelout.outbox WHERE state = 'delivered'}), '1',
	'source still has its delivered message');

$node->stop;
done_testing();
