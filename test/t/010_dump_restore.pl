# pg_dump and restore keep the handlers and every undelivered message
# (pending, processing, dead) with all their columns, drop delivered ones,
# and keep the grants on the producer functions; dedup keeps working on the
# restored rows.  Both the custom and the plain format are restored into
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
		headers => '{"traceparent": "00-abc-def-01"}', dedup_key => 'order-1');
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
});

# every column of every row, in a stable order, as text
my $handlers_sql = q{SELECT string_agg(h::text, E'\n' ORDER BY topic) FROM grelout.handlers h};
my $outbox_sql = q{SELECT string_agg(o::text, E'\n' ORDER BY id) FROM grelout.outbox o
	WHERE state <> 'delivered'};
my $handlers = $node->safe_psql('app', $handlers_sql);
my $undelivered = $node->safe_psql('app', $outbox_sql);
is($node->safe_psql('app', q{SELECT string_agg(state, ',' ORDER BY state) FROM grelout.outbox}),
	'dead,delivered,pending,pending,pending,processing', 'source: one message in each state');
is($node->safe_psql('app', q{SELECT string_agg(topic || ':' || enabled || ':' || (secret IS NOT NULL), ',' ORDER BY topic)
	FROM grelout.handlers}), 'orders:true:true,paused:false:false', 'source: two handlers, one signed, one paused');

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
		'1.1', "$db: extension grelout 1.1 created by the restore");
	is($node->safe_psql($db, $handlers_sql), $handlers,
		"$db: handlers restored with every column (url, headers, secrets, timeout, attempts, enabled)");
	is($node->safe_psql($db, $outbox_sql), $undelivered,
		"$db: pending, processing and dead messages restored with every column, ids included");
	is($node->safe_psql($db, q{SELECT string_agg(state, ',' ORDER BY state) FROM grelout.outbox}),
		'dead,pending,pending,pending,processing', "$db: the delivered message was not dumped");
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
	is($node->safe_psql($db, q{SELECT count(*) FROM grelout.outbox}), '5', "$db: nothing was added");

	# the indexes, the validation trigger and the privileges came back too
	is($node->safe_psql($db, q{SELECT count(*) FROM pg_indexes WHERE schemaname = 'grelout'
		AND indexname IN ('outbox_claim_idx', 'outbox_dedup_key_idx')}), '2', "$db: claim and dedup indexes exist");
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
