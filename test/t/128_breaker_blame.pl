# What the breaker counts (issue 29): the endpoint's health, not what one
# message provokes.
#
# 1. Two publishing roles share a handler.  A's 12 messages are answered 400
#    (the receiver refuses their body); each fails on its own, is retried and
#    goes dead after the handler's 3 attempts; the breaker stays closed, no
#    "breaker opened" is logged, and B's message, published after A's 36
#    refusals, is delivered on its first attempt without waiting for a
#    cooldown (300 s here: before issue 29, A's refusals opened the breaker
#    and B's message waited for its probe).  409, 410, 413 and 422 do not
#    count either.
# 2. What the endpoint's fault still counts: 401, 404, 302 (redirects are not
#    followed), 429 without Retry-After, 500 and a closed port each open
#    their handler's breaker.
# 3. A probe answered 400 consumes its attempt: with a breaker open and the
#    endpoint refusing every held message with 400, each probe moves its
#    message to its next attempt, and each goes dead at max_attempts instead
#    of being handed back forever; the breaker is not re-opened (stored
#    version and cooldown unchanged), and the next delivery goes as the
#    probe, without a cooldown between them.  A 2xx probe then closes it.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT set_conf log_offset log_since);

my $threshold = 5;
my $recv = start_receiver();
my $node = grelout_node('blame',
	"grelout.workers = 1",
	"grelout.concurrency = 5",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '300s'",
	"grelout.retry_jitter = 0",
	"grelout.breaker_threshold = $threshold",
	"grelout.breaker_cooldown = '300s'",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $url, $max) = @_;
	sq("INSERT INTO grelout.handlers (name, topic, url, max_attempts)"
		  . " VALUES ('$name', '$name.t', '$url', $max)");
}

sub health
{
	return sq("SELECT breaker || '|' || consecutive_failures FROM grelout.handler_status"
		  . " WHERE handler = '$_[0]'");
}

sub status_of { return grep { ($_->{status} // 0) == $_[1] } @{ $recv->requests($_[0]) }; }

ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '1' }, 60),
	'the relay runs');

# ---- 1. one publisher's refused payloads do not open a shared breaker
sq(q{
	CREATE ROLE pub_a LOGIN;
	CREATE ROLE pub_b LOGIN;
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO pub_a, pub_b;
});
$recv->script('/shared', [], { status => 204 },
	[ { body_contains => '"bad"', response => { status => 400, body => 'malformed payload' } } ]);
handler('shared', $recv->url('/shared'), 3);
my $offset = log_offset($node);
$node->safe_psql('app',
	"SELECT count(outbox_publish('shared.t', jsonb_build_object('bad', g))) FROM generate_series(1, 12) g",
	extra_params => [ '-U', 'pub_a' ]);
ok(wait_until(sub { scalar(status_of('/shared', 400)) >= 36 }, 60),
	"A's 12 messages were refused 36 times: 3 attempts each")
  or diag('refusals: ' . scalar(status_of('/shared', 400)) . '; handler: ' . health('shared'));
my $b_id = $node->safe_psql('app', q{SELECT outbox_publish('shared.t', '{"good": 1}')},
	extra_params => [ '-U', 'pub_b' ]);
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$b_id'") eq 'delivered' }, 30),
	"B's message is delivered (well within the 300 s cooldown an open breaker would make it wait)");
is(sq("SELECT attempts FROM grelout.outbox WHERE id = '$b_id'"), '1', "B's message: on its first attempt");
ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'shared.t' AND state = 'dead'") eq '12' }, 30),
	"A's 12 messages are dead");
is(sq("SELECT string_agg(DISTINCT attempts::text || ' ' || last_error, ',') FROM grelout.outbox"
		  . " WHERE topic = 'shared.t' AND state = 'dead'"),
	'3 HTTP 400: malformed payload', 'each after its 3 attempts, with the 400 as last_error');
is(health('shared'), 'closed|0', 'the shared breaker is closed, no failure counted');
is(sq("SELECT last_error || ' ' || (last_failure_at IS NOT NULL) FROM grelout.handler_status"
		  . " WHERE handler = 'shared'"),
	'HTTP 400: malformed payload true',
	"handler_status still shows the 400 as the handler's last error, and when");
unlike(log_since($node, $offset), qr/grelout handler "shared" breaker opened/,
	'no "breaker opened" for the shared handler');
is(sq("SELECT count(*) FROM grelout.handler_health WHERE handler = 'shared'"), '0',
	'nothing stored in grelout.handler_health');

# 409, 410, 413 and 422 fail their delivery only, too
for my $status (409, 410, 413, 422)
{
	my $name = "m$status";
	$recv->script("/$name", [], { status => $status, body => 'no' });
	handler($name, $recv->url("/$name"), 1);
	sq("SELECT count(outbox_publish('$name.t', jsonb_build_object('n', g))) FROM generate_series(1, 8) g");
	ok(wait_until(sub {
		sq("SELECT count(*) FROM grelout.outbox WHERE topic = '$name.t' AND state = 'dead'") eq '8' }, 30),
		"$status: 8 messages dead after their one attempt");
	is(health($name), 'closed|0', "$status: the breaker stays closed");
}

# ---- 2. the endpoint's faults still count
my %fault = (
	e401 => { status => 401, body => 'bad credentials' },
	e404 => { status => 404 },
	e302 => { status => 302, headers => { Location => '/elsewhere' } },
	e429 => { status => 429 },
	e500 => { status => 500 },
);
for my $name (sort keys %fault)
{
	$recv->script("/$name", [], $fault{$name});
	handler($name, $recv->url("/$name"), 10);
}
handler('down', 'http://127.0.0.1:1/down', 10);
for my $name (sort(keys %fault), 'down')
{
	sq("SELECT count(outbox_publish('$name.t', jsonb_build_object('n', g))) FROM generate_series(1, 8) g");
}
for my $name (sort(keys %fault), 'down')
{
	ok(wait_until(sub { health($name) =~ /^open\|/ }, 30),
		"$name: the breaker opens") or diag("$name: " . health($name));
	is(sq("SELECT count(*) FROM grelout.outbox WHERE topic = '$name.t' AND state = 'dead'"), '0',
		"$name: no message dead (held by the breaker)");
}
$offset = log_offset($node);

# ---- 3. a probe answered 400 consumes its attempt; the next delivery probes
set_conf($node, 'grelout.breaker_cooldown' => '5s', 'grelout.retry_max' => '60s');
$recv->script('/p', [], { status => 500, body => 'down' });
handler('p', $recv->url('/p'), 3);
sq("SELECT count(outbox_publish('p.t', jsonb_build_object('n', g))) FROM generate_series(1, 5) g");
ok(wait_until(sub { health('p') =~ /^open\|/ }, 30), 'p: five 500s open the breaker');
# the endpoint is back but refuses these five payloads; a good one it takes
$recv->script('/p', [], { status => 400, body => 'refused' },
	[ { body_contains => '"good"', response => { status => 204 } } ]);
usleep(300_000);
my ($version, $cooldown) = split /\|/,
  sq("SELECT version, cooldown_ms FROM grelout.handler_health WHERE handler = 'p'");
my $before = sq("SELECT string_agg(attempts::text, ',' ORDER BY id) FROM grelout.outbox WHERE topic = 'p.t'");
note("p: attempts when the endpoint turned to 400: $before; version $version, cooldown $cooldown ms");
ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'p.t' AND state = 'dead'") eq '5' }, 60),
	'p: the five messages probed with 400 go dead instead of being held');
is(sq("SELECT string_agg(DISTINCT attempts::text || ' ' || last_error, ',') FROM grelout.outbox"
		  . " WHERE topic = 'p.t'"),
	'3 HTTP 400: refused', 'p: each after its 3 attempts: every probe consumed its attempt');
my @probes = status_of('/p', 400);
my $n_probes = scalar(@probes);
ok($n_probes >= 5 && $n_probes <= 15, "p: $n_probes probes answered 400 (5 to 15: one to three a message)");
my $gap = 0;
for my $i (1 .. $#probes)
{
	my $g = $probes[$i]{received_at} - $probes[ $i - 1 ]{done_at};
	$gap = $g if $g > $gap;
}
cmp_ok($gap, '<', 5, sprintf('p: no cooldown between the 400 probes (longest gap %.2f s, cooldown 5 s):'
		  . ' the next delivery went as the probe', $gap));
is(sq("SELECT version || '|' || cooldown_ms FROM grelout.handler_health WHERE handler = 'p'"),
	"$version|$cooldown", 'p: the breaker was not re-opened (stored version and cooldown unchanged)');
like(health('p'), qr/^open\|/, 'p: and it is still open (no 2xx yet)');
my $good = sq(q{SELECT outbox_publish('p.t', '{"good": 1}')});
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$good'") eq 'delivered' }, 30),
	'p: a message the endpoint takes is the next probe, and is delivered');
ok(wait_until(sub { health('p') eq 'closed|0' }, 10), 'p: its 2xx closes the breaker');
my $log = log_since($node, $offset);
is(scalar(() = $log =~ /grelout handler "p" breaker opened/g), 1, 'p: one "breaker opened"');
is(scalar(() = $log =~ /grelout handler "p" breaker closed/g), 1, 'p: one "breaker closed"');

$node->stop;
$recv->stop;
done_testing();
