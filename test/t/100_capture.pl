# Captured tables, end to end: 10,000 rows inserted by one statement of a
# captured table reach the receiver exactly once each, with the topic, key
# and payload of their row; a rolled-back write sends nothing; the commit
# of a captured write wakes an idle relay (the poll interval is a minute);
# and pg_dump/restore keeps the capture triggers (column list, topic,
# TRUNCATE, a partitioned table's clones), which publish in the restored
# database as they did in the source, while the restore itself publishes
# nothing.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use GreloutTest;

my $n = 10_000;
my $recv = start_receiver();
# generous request timeout and lease: on a loaded machine a slow answer must
# not turn into a timeout, which would legitimately deliver a message twice
my $node = grelout_node('capture',
	"grelout.poll_interval = '60s'",
	"grelout.request_timeout = '60s'",
	"grelout.lease_duration = '120s'");
sub sq { return $node->safe_psql($_[1] // 'app', $_[0]); }

my $url = $recv->url('/bulk');
sq(qq{
	CREATE TABLE bulk (id int PRIMARY KEY, label text, created date DEFAULT '2026-01-01');
	SELECT grelout.capture('bulk');
	INSERT INTO grelout.handlers (topic, url) VALUES ('public.bulk.*', '$url');
});
ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') ne '0' }, 30),
	'the relay runs');
sleep(2);    # let it fall asleep: only a wake-up delivers within the poll interval

# ---- a commit of a captured write wakes the idle relay
my $t0 = time();
sq(q{INSERT INTO bulk VALUES (0, 'wake')});
# (within 10 s, as in 030_wake: without a wake-up the next poll is up to a
# minute away)
ok(wait_until(sub { $recv->count('/bulk') >= 1 }, 10),
	sprintf('the commit of a captured INSERT wakes the relay (%.2f s; the poll interval is a minute)',
		time() - $t0));
wait_until(sub { $recv->count('/bulk') >= 1 }, 90);    # late, if it failed
my $first = $recv->requests('/bulk')->[0] // {};
is($first->{headers}{'grelout-topic'}, 'public.bulk.insert', 'topic <schema>.<table>.insert');
is($first->{headers}{'grelout-key'}, '0', 'key: the primary key as text');
is_deeply(decode_json($first->{body}),
	{ op => 'insert', schema => 'public', table => 'bulk', old => undef,
	  new => { id => 0, label => 'wake', created => '2026-01-01' } },
	'payload: op, schema, table, new (the row as to_jsonb gives it), old null');
$recv->reset;

# ---- a rolled-back write publishes nothing
sq(q{BEGIN; INSERT INTO bulk SELECT g, 'rolled back' FROM generate_series(-100, -1) g; ROLLBACK;});
is(sq('SELECT count(*) FROM grelout.outbox'), '0', 'a rolled-back INSERT of 100 rows left no message');

# ---- 10,000 rows in one statement, each delivered exactly once
sq("INSERT INTO bulk SELECT g, 'row ' || g FROM generate_series(1, $n) g");
ok(wait_until(sub { sq('SELECT count(*) FROM grelout.outbox') eq '0' }, 600),
	'the outbox drains');
ok(wait_until(sub { $recv->count('/bulk') >= $n }, 30), "the receiver got $n requests");
my $stats = $recv->stats('/bulk');
is($stats->{count}, $n, "exactly $n requests");
is($stats->{distinct_ids}, $n, "$n distinct webhook-ids");
is($stats->{duplicated_ids}, 0, 'no message sent twice');
my %rows;
my $well_formed = 0;
for my $r (@{ $recv->summary('/bulk') })
{
	my $p = decode_json($r->{body});
	$rows{ $p->{new}{id} }++;
	$well_formed++
	  if $p->{op} eq 'insert' && $p->{table} eq 'bulk' && !defined $p->{old}
	  && $p->{new}{label} eq "row $p->{new}{id}";
}
is(scalar(grep { $rows{$_} == 1 } 1 .. $n), $n, "rows 1 to $n each arrived once");
is(scalar(keys %rows), $n, 'and no other row');
is($well_formed, $n, 'every payload is its row\'s insert');
$recv->reset;

# ---- dump and restore keep the capture triggers
sq(q{
	CREATE TABLE items (id int PRIMARY KEY, name text, stock int);
	SELECT grelout.capture('items', topic => 'shop.items',
		events => '{insert,update,truncate}', columns => '{name}');
	CREATE TABLE parts (id int, site text, v text, PRIMARY KEY (id, site)) PARTITION BY LIST (site);
	CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN ('a');
	SELECT grelout.capture('parts');
	INSERT INTO items VALUES (1, 'lamp', 3);
	INSERT INTO parts VALUES (1, 'a', 'x');
});
ok(wait_until(sub { sq('SELECT count(*) FROM grelout.outbox') eq '2' }, 30),
	'source: the two messages of the fixtures wait (no handler)');
my $triggers_sql = q{SELECT string_agg(c.relname || ': ' || pg_get_triggerdef(t.oid), E'\n' ORDER BY c.relname, t.tgname)
	FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	WHERE t.tgfoid = 'grelout._capture'::regproc};
my $triggers = sq($triggers_sql);
like($triggers, qr/parts_a: CREATE TRIGGER grelout_capture/, 'source: the partition has its clone');
my $dir = PostgreSQL::Test::Utils::tempdir();
$node->command_ok([ 'pg_dump', '-Fc', '-f', "$dir/app.dump", '-d', 'app' ], 'pg_dump -Fc of app');
sq('CREATE DATABASE app_restored', 'postgres');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'app_restored', "$dir/app.dump" ],
	'pg_restore into a new database');
is(sq($triggers_sql, 'app_restored'), $triggers,
	'restored: the same capture triggers (events, topic, columns, partition clone)');
is(sq('SELECT count(*) FROM grelout.outbox', 'app_restored'), '2',
	'restored: the undelivered messages, and none published by the restore of the rows');
sq(q{
	TRUNCATE grelout.outbox;
	INSERT INTO items VALUES (2, 'desk', 1);
	UPDATE items SET stock = 0;
	UPDATE items SET name = 'chair' WHERE id = 2;
	DELETE FROM items WHERE id = 1;
	TRUNCATE items;
	INSERT INTO parts VALUES (2, 'a', 'y');
	CREATE TABLE parts_b PARTITION OF parts FOR VALUES IN ('b');
	INSERT INTO parts VALUES (3, 'b', 'z');
}, 'app_restored');
is(sq(q{SELECT string_agg(topic || ' ' || coalesce(key, '-') || ' ' || (payload - 'schema')::text, E'\n' ORDER BY id)
	FROM grelout.outbox}, 'app_restored'),
	join("\n",
		'shop.items.insert 2 {"op": "insert", "new": {"name": "desk"}, "old": null, "table": "items"}',
		'shop.items.update 2 {"op": "update", "new": {"name": "chair"}, "old": {"name": "desk"}, "table": "items"}',
		'shop.items.truncate - {"op": "truncate", "new": null, "old": null, "table": "items"}',
		'public.parts.insert [2, "a"] {"op": "insert", "new": {"v": "y", "id": 2, "site": "a"}, "old": null, "table": "parts"}',
		'public.parts.insert [3, "b"] {"op": "insert", "new": {"v": "z", "id": 3, "site": "b"}, "old": null, "table": "parts"}'),
	'restored: the triggers publish as in the source (column list, uncaptured update and delete, truncate, a new partition)');

$node->stop;
$recv->stop;
done_testing();
