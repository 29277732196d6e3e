# Fair slots (issue 11, live test (a)), against a live receiver, with the
# breaker off (grelout.breaker_threshold = 0) so that only the slots
# protect.  Endpoint A hangs until the request timeout (3 s) with a backlog
# of 2,000; once A holds every slot of the relay, B's 200 messages are
# committed: every one arrives within 2 s of the commit (the commit time is
# taken in the database right before COMMIT, the arrival at the receiver).
# Meanwhile the relay's requests in flight (grelout.relays, sampled) stay at
# most concurrency + 1 (B, with due work and nothing in flight, gets one
# request) and never above twice concurrency; once B is done, A holds every
# slot again, and keeps getting requests as its own adaptive limit allows
# (issue 32: each round of its timeouts halves it, so not every slot any
# more).  Then a 429 and a 503 with Retry-After pause their whole
# handler: no other message of it is sent before the pause ends.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT set_conf);

my $concurrency = 10;
my $recv = start_receiver();
my $node = grelout_node('fair_slots',
	"grelout.workers = 1",
	"grelout.concurrency = $concurrency",
	"grelout.request_timeout = '3s'",
	"grelout.breaker_threshold = 0",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '5s'",
	"grelout.retry_jitter = 0");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $path) = @_;
	my $url = $recv->url($path);
	sq("INSERT INTO grelout.handlers (name, topic, url) VALUES ('$name', '$name.t', '$url')");
}

sq('CREATE TABLE commits (batch int PRIMARY KEY, at double precision)');
ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '1' }, 60),
	'one relay running');

my $bg = $node->background_psql('app');
my $max_in_flight = 0;
sub in_flight
{
	my $v = $bg->query_safe('SELECT coalesce(max(in_flight), 0) FROM grelout.relays');
	$v =~ s/\s+//g;
	$max_in_flight = $v if $v > $max_in_flight;
	return $v;
}

# ---- A hangs until the timeout with a backlog of 2,000
$recv->script('/a', [], { delay => 30, watch_hangup => JSON::PP::true });
$recv->script('/b', [], { status => 204 });
handler('a', '/a');
handler('b', '/b');
sq("SELECT count(outbox_publish('a.t', jsonb_build_object('n', g))) FROM generate_series(1, 2000) g");
ok(wait_until(sub { in_flight() == $concurrency && $recv->count('/a') >= $concurrency }, 30),
	"A holds every slot of the relay ($concurrency requests hanging)");

# ---- B's 200 messages committed now: they must not wait for A's timeouts
sq(q{
	BEGIN;
	SELECT count(outbox_publish('b.t', jsonb_build_object('n', g))) FROM generate_series(1, 200) g;
	INSERT INTO commits VALUES (1, extract(epoch FROM clock_timestamp()));
	COMMIT;
});
my $t_commit = sq('SELECT at FROM commits WHERE batch = 1');
ok(wait_until(sub { in_flight(); $recv->count('/b') >= 200 }, 60), "B's 200 messages arrive");
my @b = @{ $recv->summary('/b') };
my %ids = map { $_->{id} => 1 } @b;
is(scalar(keys %ids), 200, 'B: 200 distinct messages');
my @lat = sort { $a <=> $b } map { $_->{received_at} - $t_commit } @b;
note(sprintf('B: first %.3f s, median %.3f s, last %.3f s after the commit',
	$lat[0], $lat[$#lat / 2], $lat[-1]));
cmp_ok($lat[-1], '<=', 2.0,
	sprintf("every B message arrived within 2 s of its commit (the last after %.2f s)", $lat[-1]));
my $a_done = $recv->count('/a');
cmp_ok($a_done, '<', 2000, "A's backlog was still there meanwhile ($a_done requests of A so far)");

# ---- A takes every slot again once B is done
ok(wait_until(sub { in_flight() == $concurrency }, 10),
	'once B is done, A holds every slot again');
my $a_then = $recv->count('/a');
# as many as its adaptive limit allows: each round of timeouts halves it
# (issue 32), where before it took every slot again
ok(wait_until(sub { in_flight(); $recv->count('/a') >= $a_then + 1 }, 10),
	'and A keeps getting requests started');
# a few more samples of the relay's in flight
for (1 .. 20) { in_flight(); usleep(100_000); }
cmp_ok($max_in_flight, '<=', $concurrency + 1,
	"the relay's requests in flight stayed at most concurrency + 1 ($max_in_flight sampled)");
cmp_ok($max_in_flight, '<=', 2 * $concurrency, 'never above twice concurrency');
cmp_ok($recv->stats('/a')->{max_in_flight}, '<=', 2 * $concurrency,
	"the receiver never saw more than twice concurrency of A's requests at once");
$bg->quit;

sq("DELETE FROM grelout.handlers WHERE name = 'a'");
ok(wait_until(sub { sq('SELECT coalesce(max(in_flight), 0) FROM grelout.relays') eq '0' }, 10),
	'A deleted: its requests end');

# ---- a 429 or 503 with Retry-After pauses the whole handler
$recv->script('/c', [ { status => 429, headers => { 'Retry-After' => '3' } } ], { status => 204 });
$recv->script('/d', [ { status => 503, headers => { 'Retry-After' => '3' } } ], { status => 204 });
handler('c', '/c');
handler('d', '/d');
my $c1 = sq("SELECT outbox_publish('c.t', '{\"n\": 1}')");
my $d1 = sq("SELECT outbox_publish('d.t', '{\"n\": 1}')");
ok(wait_until(sub {
	sq("SELECT string_agg(state || ' ' || last_status, ',' ORDER BY topic) FROM grelout.outbox"
		. " WHERE id IN ('$c1', '$d1')") eq 'pending 429,pending 503' }, 30),
	'the first message of c got 429 and of d 503, with Retry-After: 3');
sq("SELECT outbox_publish(t, jsonb_build_object('n', g)) FROM generate_series(2, 4) g,"
	. " (VALUES ('c.t'), ('d.t')) AS v(t)");
ok(wait_until(sub { $recv->count('/c') >= 5 && $recv->count('/d') >= 5 }, 30),
	'c and d: the four messages each (and the retry of the first) are delivered');
for my $h ('c', 'd')
{
	my @r = @{ $recv->requests("/$h") };
	my $until = $r[0]{done_at} + 3;
	my @early = grep { $_->{received_at} < $until - 0.05 } @r[ 1 .. $#r ];
	is(scalar(@early), 0, "$h: no message of the handler was sent before its Retry-After pause ended")
	  or diag(join(' ', map { sprintf('%.2f', $_->{received_at} - $r[0]{done_at}) } @early));
}

$node->stop;
$recv->stop;
done_testing();
