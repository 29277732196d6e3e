# Adaptive concurrency (issue 32): each handler's limit of requests in
# flight grows while its answers stay timely and healthy, and falls when
# they slow down or fail.  One relay with the default grelout.concurrency
# (a safety bound in the thousands), the breaker off so that only the limit
# protects.  A receiver that holds each request 200 ms, with a backlog:
# the handler's limit (grelout.metrics(), grelout_handler_concurrency_limit)
# and the requests the receiver holds at once grow well past the old
# default of 50 slots.  Then the endpoint answers in 2 s: the limit falls
# to less than half of what it was; then it answers 503: the limit falls
# to a few requests.  An endpoint with a knee (40 workers, the rest
# queue) keeps a limit near it, and no request to it times out.
# Behaviour only: no assertion on speed.  The relay
# raised its open-file limit for its bound (/proc/PID/limits); where the
# hard limit cannot hold grelout.concurrency = 10000, the relay says so in
# the log and keeps to what it holds.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT set_conf log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('adaptive_limit',
	"grelout.workers = 1",
	"grelout.request_timeout = '20s'",
	"grelout.lease_duration = '60s'",
	"grelout.breaker_threshold = 0",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '1s'",
	"grelout.retry_jitter = 0",
	"grelout.max_attempts = 100000");

sub sq { return $node->safe_psql('app', $_[0]); }

my $bg = $node->background_psql('app');

# limit([HANDLER, METRIC]): the handler's adaptive limit (or another of
# its metrics), as grelout.metrics() shows it
sub limit
{
	my ($h, $m) = @_;
	$h //= 's';
	$m //= 'grelout_handler_concurrency_limit';
	my $v = $bg->query_safe("SELECT coalesce(max(value), -1) FROM grelout.metrics()"
		  . " WHERE handler = '$h' AND metric = '$m'");
	$v =~ s/\s+//g;
	return $v;
}

# poll(CODE, SECONDS): CODE every 300 ms until true (a gentler pace than
# wait_until: the receiver is busy)
sub poll
{
	my ($code, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		return 1 if $code->();
		usleep(300_000);
	}
	return 0;
}

is(sq('SHOW grelout.concurrency'), '2000', 'grelout.concurrency defaults to 2000');
ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '1' }, 60),
	'one relay running');

# ---- a slow, healthy endpoint (200 ms an answer) with a backlog
$recv->script('/s', [], { status => 204, delay => 0.2 });
my $url = $recv->url('/s');
sq("INSERT INTO grelout.handlers (name, topic, url) VALUES ('s', 's.t', '$url')");
sq("SELECT count(outbox_publish('s.t', jsonb_build_object('n', g))) FROM generate_series(1, 40000) g");

my $peak = 0;
ok(poll(sub { my $l = limit(); $peak = $l if $l > $peak; $peak >= 200 }, 120),
	"the limit grows past the old default of 50 slots ($peak)");
my $held = 0;
ok(poll(sub { $held = $recv->stats('/s')->{max_in_flight}; $held >= 150 }, 60),
	"the receiver held $held requests at once (at least 150)");
cmp_ok($held, '<=', 2000, 'never more than grelout.concurrency');
for (1 .. 5) { my $l = limit(); $peak = $l if $l > $peak; usleep(300_000); }
{
	my $rpid = sq('SELECT pid FROM grelout.relays WHERE pid IS NOT NULL');
	my ($rss) = slurp_file("/proc/$rpid/status") =~ /^VmRSS:\s+(\d+ kB)/m;
	my $in_flight = sq("SELECT value FROM grelout.metrics() WHERE handler = 's'"
		. " AND metric = 'grelout_handler_in_flight'");
	note("limit at its peak: $peak; relay resident memory $rss with $in_flight requests in flight");
}

# ---- the endpoint slows down (2 s an answer, ten times its baseline)
$recv->script('/s', [], { status => 204, delay => 2 });
my $slow = $peak;
ok(poll(sub { $slow = limit(); $slow <= $peak / 2 }, 60),
	"answering in 2 s, the limit falls below half its peak ($slow of $peak)");
cmp_ok($slow, '>=', 1, 'and stays at least 1');

# ---- the endpoint answers 503
$recv->script('/s', [], { status => 503 });
my $failing = $slow;
ok(poll(sub { $failing = limit(); $failing <= 10 }, 90),
	"answering 503, the limit falls to a few requests ($failing)");
$recv->reset;
$recv->script('/s', [], { status => 503 });
usleep(1_500_000);
my $held_503 = $recv->stats('/s')->{max_in_flight};
cmp_ok($held_503, '<=', 20,
	"while it answers 503 the receiver gets few requests at once ($held_503)");

# ---- healthy again: the backlog is delivered
sq("DELETE FROM grelout.outbox WHERE topic = 's.t' AND state = 'pending'");
$recv->script('/s', [], { status => 204 });
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 's.t'") eq '0' }, 120),
	'healthy again, the deliveries in flight end');
is(sq("SELECT count(*) FROM grelout.outbox WHERE state = 'dead'"), '0', 'nothing dead');

# ---- an endpoint with a knee: 40 workers of 100 ms, the rest wait their
# turn (latency climbs with the load past 40 in flight); its timeout 3 s,
# which 2000 requests in flight (5 s each) would all exceed
$recv->script('/q', [], { status => 204, delay => 0.1, workers => 40 });
my $qurl = $recv->url('/q');
sq("INSERT INTO grelout.handlers (name, topic, url, timeout) VALUES ('q', 'q.t', '$qurl', '3s')");
sq("SELECT count(outbox_publish('q.t', jsonb_build_object('n', g))) FROM generate_series(1, 20000) g");
ok(poll(sub { limit('q') > 0 && $recv->count('/q') >= 200 }, 60), 'the queueing endpoint is being delivered');
my ($q_most, $q_last) = (0, 0);
my $t_end = time() + 15;
while (time() < $t_end)
{
	$q_last = limit('q');
	$q_most = $q_last if $q_last > $q_most;
	usleep(300_000);
}
note("queueing endpoint: limit at most $q_most, last $q_last; the receiver held "
	. $recv->stats('/q')->{max_in_flight} . " at once");
cmp_ok($q_most, '<=', 400, "its limit stays near its knee of 40, far from 2000 (at most $q_most)");
cmp_ok($q_last, '<=', 200, "and settles there ($q_last)");
is(limit('q', 'grelout_handler_retried_total'), '0', 'no request to it timed out (nothing retried)');
cmp_ok(limit('q', 'grelout_handler_delivered_total'), '>=', 1000, 'while it is delivered');
sq("DELETE FROM grelout.outbox WHERE topic = 'q.t' AND state = 'pending'");

# ---- the relay's open-file limit
my $pid = sq('SELECT pid FROM grelout.relays WHERE pid IS NOT NULL');
my ($soft, $hard) = slurp_file("/proc/$pid/limits") =~ /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/m;
my $need = 4 * 2000 + 256;
ok($soft eq 'unlimited' || $soft >= $need || $soft eq $hard,
	"the relay raised its open-file limit for 2000 requests in flight ($soft, hard $hard)");
SKIP:
{
	skip "the hard open-file limit ($hard) holds grelout.concurrency = 10000", 2
	  if $hard eq 'unlimited' || $hard >= 4 * 10000 + 256;
	my $most = int(($hard - 256) / 4);
	my $offset = log_offset($node);
	set_conf($node, 'grelout.concurrency' => '10000');
	ok(wait_until(sub { log_since($node, $offset) =~ /can have at most (\d+) requests in flight/ }, 30),
		'the relay says in the log that its hard open-file limit caps it');
	like(log_since($node, $offset),
		qr/can have at most $most requests in flight, fewer than grelout\.concurrency \(10000\).*\n.*DETAIL:  Its open-file limit is $hard, capped by the hard limit.*\n.*HINT:  Raise the hard open-file limit/,
		"it keeps to $most, with the limit and a hint");
}

$bg->quit;
$node->stop;
$recv->stop;
done_testing();
