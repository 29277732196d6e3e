# Per-handler caps over all relays (issue 11, live tests (c) and (e)), with
# four relays of 10 slots each.  A slow endpoint (0.3 s an answer) whose
# handler has max_in_flight = 3 never has more than 3 requests in flight at
# once, counted at the receiver from each request's arrival to its answer
# (or to the client hanging up), and is back at 3 after a relay is
# terminated mid-run (the cap is neither exceeded nor leaked).  A handler
# with max_per_second = 5 gets its requests at that rate: in any window of
# w seconds at most 5 + 5w (token bucket, burst = the rate) + 1 of slack,
# and at most 5 + 1 in any 1 s window once the burst is spent, also across
# the terminated relay.  An open breaker stays open across
# pg_terminate_backend of every relay: nothing is sent before its stored
# probe time, then one probe.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT relay_pids);

my $workers = 4;
my $recv = start_receiver();
my $node = grelout_node('caps',
	"grelout.workers = $workers",
	"grelout.concurrency = 10",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '30s'",
	"grelout.retry_jitter = 0",
	"grelout.breaker_threshold = 5",
	"grelout.breaker_cooldown = '6s'");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $path, $extra) = @_;
	my $url = $recv->url($path);
	my ($cols, $vals) = ('', '');
	for my $c (sort keys %{ $extra // {} })
	{
		$cols .= ", $c";
		$vals .= ", $extra->{$c}";
	}
	sq("INSERT INTO grelout.handlers (name, topic, url$cols)"
		. " VALUES ('$name', '$name.t', '$url'$vals)");
}

# the most requests in flight at once among REQUESTS (from arrival to
# answer or hang-up)
sub max_overlap
{
	my @ev;
	for my $r (@_)
	{
		push @ev, [ $r->{received_at}, 1 ], [ $r->{done_at} // 9e9, -1 ];
	}
	# at the same instant an end comes before a start
	@ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev;
	my ($n, $max) = (0, 0);
	for my $e (@ev)
	{
		$n += $e->[1];
		$max = $n if $n > $max;
	}
	return $max;
}

sub new_relays
{
	my @old = @_;
	return wait_until(sub {
		my @now = relay_pids($node);
		@now == $workers && !grep { my $p = $_; grep { $_ == $p } @old } @now;
	}, 60);
}

ok(wait_until(sub { scalar(relay_pids($node)) == $workers }, 60), "$workers relays running");

# ---- max_in_flight = 3 and max_per_second = 5, a relay terminated mid-run
$recv->script('/slow', [], { delay => 0.3, watch_hangup => JSON::PP::true });
$recv->script('/rate', [], { status => 204 });
handler('slow', '/slow', { max_in_flight => 3 });
handler('rate', '/rate', { max_per_second => 5 });
sq("SELECT count(outbox_publish('slow.t', jsonb_build_object('n', g))) FROM generate_series(1, 60) g");
sq("SELECT count(outbox_publish('rate.t', jsonb_build_object('n', g))) FROM generate_series(1, 30) g");

ok(wait_until(sub { $recv->count('/slow') >= 12 }, 30), 'slow: requests under way');
my $victim = sq('SELECT pid FROM grelout.relays WHERE in_flight > 0 ORDER BY in_flight DESC LIMIT 1')
  || (relay_pids($node))[0];
my @before = relay_pids($node);
my $t_kill = time();
is(sq("SELECT pg_terminate_backend($victim)"), 't', "a relay terminated mid-run (pid $victim)");
ok(wait_until(sub {
	my @now = relay_pids($node);
	@now == $workers && !grep { $_ == $victim } @now }, 60),
	'the relay is started again');

ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE topic IN ('slow.t', 'rate.t')") eq '0' }, 90),
	'slow and rate: every message delivered');

my @slow = @{ $recv->requests('/slow') };
cmp_ok(scalar(@slow), '>=', 60, 'slow: the 60 messages were sent (' . scalar(@slow) . ' requests)');
my $most = $recv->stats('/slow')->{max_in_flight};
cmp_ok($most, '<=', 3, "slow: never more than 3 requests in flight at the receiver ($most)");
cmp_ok(max_overlap(@slow), '<=', 3, 'slow: so say the requests\' times');
my @late = grep { $_->{received_at} > $t_kill + 1 } @slow;
cmp_ok(scalar(@late), '>=', 15, 'slow: enough requests after the terminate to judge it');
is(max_overlap(@late), 3, 'slow: after the terminate, 3 in flight again (the cap did not leak)');

my @t = sort { $a <=> $b } map { $_->{received_at} } @{ $recv->summary('/rate') };
is(scalar(@t), 30, 'rate: 30 requests');
my ($worst, $worst_w, $worst_1s) = (-1e9, '', 0);
for my $i (0 .. $#t)
{
	for my $j ($i .. $#t)
	{
		my $n = $j - $i + 1;
		my $excess = $n - (5 + 5 * ($t[$j] - $t[$i]));
		if ($excess > $worst)
		{
			$worst = $excess;
			$worst_w = sprintf('%d requests in %.2f s', $n, $t[$j] - $t[$i]);
		}
	}
	# once the burst of 5 is spent: at most 5 (+1) in any 1 s window
	next if $i < 5;
	my $n = grep { $_ >= $t[$i] && $_ < $t[$i] + 1 } @t;
	$worst_1s = $n if $n > $worst_1s;
}
my $rate_times = 'rate: request times from the first (the relay was terminated at '
  . sprintf('%.2f', $t_kill - $t[0]) . '): ' . join(' ', map { sprintf('%.2f', $_ - $t[0]) } @t);
cmp_ok($worst, '<=', 1,
	"rate: every window of w s has at most 5 + 5w requests, +1 (closest: $worst_w)")
  or diag($rate_times);
cmp_ok($worst_1s, '<=', 6, "rate: after the burst, at most 5 (+1) in any 1 s window ($worst_1s)");
cmp_ok($t[-1] - $t[0], '>=', (30 - 5) / 5 - 0.3,
	sprintf('rate: the 30 took at least (30 - 5) / 5 s (%.2f s)', $t[-1] - $t[0]));

# ---- an open breaker across pg_terminate_backend of every relay
$recv->script('/brk', [], { status => 500, body => 'down' });
handler('brk', '/brk');
sq("SELECT count(outbox_publish('brk.t', jsonb_build_object('n', g))) FROM generate_series(1, 20) g");
ok(wait_until(sub { sq("SELECT breaker FROM grelout.handler_status WHERE handler = 'brk'") eq 'open' }, 30),
	'brk: the breaker opens');
usleep(500_000);
my $probe_at = sq("SELECT extract(epoch FROM probe_at) FROM grelout.handler_health WHERE handler = 'brk'");
my $n0 = $recv->count('/brk');
@before = relay_pids($node);
is(sq("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
		. " FROM pg_stat_activity WHERE backend_type = 'grelout relay'"), "$workers",
	'brk: every relay terminated');
ok(new_relays(@before), 'brk: the relays are started again');
if (time() < $probe_at - 0.5)
{
	is(sq("SELECT breaker FROM grelout.handler_status WHERE handler = 'brk'"), 'open',
		'brk: still open after the relays were terminated');
}
else
{
	fail('brk: the relays took too long to come back to check the breaker before its probe time');
}
ok(wait_until(sub { time() > $probe_at + 2 }, 30), 'brk: waited past the probe time');
my @all = @{ $recv->requests('/brk') };
my @after = @all[ $n0 .. $#all ];
my @early = grep { $_->{received_at} < $probe_at - 0.05 } @after;
is(scalar(@early), 0, 'brk: nothing sent before the stored probe time')
  or diag(join(' ', map { sprintf('%.2f', $_->{received_at} - $probe_at) } @early));
is(scalar(@after), 1, 'brk: then one probe');

$node->stop;
$recv->stop;
done_testing();
