# A relay follows a backend's interrupt rules (issue 9, defects 3, 4, 5):
# - pg_cancel_backend() cancels at most a statement in progress: the relay
#   lives on, requests in flight finish and are settled once;
# - with another session holding a lock on grelout.outbox, the relay keeps
#   driving HTTP (a request in flight completes) and pg_terminate_backend()
#   stops it long before the lock is released (1.0 waited for the lock);
# - a stop hands back the claims still in flight: sent again, their
#   attempt given back, never dead-lettered "without an outcome".
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('relay_signals',
	"grelout.lease_duration = '12s'",
	"grelout.poll_interval = '500ms'");
sub sq { return $node->safe_psql('app', $_[0]); }
sub relay_pid { my @p = relay_pids($node); return @p == 1 ? $p[0] : undef; }

for my $t (qw(cancel lock once))
{
	my $url = $recv->url("/$t");
	sq("INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('$t', '$url', "
		. ($t eq 'once' ? 1 : 'NULL') . ")");
}
ok(wait_until(sub { defined relay_pid() }, 60), 'a relay runs');

# ---- cancel during a drain with slow requests in flight
my $pid = relay_pid();
$recv->script('/cancel', [], { delay => 2 });
sq("SELECT outbox_publish('cancel', jsonb_build_object('n', g)) FROM generate_series(1, 20) g");
ok(wait_until(sub { $recv->count('/cancel') >= 20 }, 60), 'cancel: requests in flight');
for (1 .. 5)
{
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	usleep(200_000);
}
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'cancel'") eq '0' }, 60),
	'cancel: every message delivered, none left processing');
is(relay_pid(), $pid, 'cancel: the same relay runs on');
my $stats = $recv->stats('/cancel');
is("$stats->{count} $stats->{distinct_ids}", '20 20', 'cancel: each message sent once');

# ---- a lock on the outbox, requests in flight, then a terminate
ok(wait_until(sub { defined relay_pid() }, 60), 'lock: a relay runs');
$pid = relay_pid();
$recv->script('/lock', [], { delay => 2 });
sq("SELECT outbox_publish('lock', jsonb_build_object('n', g)) FROM generate_series(1, 5) g");
ok(wait_until(sub { $recv->count('/lock') >= 5 }, 60), 'lock: requests in flight');
my $locker = $node->background_psql('app');
$locker->query_safe('BEGIN; LOCK TABLE grelout.outbox IN ACCESS EXCLUSIVE MODE');
my $locked_at = time();
ok(wait_until(sub {
	my $r = $recv->requests('/lock');
	(grep { defined $_->{done_at} } @$r) == 5
}, 30), 'lock: the requests in flight completed while the table was locked');
# a cancel while the relay waits for the lock cancels that wait only
ok(wait_until(sub {
	$node->safe_psql('postgres', "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid") eq 'Lock'
}, 30), 'lock: the relay waits for the lock in a cycle');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
usleep(500_000);
is(relay_pid(), $pid, 'lock: a cancel during the lock wait leaves the relay running');
my $offset = log_offset($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
my $t0 = time();
ok(wait_until(sub {
	$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0'
}, 55), 'lock: the relay exited');
my $took = time() - $t0;
cmp_ok($took, '<', 10, sprintf('lock: within %.1f s of the terminate, the lock still held', $took));
$locker->query_safe('COMMIT');
$locker->quit;
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'lock'") eq '0' }, 60),
	'lock: after the lock, everything is delivered');
like(log_since($node, $offset), qr/grelout relay 1 stopping/, 'lock: the relay logged its stop');

# ---- a stop with the only attempt of a message in flight
ok(wait_until(sub { defined relay_pid() }, 60), 'once: a relay runs again');
$pid = relay_pid();
$recv->script('/once', [ { delay => 6 } ], {});
$offset = log_offset($node);
my $once = sq("SELECT outbox_publish('once', '{}')");
ok(wait_until(sub { $recv->count('/once') >= 1 }, 60), 'once: its request is in flight');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE id = '$once'") eq '0' }, 60),
	'once: delivered by the next relay, not dead-lettered');
my $sum = $recv->summary('/once');
is(join(',', map { $_->{attempt} } @$sum), '1,1', 'once: sent again with its attempt given back');
my $log = log_since($node, $offset);
like($log, qr/stopping with 1 requests unfinished.*\n.*DETAIL:.*handed back/,
	'once: the stop log says the claim was handed back');
ok($log !~ /is dead after attempt/, 'once: nothing dead-lettered');

$node->stop;
$recv->stop;
done_testing();
