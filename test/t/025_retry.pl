# Failed attempts against a live receiver: retry with exponential backoff
# then success, dead-letter then redrive, 410 (dead at once, also with
# grelout.dead_letter off), Retry-After on 429 and 503 (seconds, HTTP date,
# capped by retry_max), a timeout, a refused connection, and last_error kept
# short for huge or endless error bodies.  Each outcome is checked in the
# row, on the receiver and in the server log.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT set_conf);

my $recv = start_receiver();
my $node = grelout_node('retry',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.retry_max = '5s'",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($topic, $url, %extra) = @_;
	my $cols = join('', map { ", $_" } sort keys %extra);
	my $vals = join('', map { ", $extra{$_}" } sort keys %extra);
	sq("INSERT INTO grelout.handlers (topic, url$cols) VALUES ('$topic', '$url'$vals)");
}

sub publish { return sq("SELECT outbox_publish('$_[0]', '{\"t\": \"$_[0]\"}')"); }

sub row
{
	my ($id) = @_;
	my @f = split /\|/, sq("SELECT state, attempts, coalesce(last_error, ''),
		dead_at IS NOT NULL, delivered_at IS NOT NULL FROM grelout.outbox WHERE id = '$id'"), -1;
	return { state => $f[0] // '', attempts => $f[1], last_error => $f[2],
		dead => $f[3], delivered => $f[4] };
}

sub state_is
{
	my ($id, $state, $timeout) = @_;
	return wait_until(sub { row($id)->{state} eq $state }, $timeout // 30);
}

# gaps between consecutive requests on a path, in seconds
sub gaps
{
	my ($path) = @_;
	my $reqs = $recv->summary($path);
	return map { $reqs->[$_]{received_at} - $reqs->[ $_ - 1 ]{received_at} } 1 .. $#$reqs;
}

my $closed_port = PostgreSQL::Test::Cluster::get_free_port();

# ---- everything of the first round is published at once
$recv->script('/flaky', [ ({ status => 500, body => "boom: upstream on fire\n" }) x 4 ], {});
handler('flaky', $recv->url('/flaky'));
$recv->script('/dead', [], { status => 500, body => 'nope' });
handler('dead', $recv->url('/dead'), max_attempts => 3);
$recv->script('/gone', [], { status => 410, body => 'gone for good' });
handler('gone', $recv->url('/gone'));
$recv->script('/ra429', [ { status => 429, headers => { 'Retry-After' => '2' } } ], {});
handler('ra429', $recv->url('/ra429'));
$recv->script('/radate', [ { status => 503, retry_after_date => 4 } ], {});
handler('radate', $recv->url('/radate'));
$recv->script('/racap', [ { status => 503, headers => { 'Retry-After' => '3600' } } ], {});
handler('racap', $recv->url('/racap'));
$recv->script('/ra500', [ { status => 500, headers => { 'Retry-After' => '3600' } } ], {});
handler('ra500', $recv->url('/ra500'));
$recv->script('/slow', [ { delay => 3 } ], {});
handler('slow', $recv->url('/slow'), timeout => q{'500ms'});
$recv->script('/huge', [], { status => 500, size => 200000 });
handler('huge', $recv->url('/huge'), max_attempts => 1);
$recv->script('/endless', [], { status => 500, endless => JSON::PP::true });
handler('endless', $recv->url('/endless'), max_attempts => 1);
handler('refused', "http://127.0.0.1:$closed_port/nothing", max_attempts => 1);
# every 2xx is a delivery; any other 4xx than 410 is retried
for my $code (200, 202, 299, 400, 404)
{
	$recv->script("/s$code", [], { status => $code, body => "answer $code" });
	handler("s$code", $recv->url("/s$code"), max_attempts => 2);
}

my $stats0 = sq('SELECT retried, dead_lettered FROM grelout.relays');
my %id;
$id{$_} = publish($_)
  for qw(flaky dead gone ra429 radate racap ra500 slow huge endless refused
	s200 s202 s299 s400 s404);

# ---- status codes
for my $code (200, 202, 299)
{
	ok(state_is($id{"s$code"}, 'delivered'), "HTTP $code: delivered");
	is(row($id{"s$code"})->{attempts}, 1, "HTTP $code: on the first attempt");
}
for my $code (400, 404)
{
	ok(state_is($id{"s$code"}, 'dead'), "HTTP $code: dead after its attempts");
	is(row($id{"s$code"})->{attempts} . ' ' . $recv->count("/s$code"), '2 2',
		"HTTP $code: retried, not dead at once");
	is(row($id{"s$code"})->{last_error}, "HTTP $code: answer $code", "HTTP $code: last_error");
}

# ---- retry, then success
ok(state_is($id{flaky}, 'delivered'), 'flaky: delivered after failures');
my $row = row($id{flaky});
is($row->{attempts}, 5, 'flaky: attempts counts all five attempts');
like($row->{last_error}, qr/^HTTP 500: boom: upstream on fire\s*$/,
	'flaky: last_error has the status and the start of the body');
unlike($row->{last_error}, qr/[\r\n]/, 'flaky: last_error holds no line break from the body');
my $reqs = $recv->requests('/flaky');
is(scalar @$reqs, 5, 'flaky: five requests');
is(join(',', map { $_->{headers}{'grelout-attempt'} } @$reqs), '1,2,3,4,5',
	'flaky: grelout-attempt counts up');
is(scalar(grep { $_->{headers}{'webhook-id'} eq $id{flaky} } @$reqs), 5,
	'flaky: the same webhook-id on every attempt');
my @g = gaps('/flaky');
my @min = (0.1, 0.2, 0.4, 0.8);
ok(!grep({ $g[$_] < $min[$_] - 0.005 } 0 .. 3),
	'flaky: each retry waits at least retry_base * 2^(attempts-1): '
	  . join(' ', map { sprintf '%.2f', $_ } @g));

# ---- dead-letter
ok(state_is($id{dead}, 'dead'), 'dead: dead after max_attempts');
$row = row($id{dead});
is($row->{attempts}, 3, 'dead: three attempts');
is($row->{dead}, 't', 'dead: dead_at is set');
is($row->{last_error}, 'HTTP 500: nope', 'dead: last_error');
is($recv->count('/dead'), 3, 'dead: the receiver got exactly max_attempts requests');
is(sq("SELECT dead FROM grelout.status WHERE topic = 'dead'"), '1', 'dead: grelout.status counts it');

# ---- 410
ok(state_is($id{gone}, 'dead'), '410: dead');
$row = row($id{gone});
is($row->{attempts}, 1, '410: dead after the first attempt');
is($row->{last_error}, 'HTTP 410: gone for good', '410: last_error');
is($recv->count('/gone'), 1, '410: one request only');

# ---- Retry-After
ok(state_is($id{ra429}, 'delivered'), '429: delivered on retry');
@g = gaps('/ra429');
ok(@g == 1 && $g[0] >= 2.0, sprintf('429 Retry-After: 2 not retried before 2 s (%.2f s)', $g[0] // -1));
ok(state_is($id{radate}, 'delivered'), '503 with an HTTP-date Retry-After: delivered on retry');
@g = gaps('/radate');
ok(@g == 1 && $g[0] >= 2.0,
	sprintf('503 Retry-After: <date 4 s ahead> not retried before 2 s (%.2f s)', $g[0] // -1));
ok(state_is($id{racap}, 'delivered', 60), '503 Retry-After: 3600 is capped by retry_max and delivered');
@g = gaps('/racap');
ok(@g == 1 && $g[0] >= 5.0,
	sprintf('503 Retry-After: 3600 waited at least retry_max = 5 s (%.2f s)', $g[0] // -1));
ok(state_is($id{ra500}, 'delivered'), '500 with Retry-After: delivered on retry');

# ---- timeout
ok(state_is($id{slow}, 'delivered'), 'timeout: delivered on a later attempt');
$row = row($id{slow});
# the second attempt is answered at once; only a badly loaded machine could
# make it time out too
cmp_ok($row->{attempts}, '>=', 2, 'timeout: the timed-out attempt was retried');
my $slow_retries = $row->{attempts} - 1;
like($row->{last_error}, qr/^timed out after 500 ms/, 'timeout: last_error says it timed out');

# ---- transport error and huge bodies
ok(state_is($id{refused}, 'dead'), 'refused connection: dead after its one attempt');
like(row($id{refused})->{last_error}, qr/^could not connect/, 'refused connection: last_error');
ok(state_is($id{huge}, 'dead'), 'huge error body: dead after its one attempt');
$row = row($id{huge});
like($row->{last_error}, qr/^HTTP 500: y{20}/, 'huge error body: last_error has status and body start');
cmp_ok(length($row->{last_error}), '<=', 512, 'huge error body: last_error is bounded');
ok(state_is($id{endless}, 'dead'), 'endless error body: dead after its one attempt');
$row = row($id{endless});
like($row->{last_error}, qr/^HTTP 500: x{20}/,
	'endless error body: the read stops early and the status is kept (no timeout)');
cmp_ok(length($row->{last_error}), '<=', 512, 'endless error body: last_error is bounded');

# ---- the server log and the relay counters
my $log = slurp_file($node->logfile);
for my $n (1 .. 4)
{
	my $secs = sprintf('%.1f', 0.1 * 2**($n - 1));
	like($log,
		qr/WARNING:  grelout message \Q$id{flaky}\E of topic "flaky" failed on attempt $n, retrying in \Q$secs\E s\n.*DETAIL:  HTTP 500: boom/,
		"log: WARNING for attempt $n of flaky with id, topic, backoff $secs s and error");
}
like($log, qr/WARNING:  grelout message \Q$id{dead}\E of topic "dead" is dead after attempt 3\n.*DETAIL:  HTTP 500: nope/,
	'log: dead-letter WARNING with id, topic, attempt and error');
like($log, qr/WARNING:  grelout message \Q$id{gone}\E of topic "gone" is dead after attempt 1\n.*DETAIL:  HTTP 410/,
	'log: 410 dead-letter WARNING');
like($log, qr/grelout message \Q$id{ra429}\E of topic "ra429" failed on attempt 1, retrying in 2\.0 s/,
	'log: the 429 retry waits the Retry-After seconds');
like($log, qr/grelout message \Q$id{racap}\E of topic "racap" failed on attempt 1, retrying in 5\.0 s/,
	'log: the 503 retry is capped at retry_max');
like($log, qr/grelout message \Q$id{ra500}\E of topic "ra500" failed on attempt 1, retrying in 0\.1 s/,
	'log: Retry-After on a 500 is ignored: normal backoff');
like($log, qr/grelout message \Q$id{slow}\E of topic "slow" failed on attempt 1, retrying in 0\.1 s\n.*DETAIL:  timed out after 500 ms/,
	'log: timeout retry WARNING');
my ($retried0, $dead0) = split /\|/, $stats0;
my ($retried1, $dead1) = split /\|/, sq('SELECT retried, dead_lettered FROM grelout.relays');
# retries: flaky 4, dead 2, ra429 1, radate 1, racap 1, ra500 1, s400 1,
# s404 1, slow 1 or more
is($retried1 - $retried0, 12 + $slow_retries, 'grelout.relays counts every retry');
# dead: dead, gone, huge, endless, refused, s400, s404
is($dead1 - $dead0, 7, 'grelout.relays counts every dead letter');
isnt(sq('SELECT last_error FROM grelout.relays'), '', 'grelout.relays shows a last error');

# ---- redrive
is(sq("SELECT outbox_redrive('no such topic')"), '0', 'redrive of another topic moves nothing');
is(row($id{dead})->{state}, 'dead', 'and leaves the dead message alone');
$recv->script('/dead', [], {});
is(sq("SELECT outbox_redrive('dead')"), '1', 'outbox_redrive returns one');
ok(state_is($id{dead}, 'delivered'), 'the redriven message is delivered');
is(row($id{dead})->{attempts}, 1, 'attempts started again from zero');
$reqs = $recv->requests('/dead');
is(scalar @$reqs, 4, 'one more request after the redrive');
is($reqs->[3]{headers}{'webhook-id'}, $id{dead}, 'with the same webhook-id');
is($reqs->[3]{headers}{'grelout-attempt'}, '1', 'and grelout-attempt 1');

# ---- grelout.dead_letter = off: retried forever, but a 410 is still dead
set_conf($node, 'grelout.dead_letter' => 'off');
$recv->script('/forever', [], { status => 500, body => 'still down' });
handler('forever', $recv->url('/forever'), max_attempts => 1);
my $fid = publish('forever');
my $gid = publish('gone');
ok(wait_until(sub { row($fid)->{attempts} >= 3 }, 30),
	'dead_letter = off: a failing message is retried past max_attempts');
like(row($fid)->{state}, qr/^(pending|processing)$/, 'dead_letter = off: and is not dead');
ok(state_is($gid, 'dead'), 'dead_letter = off: a 410 is still dead at once');
is(row($gid)->{attempts}, 1, 'dead_letter = off: after one attempt');
is($recv->count('/gone'), 2, 'dead_letter = off: the 410 endpoint got one more request only');

$node->stop;
$recv->stop;
done_testing();
