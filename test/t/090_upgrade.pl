# ALTER EXTENSION grelout UPDATE TO '1.1' on a live 1.0 installation: the
# 1.1 library serves the 1.0 schema, relays deliver during the upgrade, and
# a publisher session with cached plans stays connected.  After the upgrade
# every message is delivered exactly as 1.0 would have (the receiver counts:
# none lost, none sent twice), the old session's next publish is a 1.1 one
# (published_by set, keys stored under 1.0 still deduplicate), EXECUTE
# grants carry over to the new outbox_purge and outbox_redrive signatures
# (and stay out of the extension's initial privileges, so pg_dump keeps
# them), and the upgraded schema equals a fresh 1.1 install's (from
# grelout--1.1.sql: dump, members, initial privileges).  Fan-out:
# handlers are named by their topic; 1.0's messages of a topic with a
# handler become its inline delivery, whatever their state, and those of a
# topic without one wait for one; a message left dead by a handler deleted
# under 1.0 is redriven to whatever handler matches it now.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('upgrade',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub state_of
{
	my ($where) = @_;
	return sq("SELECT string_agg(state, ',' ORDER BY id) FROM grelout.outbox WHERE $where");
}

is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.2',
	'CREATE EXTENSION installs 1.2');
sq(q{DROP EXTENSION grelout; CREATE EXTENSION grelout VERSION '1.0'});
is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.0',
	q{CREATE EXTENSION grelout VERSION '1.0' still works});

# ---- a 1.0 installation in use: roles with grants, handlers, a backlog
my $grants = q{
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO app_pub;
};
sq(q{CREATE ROLE app_pub LOGIN; CREATE ROLE app_ops;} . $grants . q{
	GRANT EXECUTE ON FUNCTION outbox_redrive(text) TO app_ops;
	GRANT EXECUTE ON FUNCTION outbox_purge(interval) TO app_ops WITH GRANT OPTION;});
$recv->script('/slow', [ { delay => 4, status => 204 } ], { status => 204 });
$recv->script('/dead', [], { status => 500 });
$recv->script('/gone-dead', [], { status => 500 });
my $url = sub { $recv->url($_[0]) };
sq(qq{INSERT INTO grelout.handlers (topic, url, max_attempts, enabled) VALUES
	('orders', '@{[ $url->('/orders') ]}', NULL, true),
	('slow', '@{[ $url->('/slow') ]}', NULL, true),
	('dead', '@{[ $url->('/dead') ]}', 1, true),
	('paused', '@{[ $url->('/paused') ]}', NULL, false),
	('gone', '@{[ $url->('/gone-dead') ]}', 1, true)});

# published by app_pub under 1.0: delivered and kept, with dedup keys
sq(q{BEGIN; SET LOCAL ROLE app_pub;
	SELECT outbox_publish('orders', jsonb_build_object('n', i), dedup_key => 'o-' || i)
	FROM generate_series(1, 5) AS i; COMMIT;});
ok(wait_until(sub { state_of(q{topic = 'orders'}) eq join(',', ('delivered') x 5) }, 60),
	'1.0: five messages delivered and kept');
sq(q{SELECT outbox_publish('dead', '{"d": 1}')});
ok(wait_until(sub { state_of(q{topic = 'dead'}) eq 'dead' }, 60), '1.0: a dead message');
sq(q{SELECT outbox_publish('gone', '{"g": 1}')});
ok(wait_until(sub { state_of(q{topic = 'gone'}) eq 'dead' }, 60), '1.0: another dead message');
sq(q{DELETE FROM grelout.handlers WHERE topic = 'gone'});
sq(q{SELECT outbox_publish('nohandler', '{"w": 1}')});
sq(q{SELECT outbox_publish('paused', jsonb_build_object('p', i), dedup_key => 'p-' || i)
	FROM generate_series(1, 3) AS i});
sq(q{SELECT outbox_publish('orders', '{"delayed": true}', delay => '5 seconds')});
sq(q{SELECT outbox_publish('slow', '{"slow": true}')});
ok(wait_until(sub { state_of(q{topic = 'slow'}) eq 'processing' }, 60),
	'1.0: a message in flight under a lease to a slow receiver');
is(state_of(q{topic = 'paused'}), 'pending,pending,pending', '1.0: pending messages of a disabled handler');

# a publisher session with cached plans: a prepared statement and the
# backend's kept plans of outbox_publish, dedup included
my $pub = $node->background_psql('app', on_error_stop => 0);
$pub->query_safe(q{SET ROLE app_pub});
$pub->query_safe(q{PREPARE pub(text) AS SELECT outbox_publish('orders', jsonb_build_object('n', $1))});
$pub->query_safe(q{PREPARE pubkey(text) AS SELECT outbox_publish('orders', jsonb_build_object('k', $1), dedup_key => $1)});
my $bg1 = $pub->query_safe(q{EXECUTE pub('bg-1')});
my $bgk = $pub->query_safe(q{EXECUTE pubkey('bg-key')});
like($bg1, qr/^[0-9a-f-]{36}$/, '1.0: the session publishes');

# ---- the upgrade, with relays live and a request in flight
is(sq(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'grelout relay'}), '1',
	'a relay is running');
sq(q{ALTER EXTENSION grelout UPDATE TO '1.1'});
is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.1', 'upgraded to 1.1');

# fan-out: the 1.0 handlers and messages (no published_by) as designed
is(sq(q{SELECT string_agg(name || '=' || topic, ',' ORDER BY name) FROM grelout.handlers}),
	'dead=dead,orders=orders,paused=paused,slow=slow', 'each handler is named by its topic');
is(sq(q{SELECT string_agg(topic || ':' || route || ':' || coalesce(handler, '-') || ':' || n, ',' ORDER BY topic)
	FROM (SELECT topic, route, handler, count(*) AS n FROM grelout.outbox
		WHERE published_by IS NULL GROUP BY 1, 2, 3) AS g}),
	'dead:single:dead:1,gone:single:gone:1,nohandler:waiting:-:1,orders:single:orders:8,paused:single:paused:3,slow:single:slow:1',
	'1.0 messages: inline deliveries to the handler of their topic, in any state; waiting without one');
is(sq(q{SELECT count(*) FROM grelout.deliveries WHERE topic = 'slow' AND state = 'processing'}), '1',
	'the request in flight shows as an inline delivery in grelout.deliveries');

# the old session's next calls are 1.1 calls
my $bg2 = $pub->query_safe(q{EXECUTE pub('bg-2')});
is(sq(qq{SELECT published_by::regrole FROM grelout.outbox WHERE id = '$bg2'}), 'app_pub',
	'the old session\'s next publish records published_by');
is(sq(qq{SELECT published_by IS NULL FROM grelout.outbox WHERE id = '$bg1'}), 't',
	'a message stored under 1.0 has no published_by');
is($pub->query_safe(q{EXECUTE pubkey('bg-key')}), $bgk,
	'a dedup key stored under 1.0 still returns its message');
my $bgk2 = $pub->query_safe(q{EXECUTE pubkey('bg-key-2')});
is(sq(qq{SELECT published_by::regrole FROM grelout.outbox WHERE id = '$bgk2'}), 'app_pub',
	'a new dedup key is stored as the role\'s');
my $o1 = sq(q{SELECT id FROM grelout.outbox WHERE dedup_key = 'o-1'});
is($pub->query_safe(q{SELECT outbox_publish('orders', '{"again": true}', dedup_key => 'o-1')}), $o1,
	'a delivered 1.0 message\'s key deduplicates any role\'s publish');
sq(q{GRANT EXECUTE ON FUNCTION outbox_message_status(uuid) TO app_pub});
is($pub->query_safe(qq{SELECT count(*) FROM outbox_message_status('$bg2')}), '1',
	'outbox_message_status shows the session its own message');
is($pub->query_safe(qq{SELECT count(*) FROM outbox_message_status('$bg1')}), '0',
	'but not a message stored under 1.0');
sq(q{REVOKE EXECUTE ON FUNCTION outbox_message_status(uuid) FROM app_pub});
$pub->quit;

# ---- every message delivered as 1.0 would have: none lost, none twice
sq(q{UPDATE grelout.handlers SET enabled = true WHERE topic = 'paused'});
# the waiting message goes to the handler created for it
sq(qq{INSERT INTO grelout.handlers (topic, url) VALUES ('nohandler', '@{[ $url->('/nohandler') ]}')});
# the message dead for a handler deleted under 1.0: redriven, it waits for
# a handler (none matches), then goes to the one created for its topic
is(sq(q{SELECT outbox_redrive(topic => 'gone')}), '1', 'the dead message of a deleted handler is redriven');
is(sq(q{SELECT (route IN ('new', 'waiting')) || ':' || state || ':' || coalesce(handler, '-')
	FROM grelout.outbox WHERE topic = 'gone'}),
	'true:pending:-', '... unrouted, as its handler is gone');
sq(qq{INSERT INTO grelout.handlers (name, topic, url) VALUES ('gone-again', 'gone', '@{[ $url->('/gone') ]}')});
ok(wait_until(sub {
	sq(q{SELECT count(*) FROM grelout.outbox WHERE state NOT IN ('delivered', 'dead')}) eq '0' }, 90),
	'every message is delivered or dead');
is(state_of(q{topic = 'dead'}), 'dead', 'the dead message stays dead');
is(state_of(q{topic = 'slow'}), 'delivered', 'the request in flight during the upgrade settled as delivered');
my $expect = {
	'/orders' => sq(q{SELECT count(*) FROM grelout.outbox WHERE topic = 'orders'}),
	'/slow' => 1, '/paused' => 3, '/dead' => 1, '/gone-dead' => 1, '/gone' => 1, '/nohandler' => 1 };
is($expect->{'/orders'}, 5 + 1 + 2 + 2, 'orders: five, the delayed one, two of the session, two keys of the session');
for my $path (sort keys %$expect)
{
	my $st = $recv->stats($path);
	is("$st->{count} $st->{distinct_ids}", "$expect->{$path} $expect->{$path}",
		"$path: every message received once");
}

# ---- grants carried over, PUBLIC still nothing
is(sq(q{SELECT has_function_privilege('app_ops', 'outbox_purge(interval, text, boolean, uuid)', 'EXECUTE WITH GRANT OPTION')}),
	't', 'EXECUTE on outbox_purge, with its grant option, carried over to the new signature');
is(sq(q{SELECT count(*) FROM pg_proc WHERE proname = 'outbox_purge'}), '1', 'one outbox_purge');
is(sq(q{SELECT has_function_privilege('app_ops', 'outbox_redrive(text, text, uuid)', 'EXECUTE')}),
	't', 'EXECUTE on outbox_redrive carried over to the new signature');
is(sq(q{SELECT count(*) FROM pg_proc WHERE proname = 'outbox_redrive'}), '1', 'one outbox_redrive');
is(sq(q{SELECT has_function_privilege('app_pub', 'outbox_publish(text, jsonb, text, jsonb, interval, text)', 'EXECUTE')}),
	't', 'EXECUTE on outbox_publish kept');
is(sq(q{SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text)
	FROM pg_proc p WHERE p.proname LIKE 'outbox\_%' AND has_function_privilege('public', p.oid, 'EXECUTE')}),
	'', 'no outbox function executable by PUBLIC');
is(sq(q{SELECT url FROM grelout.handlers_masked WHERE topic = 'orders'}), $url->('/orders'),
	'handlers_masked works');

# ---- the upgraded schema equals a fresh 1.1 install's, grants included
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', q{CREATE EXTENSION grelout VERSION '1.1';} . $grants . q{
	GRANT EXECUTE ON FUNCTION outbox_redrive(text, text, uuid) TO app_ops;
	GRANT EXECUTE ON FUNCTION outbox_purge(interval, text, boolean, uuid) TO app_ops WITH GRANT OPTION;});
my %schema;
my $dir = PostgreSQL::Test::Utils::tempdir();
for my $db ('app', 'fresh')
{
	$node->command_ok([ 'pg_dump', '--schema-only', '-d', $db, '-f', "$dir/$db.sql" ],
		"pg_dump --schema-only of $db");
	# each dump has its own random \restrict key
	($schema{$db} = PostgreSQL::Test::Utils::slurp_file("$dir/$db.sql")) =~ s/^\\(un)?restrict .*$//mg;
}
like($schema{app}, qr/GRANT ALL ON FUNCTION public\.outbox_purge\(older_than interval, topic text, pending boolean, message_id uuid\) TO app_ops WITH GRANT OPTION/,
	'the dump of the upgraded database grants outbox_purge to the operator');
is($schema{app}, $schema{fresh}, 'the upgraded schema dumps exactly as a fresh 1.1 install');
my $members = q{SELECT string_agg(pg_describe_object(classid, objid, objsubid), E'\n'
	ORDER BY pg_describe_object(classid, objid, objsubid))
	FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'grelout')};
is(sq($members), $node->safe_psql('fresh', $members), 'the same extension members');
my $initprivs = q{SELECT string_agg(pg_describe_object(i.classoid, i.objoid, i.objsubid) || ' ' || i.initprivs::text, E'\n'
	ORDER BY pg_describe_object(i.classoid, i.objoid, i.objsubid))
	FROM pg_init_privs i JOIN pg_depend d ON d.classid = i.classoid AND d.objid = i.objoid
	WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'};
is(sq($initprivs), $node->safe_psql('fresh', $initprivs), 'the same initial privileges');

$node->stop;
done_testing();
