# One write a delivery while every slot is taken (issue 11): a backlog of
# new messages to one handler whose endpoint answers at once is routed and
# claimed in one UPDATE a message, also while the relay's slots are all in
# flight.  A relay routes new messages ahead of its free slots (to find a
# handler with nothing in flight behind another's backlog) only while its
# slots are stuck, after a wake-up, or while that finds work; routing ahead
# while requests keep finishing made a quarter of a single-handler drain's
# deliveries take a second write (routed, then claimed), and this test
# counted 7,619 updates for its 4,000 messages (4,200 to 4,300 since).  The outbox's update count
# (pg_stat_user_tables) over the drain is at most 25% above the messages:
# each routed-ahead batch of grelout.batch_size adds its size.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT set_conf);

my $n = 4000;
my $recv = start_receiver();
my $node = grelout_node('one_write',
	"grelout.workers = 1",
	"grelout.concurrency = 10",
	"grelout.batch_size = 100",
	"grelout.request_timeout = '60s'",
	"grelout.lease_duration = '120s'");
my $url = $recv->url('/one');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('one', '$url')");
ok(wait_until(sub {
	$node->safe_psql('app', 'SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '1' }, 60),
	'one relay running');

# the counts of the outbox's writes so far, once the relays' statistics are in
sub writes
{
	return split /\|/, $node->safe_psql('app',
		"SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables"
		. " WHERE relid = 'grelout.outbox'::regclass");
}

set_conf($node, 'grelout.relay' => 'off');
$node->safe_psql('app',
	"SELECT count(outbox_publish('one', jsonb_build_object('n', g))) FROM generate_series(1, $n) g");
my (undef, $upd0, $del0) = writes();
set_conf($node, 'grelout.relay' => 'on');

ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 300),
	'the outbox drains');
is($recv->count('/one'), $n, "the receiver got $n requests");
# the relay reports its statistics after its commits, at most once a second
ok(wait_until(sub { my (undef, undef, $d) = writes(); $d - $del0 >= $n }, 30),
	"the statistics count $n deleted deliveries");
my (undef, $upd1) = writes();
my $updates = $upd1 - $upd0;
diag("$updates updates of the outbox for $n messages");
cmp_ok($updates, '>=', $n, "every message was updated at least once ($updates updates)");
cmp_ok($updates, '<=', int($n * 1.25),
	"routed and claimed in one write: $updates updates for $n messages");
is($node->safe_psql('app', 'SELECT retried + dead_lettered FROM grelout.relays'), '0',
	'no retry, no dead letter');

$node->stop;
$recv->stop;
done_testing();
