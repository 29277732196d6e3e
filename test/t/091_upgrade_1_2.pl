# ALTER EXTENSION grelout UPDATE TO '1.2' on a live 1.1 installation in use:
# roles with grants, handlers with secrets (one fan-out pair, one ordered
# handler, one paused, one failing), a captured table, and a backlog in every
# state (delivered and kept, dead, pending, delayed, an ordered key blocked by
# its dead head, a request in flight under a lease), while the relays run and
# a publisher session with prepared statements stays connected.  After the
# upgrade every message is delivered (none lost, none twice; the ordered key
# in order), the old session's next calls work, the grants are kept, and the
# upgraded schema equals a fresh 1.2 install's (dump, extension members,
# initial privileges; test 092 compares every member and catalog fact).
#
# Twice: once on a fresh 1.1 (grelout--1.1.sql), once on a 1.1 that was
# installed at 1.0 and updated to 1.1 (the tables 1.0 created, altered by
# grelout--1.0--1.1.sql), with messages stored under 1.0 still waiting for a
# handler (no published_by, a dedup key, an ordering key) that reach one
# only under 1.2.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT new_secret);

my $recv = start_receiver();
my $node = grelout_node('upgrade12',
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

my $grants = q{
	GRANT USAGE ON SCHEMA grelout TO app_pub, app_ops;
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO app_pub;
	GRANT EXECUTE ON FUNCTION outbox_message_status(uuid) TO app_pub;
	GRANT EXECUTE ON FUNCTION outbox_redrive(text, text, uuid) TO app_ops;
	GRANT EXECUTE ON FUNCTION outbox_purge(interval, text, boolean, uuid) TO app_ops WITH GRANT OPTION;
	GRANT SELECT ON grelout.handler_status, grelout.deliveries TO app_ops;
};
sq(q{CREATE ROLE app_pub LOGIN; CREATE ROLE app_ops});
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', q{CREATE EXTENSION grelout;} . $grants);
my $dir = PostgreSQL::Test::Utils::tempdir();

# live_upgrade(ROUND, FROM10): the whole scenario on a 1.1 installed fresh
# (FROM10 false) or installed at 1.0, with messages stored under 1.0, and
# updated to 1.1 (FROM10 true).  The receiver's paths of the round start
# with /ROUND.
sub live_upgrade
{
	my ($round, $from10) = @_;
	my $url = sub { $recv->url("/$round$_[0]") };

	if (!$from10)
	{
		sq(q{DROP EXTENSION grelout; CREATE EXTENSION grelout VERSION '1.1'});
		is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.1',
			qq{$round: CREATE EXTENSION grelout VERSION '1.1' still works});
	}
	else
	{
		# under 1.0: messages of a topic without a handler, an ordering key
		# and a dedup key, published without published_by
		sq(q{DROP EXTENSION grelout; CREATE EXTENSION grelout VERSION '1.0'});
		sq(q{SELECT outbox_publish('legacy', jsonb_build_object('key', 'k0', 'n', i), key => 'k0',
				dedup_key => 'l-' || i)
			FROM generate_series(1, 3) AS i});
		sq(q{ALTER EXTENSION grelout UPDATE TO '1.1'});
		is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.1',
			"$round: 1.0 updated to 1.1");
		is(sq(q{SELECT string_agg(route || ':' || state || ':' || (published_by IS NULL), ',' ORDER BY id)
			FROM grelout.outbox WHERE topic = 'legacy'}),
			'waiting:pending:true,waiting:pending:true,waiting:pending:true',
			"$round: the messages stored under 1.0 wait for a handler");
	}

	# ---- a 1.1 installation in use
	sq($grants);

	$recv->script("/$round/slow", [ { delay => 4, status => 204 } ], { status => 204 });
	$recv->script("/$round/dead", [], { status => 500 });
	$recv->script("/$round/ord", [ { status => 500 } ], { status => 204 });
	my ($s1, $s2) = (new_secret(32), new_secret(24));
	sq(qq{INSERT INTO grelout.handlers (name, topic, url, secret, previous_secret, max_attempts, enabled, ordered, on_dead)
		VALUES
		('orders', 'orders', '@{[ $url->('/orders') ]}', '$s1', '$s2', NULL, true, false, 'block'),
		('fan-a', 'fan.#', '@{[ $url->('/fan-a') ]}', NULL, NULL, NULL, true, false, 'block'),
		('fan-b', 'fan.*', '@{[ $url->('/fan-b') ]}', NULL, NULL, NULL, true, false, 'block'),
		('slow', 'slow', '@{[ $url->('/slow') ]}', NULL, NULL, NULL, true, false, 'block'),
		('dead', 'dead', '@{[ $url->('/dead') ]}', NULL, NULL, 1, true, false, 'block'),
		('paused', 'paused', '@{[ $url->('/paused') ]}', NULL, NULL, NULL, false, false, 'block'),
		('ord', 'ord', '@{[ $url->('/ord') ]}', NULL, NULL, 1, true, true, 'block'),
		('items', 'items.#', '@{[ $url->('/items') ]}', NULL, NULL, NULL, true, false, 'block')});

	# a captured table
	sq(q{CREATE TABLE items (id int PRIMARY KEY, v text);
		SELECT grelout.capture('items', 'items')});
	sq(q{INSERT INTO items VALUES (1, 'a'), (2, 'b')});

	# published by app_pub: delivered and kept, fanned out, with dedup keys
	sq(q{BEGIN; SET LOCAL ROLE app_pub;
		SELECT outbox_publish('orders', jsonb_build_object('n', i), dedup_key => 'o-' || i)
		FROM generate_series(1, 5) AS i;
		SELECT outbox_publish('fan.x', '{"f": 1}');
		COMMIT;});
	ok(wait_until(sub { state_of(q{topic IN ('orders', 'fan.x')}) eq join(',', ('delivered') x 6) }, 60),
		"$round: 1.1: five messages and a fan-out delivered and kept");
	sq(q{SELECT outbox_publish('dead', '{"d": 1}')});
	ok(wait_until(sub { state_of(q{topic = 'dead'}) eq 'dead' }, 60), "$round: 1.1: a dead message");

	# an ordered key: its head goes dead (one attempt, answered 500), its next waits
	sq(q{BEGIN; SET LOCAL ROLE app_pub;
		SELECT outbox_publish('ord', jsonb_build_object('key', 'k1', 'n', i), key => 'k1')
		FROM generate_series(1, 3) AS i;
		COMMIT;});
	ok(wait_until(sub {
		sq(q{SELECT string_agg(state, ',' ORDER BY seq) FROM grelout.deliveries WHERE handler = 'ord'}) eq 'dead,pending,pending' }, 60),
		"$round: 1.1: the ordered key is blocked by its dead head");

	sq(q{SELECT outbox_publish('paused', jsonb_build_object('p', i), dedup_key => 'p-' || i)
		FROM generate_series(1, 3) AS i});
	sq(q{SELECT outbox_publish('orders', '{"delayed": true}', delay => '5 seconds')});
	sq(q{SELECT outbox_publish('slow', '{"slow": true}')});
	ok(wait_until(sub { state_of(q{topic = 'slow'}) eq 'processing' }, 60),
		"$round: 1.1: a message in flight under a lease to a slow receiver");
	is(state_of(q{topic = 'paused'}), 'pending,pending,pending', "$round: 1.1: pending messages of a disabled handler");

	# a publisher session with cached plans
	my $pub = $node->background_psql('app', on_error_stop => 0);
	$pub->query_safe(q{SET ROLE app_pub});
	$pub->query_safe(q{PREPARE pub(text) AS SELECT outbox_publish('orders', jsonb_build_object('n', $1))});
	$pub->query_safe(q{PREPARE pubkey(text) AS SELECT outbox_publish('orders', jsonb_build_object('k', $1), dedup_key => $1)});
	my $bg1 = $pub->query_safe(q{EXECUTE pub('bg-1')});
	my $bgk = $pub->query_safe(q{EXECUTE pubkey('bg-key')});
	like($bg1, qr/^[0-9a-f-]{36}$/, "$round: 1.1: the session publishes");

	# ---- the upgrade, with relays live and a request in flight
	is(sq(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'grelout relay'}), '1',
		"$round: a relay is running");
	sq(q{ALTER EXTENSION grelout UPDATE TO '1.2'});
	is(sq(q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.2', "$round: upgraded to 1.2");

	# the old session's next calls
	my $bg2 = $pub->query_safe(q{EXECUTE pub('bg-2')});
	is(sq(qq{SELECT published_by::regrole FROM grelout.outbox WHERE id = '$bg2'}), 'app_pub',
		"$round: the old session publishes after the upgrade");
	is($pub->query_safe(q{EXECUTE pubkey('bg-key')}), $bgk,
		"$round: a dedup key stored under 1.1 still returns its message");
	is($pub->query_safe(qq{SELECT count(*) FROM outbox_message_status('$bg1')}), '1',
		"$round: outbox_message_status shows the session its own message");
	if ($from10)
	{
		my $l1 = sq(q{SELECT id FROM grelout.outbox WHERE dedup_key = 'l-1'});
		is($pub->query_safe(q{SELECT outbox_publish('legacy', '{"again": true}', dedup_key => 'l-1')}), $l1,
			"$round: a dedup key stored under 1.0 returns its message to any role");
	}
	$pub->quit;
	sq(q{INSERT INTO items VALUES (3, 'c'); UPDATE items SET v = 'z' WHERE id = 1});
	# the messages stored under 1.0 get an ordered handler under 1.2
	sq(qq{INSERT INTO grelout.handlers (name, topic, url, ordered)
		VALUES ('legacy', 'legacy', '@{[ $url->('/legacy') ]}', true)}) if $from10;

	# ---- every message delivered: none lost, none twice, the keys in order
	sq(q{UPDATE grelout.handlers SET enabled = true WHERE name = 'paused'});
	my $head = sq(q{SELECT message_id FROM grelout.deliveries WHERE handler = 'ord' AND state = 'dead'});
	is(sq(qq{SELECT outbox_redrive(message_id => '$head')}), '1', "$round: the ordered key's dead head is redriven");
	ok(wait_until(sub {
		sq(q{SELECT count(*) FROM grelout.outbox WHERE state NOT IN ('delivered', 'dead')}) eq '0' }, 90),
		"$round: every message is delivered or dead");
	is(state_of(q{topic = 'dead'}), 'dead', "$round: the dead message stays dead");
	is(state_of(q{topic = 'slow'}), 'delivered', "$round: the request in flight during the upgrade settled as delivered");
	is(state_of(q{topic = 'ord'}), 'delivered,delivered,delivered', "$round: the ordered key is delivered");
	my $expect = {
		'/orders' => sq(q{SELECT count(*) FROM grelout.outbox WHERE topic = 'orders'}),
		'/fan-a' => 1, '/fan-b' => 1, '/slow' => 1, '/paused' => 3, '/dead' => 1, '/items' => 4 };
	$expect->{'/legacy'} = 3 if $from10;
	is($expect->{'/orders'}, 5 + 1 + 2 + 1, "$round: orders: five, the delayed one, two of the session, its key");
	for my $path (sort keys %$expect)
	{
		my $st = $recv->stats("/$round$path");
		is("$st->{count} $st->{distinct_ids}", "$expect->{$path} $expect->{$path}",
			"$round: $path: every message received once");
	}
	my $ord = $recv->order("/$round/ord");
	is("$ord->{out_of_order} $ord->{overlaps} $ord->{delivered}{k1}", '0 0 3',
		"$round: the ordered key arrived in order, one at a time");
	if ($from10)
	{
		my $legacy = $recv->order("/$round/legacy");
		is("$legacy->{out_of_order} $legacy->{overlaps} $legacy->{delivered}{k0}", '0 0 3',
			"$round: the key stored under 1.0 arrived in order, one at a time");
	}
	my $signed = $recv->requests("/$round/orders")->[-1]{headers}{'webhook-signature'} // '';
	like($signed, qr/^v1,\S+ v1,\S+$/, "$round: the handler's secrets still sign (both, during the rotation)");

	# ---- grants kept, PUBLIC still nothing
	is(sq(q{SELECT has_function_privilege('app_ops', 'outbox_purge(interval, text, boolean, uuid)', 'EXECUTE WITH GRANT OPTION')}),
		't', "$round: EXECUTE on outbox_purge, with its grant option, kept");
	is(sq(q{SELECT has_function_privilege('app_pub', 'outbox_publish(text, jsonb, text, jsonb, interval, text)', 'EXECUTE')}),
		't', "$round: EXECUTE on outbox_publish kept");
	is(sq(q{SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text)
		FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
			AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
			AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'grelout')
		WHERE has_function_privilege('public', p.oid, 'EXECUTE')}),
		'grelout._mask_url(text),grelout._topic_matches(text,text)',
		"$round: PUBLIC may execute only the two pure helpers the views call");

	# ---- the upgraded schema equals a fresh 1.2 install's, grants included
	my %schema;
	for my $db ('app', 'fresh')
	{
		$node->command_ok([ 'pg_dump', '--schema-only', '--schema=grelout', '--schema=public',
				'--exclude-table=public.items', '-d', $db, '-f', "$dir/$round.$db.sql" ],
			"$round: pg_dump --schema-only of $db");
		# each dump has its own random \restrict key
		($schema{$db} = PostgreSQL::Test::Utils::slurp_file("$dir/$round.$db.sql")) =~ s/^\\(un)?restrict .*$//mg;
	}
	is($schema{app}, $schema{fresh}, "$round: the upgraded schema dumps exactly as a fresh 1.2 install");
	my $members = q{SELECT string_agg(pg_describe_object(classid, objid, objsubid), E'\n'
		ORDER BY pg_describe_object(classid, objid, objsubid))
		FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
		AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'grelout')};
	is(sq($members), $node->safe_psql('fresh', $members), "$round: the same extension members");
	my $initprivs = q{SELECT string_agg(pg_describe_object(i.classoid, i.objoid, i.objsubid) || ' ' || i.initprivs::text, E'\n'
		ORDER BY pg_describe_object(i.classoid, i.objoid, i.objsubid))
		FROM pg_init_privs i JOIN pg_depend d ON d.classid = i.classoid AND d.objid = i.objoid
		WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'};
	is(sq($initprivs), $node->safe_psql('fresh', $initprivs), "$round: the same initial privileges");

	# the next round starts from an empty database again
	sq(q{DROP TABLE items});
}

live_upgrade('fresh11', 0);
live_upgrade('from10', 1);

# (stopped here: the receiver stopped at global destruction would set the exit status)
$recv->stop;
$node->stop;
done_testing();
