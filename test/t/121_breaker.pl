# The circuit breaker (issue 11, live test (b)), against a live receiver.
#
# 1. An endpoint answers 500 for 20 s (CI-short for the issue's 60 s) with
#    1,000 messages pending, two relays of 5 slots, threshold 5, cooldown
#    2 s doubling up to retry_max 4 s.  During the outage it receives at
#    most threshold + the requests in flight when the breaker opened (2 x 5)
#    + the probes the cooldown schedule allows in 20 s (5); no message is
#    dead; at no moment have more than threshold attempts been consumed
#    (the requests failing after the breaker opened, probes included, give
#    their attempt back); the log has exactly one "breaker opened" WARNING
#    during the outage and one "breaker closed" LOG after it; all 1,000
#    arrive within 10 s of the endpoint recovering, with at most threshold
#    of them on a second attempt.
# 2. The breaker survives a server restart: open with an 8 s cooldown, the
#    server is stopped and started: handler_status still reads open and the
#    endpoint gets nothing before the stored probe_at, then one probe.
# 3. A 410 under an open breaker is dead at once (requests in flight when
#    it opened, and a probe), and never sent again as a probe.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT set_conf log_offset log_since);

my ($workers, $concurrency, $threshold) = (2, 5, 5);
my ($cooldown, $retry_max, $outage) = (2, 4, 20);

my $recv = start_receiver();
my $node = grelout_node('breaker',
	"grelout.workers = $workers",
	"grelout.concurrency = $concurrency",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '200ms'",
	"grelout.retry_max = '${retry_max}s'",
	"grelout.retry_jitter = 0",
	"grelout.breaker_threshold = $threshold",
	"grelout.breaker_cooldown = '${cooldown}s'",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $path) = @_;
	my $url = $recv->url($path);
	sq("INSERT INTO grelout.handlers (name, topic, url) VALUES ('$name', '$name.t', '$url')");
}

sub breaker
{
	return sq("SELECT breaker FROM grelout.handler_status WHERE handler = '$_[0]'");
}

# the probes a cooldown of C s, doubling up to M s, allows within D s of the
# breaker opening (an upper bound: it opens after the outage starts)
sub probes_allowed
{
	my ($c, $m, $d) = @_;
	my ($t, $n) = ($c, 0);
	while ($t <= $d)
	{
		$n++;
		$c = $c * 2 > $m ? $m : $c * 2;
		$t += $c;
	}
	return $n;
}

ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq "$workers" }, 60),
	"$workers relays running");

# ---- 1. a 20 s outage with 1,000 pending
$recv->script('/a', [], { status => 500, body => 'down for maintenance' });
handler('a', '/a');
my $offset = log_offset($node);
my $t_start = time();
sq("SELECT count(outbox_publish('a.t', jsonb_build_object('n', g))) FROM generate_series(1, 1000) g");

my ($max_dead, $max_attempts_sum, $seen_open) = (0, 0, 0);
while (time() < $t_start + $outage)
{
	# a claim counts its attempt at once: a request in flight (processing)
	# has its attempt counted until it is settled or handed back, so only
	# the settled rows show the attempts consumed
	my ($dead, $sum) = split /\|/,
	  sq("SELECT count(*) FILTER (WHERE state = 'dead'),"
		  . " coalesce(sum(attempts) FILTER (WHERE state <> 'processing'), 0)"
		  . " FROM grelout.outbox WHERE topic = 'a.t'");
	$max_dead = $dead if $dead > $max_dead;
	$max_attempts_sum = $sum if $sum > $max_attempts_sum;
	$seen_open = 1 if breaker('a') eq 'open';
	usleep(300_000);
}
my $log_outage = log_since($node, $offset);
my $offset_rec = log_offset($node);
$recv->script('/a', [], { status => 204 });
my $t_rec = time();

ok($seen_open, 'the breaker read open during the outage');
is($max_dead, 0, 'no message dead during the outage');
cmp_ok($max_attempts_sum, '<=', $threshold,
	"at no moment had the settled messages more than threshold attempts consumed ($max_attempts_sum)");
my @opened = ($log_outage =~ /WARNING:  grelout handler "a" breaker opened after (\d+) consecutive failures/g);
is(scalar(@opened), 1, 'one "breaker opened" WARNING during the outage');
is($opened[0], $threshold, "it names the $threshold consecutive failures") if @opened;
unlike($log_outage, qr/grelout handler "a" breaker closed/, 'no "breaker closed" during the outage');

ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'a.t' AND state = 'delivered'") eq '1000' }, 60),
	'all 1,000 delivered after the endpoint recovers');
my $took = time() - $t_rec;
cmp_ok($took, '<=', 10, sprintf('all 1,000 delivered within 10 s of the recovery (%.1f s)', $took));

my @reqs = @{ $recv->requests('/a') };
my $failed = grep { ($_->{status} // 0) == 500 } @reqs;
my $probes = probes_allowed($cooldown, $retry_max, $outage);
my $bound = $threshold + $workers * $concurrency + $probes;
cmp_ok($failed, '<=', $bound,
	"the endpoint got $failed requests during the outage: at most threshold $threshold"
	  . " + in flight at the opening " . ($workers * $concurrency) . " + $probes probes");
cmp_ok($failed, '>=', $threshold, 'and at least threshold');
note("requests during the outage: $failed; total " . scalar(@reqs));

is(sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'a.t' AND state = 'dead'"), '0',
	'no message dead');
my ($second, $max_att) = split /\|/,
  sq("SELECT count(*) FILTER (WHERE attempts > 1), max(attempts) FROM grelout.outbox WHERE topic = 'a.t'");
cmp_ok($second, '<=', $threshold,
	"at most threshold messages delivered on a second attempt ($second): the open breaker consumed none");
cmp_ok($max_att, '<=', 2, "none needed more than two attempts ($max_att)");
my $stats = $recv->stats('/a');
is($stats->{distinct_ids}, 1000, 'the receiver saw the 1,000 messages');

ok(wait_until(sub { log_since($node, $offset_rec) =~ /LOG:  grelout handler "a" breaker closed/ }, 10),
	'a "breaker closed" LOG after the recovery');
my $log_all = log_since($node, $offset);
my @closed = ($log_all =~ /grelout handler "a" breaker closed/g);
is(scalar(@closed), 1, 'exactly one "breaker closed"');
@opened = ($log_all =~ /grelout handler "a" breaker opened/g);
is(scalar(@opened), 1, 'and still exactly one "breaker opened"');
is(breaker('a'), 'closed', 'handler_status reads closed');

# ---- 2. the breaker survives a server restart
set_conf($node, 'grelout.breaker_cooldown' => '8s', 'grelout.retry_max' => '30s');
$recv->script('/r', [], { status => 500, body => 'still down' });
handler('r', '/r');
$offset = log_offset($node);
sq("SELECT count(outbox_publish('r.t', jsonb_build_object('n', g))) FROM generate_series(1, 20) g");
ok(wait_until(sub { breaker('r') eq 'open' }, 30), 'r: the breaker opens');
usleep(500_000);
my $probe_at = sq("SELECT extract(epoch FROM probe_at) FROM grelout.handler_health WHERE handler = 'r'");
my $stored = sq("SELECT breaker FROM grelout.handler_health WHERE handler = 'r'");
is($stored, 'open', 'r: stored open in grelout.handler_health');
my $n_before = $recv->count('/r');
my $t_stop = time();
note(sprintf('r: probe due %.1f s after the breaker was seen open', $probe_at - $t_stop));
$node->stop;
$node->start;
my $t_up = time();
note(sprintf('r: the restart took %.1f s', $t_up - $t_stop));
if ($t_up < $probe_at - 1)
{
	is(breaker('r'), 'open', 'r: after the restart handler_status still reads open');
}
else
{
	fail('r: the restart took too long to check the breaker before its probe time');
}
ok(wait_until(sub { time() > $probe_at + 2 }, 30), 'r: waited past the probe time');
my @all_r = @{ $recv->requests('/r') };
my @after = @all_r[ $n_before .. $#all_r ];
my @early = grep { $_->{received_at} < $probe_at - 0.05 } @after;
is(scalar(@early), 0, 'r: nothing sent after the restart before the stored probe time')
  or diag(join(' ', map { sprintf('%.2f', $_->{received_at} - $probe_at) } @early));
is(scalar(@after), 1, 'r: then one probe (it fails: open again, cooldown doubled)');
is(breaker('r'), 'open', 'r: still open after the failed probe');
my @r_opened = (log_since($node, $offset) =~ /grelout handler "r" breaker opened/g);
is(scalar(@r_opened), 1, 'r: one "breaker opened" WARNING, none again after the restart or the failed probe');
sq("DELETE FROM grelout.handlers WHERE name = 'r'");

# ---- 3. a 410 under an open breaker is dead at once and not sent again
set_conf($node, 'grelout.breaker_cooldown' => '2s', 'grelout.retry_max' => '4s');
# the first three requests are answered 410 after 1 s; the others 500 at
# once, which open the breaker while the three are still in flight
$recv->script('/g', [ ({ status => 410, body => 'gone', delay => 1.0 }) x 3 ], { status => 500 });
handler('g', '/g');
sq("SELECT count(outbox_publish('g.t', jsonb_build_object('n', g))) FROM generate_series(1, 20) g");
ok(wait_until(sub { scalar(grep { ($_->{status} // 0) == 410 } @{ $recv->requests('/g') }) == 3 }, 30),
	'g: three requests answered 410');
# the next request, a probe, is answered 410 too
$recv->script('/g', [ { status => 410, body => 'gone' } ], { status => 500 });
my @g410 = grep { ($_->{status} // 0) == 410 } @{ $recv->requests('/g') };
my $opened_at = sq("SELECT extract(epoch FROM opened_at) FROM grelout.handler_health WHERE handler = 'g'");
ok($opened_at ne '' && !grep({ $_->{done_at} < $opened_at } @g410),
	'g: the breaker had opened before the three were answered');
my @gone = map { $_->{headers}{'webhook-id'} } @g410;
my $in = join(',', map { "'$_'" } @gone);
ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE id IN ($in) AND state = 'dead'") eq '3' }, 10),
	'g: the three answered 410 under the open breaker are dead at once');
is(sq("SELECT string_agg(attempts::text, ',') FROM grelout.outbox WHERE id IN ($in)"), '1,1,1',
	'g: after one attempt each');
ok(wait_until(sub { scalar(grep { ($_->{status} // 0) == 410 } @{ $recv->requests('/g') }) == 4 }, 15),
	'g: a probe answered 410');
my ($probe410) = grep { ($_->{status} // 0) == 410 } reverse @{ $recv->requests('/g') };
my $pid410 = $probe410->{headers}{'webhook-id'};
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$pid410'") eq 'dead' }, 10),
	'g: the probe\'s message is dead at once');
my $n_g = $recv->count('/g');
ok(wait_until(sub { $recv->count('/g') > $n_g }, 15), 'g: the next probe goes out');
my %sent;
$sent{ $_->{headers}{'webhook-id'} }++ for @{ $recv->requests('/g') };
is(join(',', map { $sent{$_} } @gone, $pid410), '1,1,1,1',
	'g: no message answered 410 was sent again (not as a probe either)');
is(sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'g.t' AND state = 'dead'"), '4',
	'g: the four 410s are the only dead messages');

$node->stop;
$recv->stop;
done_testing();
