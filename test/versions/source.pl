# The PostgreSQL 15 side of the upgrade tests across versions (test/run's
# "versions" suite): a database with grelout 1.1 in use (a publishing role,
# handlers with secrets, a captured table) and a backlog in every state,
# made by the live relays and a receiver: pending (a paused handler, a
# fan-out delivery waiting for a slot), delayed, processing under a lease
# (a single delivery and a fan-out delivery in flight to a slow receiver),
# dead, and an ordered key blocked by its dead head.  While both requests
# are in flight, pg_dumpall writes GRELOUT_VERSIONS_DIR/dumpall-1.1.sql;
# then ALTER EXTENSION UPDATE TO '1.2' and pg_dumpall again, dumpall-1.2.sql.
# restore.pl restores both into 17, 18 and 19, with backlog.json (the
# description that GreloutVersions checks against).
#
# Then the same cluster (1.2 now: a regrole column in a user table, which
# pg_upgrade accepts), stopped, goes through pg_upgrade into a new 15
# cluster, as PostgreSQL's own pg_upgrade test does within one version:
# while pg_upgrade holds the old and new servers (binary-upgrade mode) no
# grelout launcher or relay starts (their server log, at DEBUG1, names
# every background worker started) and the receiver gets nothing; the
# upgraded cluster then delivers the whole backlog.
use strict;
use warnings;
use Cwd;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT new_secret);
use GreloutVersions;

my $out = $ENV{GRELOUT_VERSIONS_DIR} or die "GRELOUT_VERSIONS_DIR is not set";
my @conf = (
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.lease_duration = '60s'",
	"grelout.keep_delivered = on");

# one port for every receiver of the run: the handlers' URLs name it
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $recv = start_receiver(port => $port);
my $node = grelout_node('source', @conf);
sub sq { return $node->safe_psql('app', $_[0]); }

sq(q{DROP EXTENSION grelout; CREATE EXTENSION grelout VERSION '1.1'});
is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.1', 'the source runs grelout 1.1');

sq(q{CREATE ROLE app_pub LOGIN;
	GRANT USAGE ON SCHEMA grelout TO app_pub;
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO app_pub;});

$recv->script('/slow', [ { delay => 55, watch_hangup => JSON::PP::true } ], { status => 204 });
$recv->script('/fan-b', [ { delay => 55, watch_hangup => JSON::PP::true } ], { status => 204 });
$recv->script('/dead', [], { status => 500 });
$recv->script('/ord', [ { status => 500 } ], { status => 204 });
my $url = sub { $recv->url($_[0]) };
my ($s1, $s2) = (new_secret(32), new_secret(24));
sq(qq{INSERT INTO grelout.handlers (name, topic, url, secret, previous_secret, timeout,
		max_attempts, max_in_flight, enabled, ordered, on_dead)
	VALUES
	('orders', 'orders', '@{[ $url->('/orders') ]}', '$s1', '$s2', NULL, NULL, NULL, true, false, 'block'),
	('fan-a', 'fan.#', '@{[ $url->('/fan-a') ]}', NULL, NULL, NULL, NULL, NULL, true, false, 'block'),
	('fan-b', 'fan.*', '@{[ $url->('/fan-b') ]}', NULL, NULL, '50 seconds', NULL, 1, true, false, 'block'),
	('slow', 'slow', '@{[ $url->('/slow') ]}', NULL, NULL, '50 seconds', NULL, NULL, true, false, 'block'),
	('dead', 'dead', '@{[ $url->('/dead') ]}', NULL, NULL, NULL, 1, NULL, true, false, 'block'),
	('paused', 'paused', '@{[ $url->('/paused') ]}', NULL, NULL, NULL, NULL, NULL, false, false, 'block'),
	('ord', 'ord', '@{[ $url->('/ord') ]}', NULL, NULL, NULL, 1, NULL, true, true, 'block'),
	('items', 'items.*', '@{[ $url->('/items') ]}', NULL, NULL, NULL, NULL, NULL, true, false, 'block')});

# a captured table (owned by the superuser), which publishes as 1.1 does
sq(q{CREATE TABLE items (id int PRIMARY KEY, v text);
	SELECT grelout.capture('items', 'items');
	INSERT INTO items VALUES (1, 'a')});
ok(wait_until(sub { $recv->count('/items') == 1 }, 60), '1.1: a captured insert is delivered');

# the backlog, published by app_pub
sub pub { sq("BEGIN; SET LOCAL ROLE app_pub; $_[0]; COMMIT;") }
sub states
{
	return sq(qq{SELECT string_agg(state, ',' ORDER BY created_at, message_id)
		FROM grelout.deliveries WHERE handler = '$_[0]'});
}
pub(q{SELECT outbox_publish('dead', '{"d": 1}')});
ok(wait_until(sub { states('dead') eq 'dead' }, 60), '1.1: a dead message');
pub(q{SELECT outbox_publish('ord', jsonb_build_object('key', 'k1', 'n', i), key => 'k1')
	FROM generate_series(1, 4) AS i});
ok(wait_until(sub { states('ord') eq 'dead,pending,pending,pending' }, 60),
	'1.1: an ordered key blocked by its dead head');
pub(q{SELECT outbox_publish('paused', jsonb_build_object('p', i)) FROM generate_series(1, 2) AS i});
pub(q{SELECT outbox_publish('orders', '{"signed": 1}')});
pub(q{SELECT outbox_publish('orders', '{"delayed": true}', delay => '1 hour', dedup_key => 'delayed')});
pub(q{SELECT outbox_publish('slow', '{"slow": true}')});
pub(q{SELECT outbox_publish('fan.x', '{"fan": 1}')});
pub(q{SELECT outbox_publish('fan.y', '{"fan": 2}')});
ok(wait_until(sub { states('slow') eq 'processing' && states('fan-b') eq 'processing,pending'
	&& states('fan-a') eq 'delivered,delivered' && $recv->count('/slow') == 1 && $recv->count('/fan-b') == 1 }, 60),
	'1.1: a delivery and a fan-out delivery in flight under a lease, a fan-out delivery waiting for a slot');
ok(wait_until(sub { $recv->count('/orders') == 1 }, 60), '1.1: the signed handler delivers');
is(states('paused'), 'pending,pending', '1.1: pending messages of a paused handler');
is(states('orders'), 'delivered,pending', '1.1: a delayed message');
is(sq(q{SELECT count(*) FROM grelout.outbox WHERE state = 'processing' AND lease IS NOT NULL}) .
	sq(q{SELECT count(*) FROM grelout.fanout WHERE state = 'processing' AND lease IS NOT NULL}), '11',
	'1.1: the leases are stored (outbox and fanout)');

# the description and the dump, while both requests are still in flight
my $backlog = {
	port => $port,
	secret => $s1,
	previous_secret => $s2,
	handlers => sq(handlers_sql()),
	deliveries => JSON::PP::decode_json(sq(undelivered_sql())),
	delayed => sq(q{SELECT id FROM grelout.outbox WHERE dedup_key = 'delayed'}),
	delayed_at => sq(q{SELECT extract(epoch FROM available_at) FROM grelout.outbox WHERE dedup_key = 'delayed'}),
	publisher_oid => sq(q{SELECT oid FROM pg_roles WHERE rolname = 'app_pub'}),
};
is(join(',', sort map { $_->{state} } @{ $backlog->{deliveries} }),
	'dead,dead,pending,pending,pending,pending,pending,pending,pending,processing,processing',
	'the backlog: 2 dead, 7 pending (3 blocked, 2 paused, 1 delayed, 1 waiting for a slot), 2 in flight');
$node->command_ok([ 'pg_dumpall', '-f', "$out/dumpall-1.1.sql" ], 'pg_dumpall of the 1.1 cluster (15)');
# the same, updated to 1.2 (live, the leases still held), dumped again:
# 1.2 dumps each message's publisher by role name (1.1: by oid)
sq(q{ALTER EXTENSION grelout UPDATE TO '1.2'});
is(sq(q{SELECT published_by FROM grelout.outbox WHERE id = '} . $backlog->{delayed} . q{'}), 'app_pub',
	'1.2: published_by names the role');
$node->command_ok([ 'pg_dumpall', '-f', "$out/dumpall-1.2.sql" ], 'pg_dumpall of the cluster updated to 1.2 (15)');
is(sq(handlers_sql()), $backlog->{handlers}, 'the update to 1.2 changed no handler');
is(states('slow') . ' ' . states('fan-b') . ' ' . $recv->stats('/slow')->{max_in_flight}, 'processing processing,pending 1',
	'the requests were still in flight during both dumps');
write_backlog("$out/backlog.json", $backlog);
chmod 0644, "$out/dumpall-1.1.sql", "$out/dumpall-1.2.sql";

# ---- pg_upgrade 15 -> 15
$node->stop('fast');
$recv->reset;
my $new = PostgreSQL::Test::Cluster->new('upgraded');
$new->init;
$new->append_conf('postgresql.conf', join("\n",
	"shared_preload_libraries = 'grelout'", "grelout.database = 'app'", @conf) . "\n");
my $bindir = $new->config_data('--bindir');
my $cwd = getcwd();
chdir(PostgreSQL::Test::Utils::tempdir()) or die;
command_ok([ 'pg_upgrade', '--no-sync', '--retain',
		'-d', $node->data_dir, '-D', $new->data_dir, '-b', $bindir, '-B', $bindir,
		'-s', $new->host, '-p', $node->port, '-P', $new->port,
		'-o', '-c log_min_messages=debug1', '-O', '-c log_min_messages=debug1' ],
	'pg_upgrade of the 1.1 cluster (15 to 15)');
chdir($cwd) or die;
is($recv->count(), 0, 'nothing was delivered while pg_upgrade held the servers');
my @logs = glob($new->data_dir . '/pg_upgrade_output.d/*/log/pg_upgrade_server.log');
my $log = join('', map { PostgreSQL::Test::Utils::slurp_file($_) } @logs);
like($log, qr/starting background worker process/,
	'the servers pg_upgrade ran logged the background workers they started');
unlike($log, qr/(registering|starting) background worker( process)? "grelout|LOG:  grelout relay/,
	'no grelout launcher or relay started under pg_upgrade');

$new->start;
is($new->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.2',
	'pg_upgrade keeps the extension at its version');
is($new->safe_psql('app', q{SELECT oid FROM pg_roles WHERE rolname = 'app_pub'}), $backlog->{publisher_oid},
	'pg_upgrade keeps the role oids');
check_delivers($new, $recv, $backlog, 'pg_upgrade 15', 1);
$new->stop;
done_testing();
