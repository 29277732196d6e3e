# Auto-disable and operational events (issue 11, live test (d)), with
# threshold 3, cooldown 1 s and grelout.disable_after = '5s'.
#
# 1. With no handler whose pattern matches grelout.# (only '#'), a failing
#    handler's dead deliveries, open breaker and auto-disable store no event
#    row in grelout.outbox, and '#' receives no grelout.* message.
# 2. With an on-call handler on 'grelout.#' (answers 204), a second one on
#    'grelout.#' that fails (one attempt), and a handler 'victim' that
#    fails (one attempt): victim's breaker opens and it is disabled after
#    5 s (enabled = false, WARNING); the on-call handler receives
#    grelout.delivery.dead for each of victim's dead deliveries (message id,
#    topic, attempts, error), grelout.breaker.opened and
#    grelout.handler.disabled (reason 'breaker') about victim, and the same
#    two about the failing on-call handler, whose breaker the events opened;
#    that handler never receives an event about itself; there is no
#    grelout.delivery.dead about an event's delivery; '#' receives no
#    grelout.* event.
# 3. Re-enabling victim leaves its breaker half-open: its next delivery is
#    one probe, alone; a 2xx closes the breaker (LOG, grelout.breaker.closed)
#    and the rest flows.  A manual disable publishes grelout.handler.disabled
#    with reason 'manual'.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('events',
	"grelout.workers = 1",
	"grelout.concurrency = 10",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '1s'",
	"grelout.retry_jitter = 0",
	"grelout.breaker_threshold = 3",
	"grelout.breaker_cooldown = '1s'",
	"grelout.disable_after = '5s'",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $pattern, $path, $extra) = @_;
	my $url = $recv->url($path);
	my ($cols, $vals) = ('', '');
	for my $c (sort keys %{ $extra // {} })
	{
		$cols .= ", $c";
		$vals .= ", $extra->{$c}";
	}
	sq("INSERT INTO grelout.handlers (name, topic, url$cols)"
		. " VALUES ('$name', '$pattern', '$url'$vals)");
}

sub status { return sq("SELECT $_[1] FROM grelout.handler_status WHERE handler = '$_[0]'"); }

# events(PATH): the grelout.* requests to PATH: [topic, payload] pairs
sub events
{
	my ($path) = @_;
	my @ev;
	for my $r (@{ $recv->requests($path) })
	{
		my $topic = $r->{headers}{'grelout-topic'} // '';
		next unless $topic =~ /^grelout\./;
		push @ev, [ $topic, eval { decode_json($r->{body}) } // {} ];
	}
	return @ev;
}

# about(PATH, TOPIC, HANDLER): the events of TOPIC about HANDLER at PATH
sub about
{
	my ($path, $topic, $handler) = @_;
	return grep { $_->[0] eq $topic && ($_->[1]{handler} // '') eq $handler } events($path);
}

# ---- 1. no handler matches grelout.#: nothing is stored
$recv->script('/all', [], { status => 204 });
$recv->script('/lonely', [], { status => 500, body => 'lonely and down' });
handler('all', '#', '/all');
handler('lonely', 'lone.t', '/lonely', { max_attempts => 1 });
my $offset = log_offset($node);
sq("SELECT count(outbox_publish('lone.t', jsonb_build_object('n', g))) FROM generate_series(1, 6) g");
ok(wait_until(sub { status('lonely', 'breaker') eq 'open' }, 30), 'lonely: the breaker opens');
ok(wait_until(sub { status('lonely', 'enabled') eq 'f' }, 30), 'lonely: disabled after disable_after');
cmp_ok(status('lonely', 'dead'), '>=', 1, 'lonely: some deliveries dead');
like(log_since($node, $offset), qr/WARNING:  grelout handler "lonely" disabled: its breaker stayed open for/,
	'lonely: the auto-disable WARNING');
usleep(500_000);
is(sq("SELECT count(*) FROM grelout.outbox WHERE topic LIKE 'grelout.%'"), '0',
	'no handler matches grelout.#: no event row stored');
is(scalar(events('/all')), 0, "'#' received no grelout.* message");
sq("DELETE FROM grelout.handlers WHERE name = 'lonely'");

# ---- 2. on-call handlers on grelout.#; victim fails until disabled
$recv->script('/oncall', [], { status => 204 });
$recv->script('/oncall2', [], { status => 500, body => 'pager broken' });
$recv->script('/victim', [], { status => 500, body => 'victim down' });
handler('oncall', 'grelout.#', '/oncall');
handler('oncall2', 'grelout.#', '/oncall2', { max_attempts => 1 });
handler('victim', 'job.t', '/victim', { max_attempts => 1 });
$offset = log_offset($node);
my @jobs = split /\n/, sq("SELECT outbox_publish('job.t', jsonb_build_object('n', g)) FROM generate_series(1, 8) g");
my %job = map { $_ => 1 } @jobs;

ok(wait_until(sub { status('victim', 'breaker') eq 'open' }, 30), 'victim: the breaker opens');
ok(wait_until(sub { status('victim', 'enabled') eq 'f' }, 30), 'victim: enabled = false after 5 s open');
like(log_since($node, $offset), qr/WARNING:  grelout handler "victim" disabled: its breaker stayed open for/,
	'victim: the auto-disable WARNING');
ok(wait_until(sub {
	about('/oncall', 'grelout.breaker.opened', 'victim')
	  && about('/oncall', 'grelout.handler.disabled', 'victim')
	  && about('/oncall', 'grelout.breaker.opened', 'oncall2')
	  && about('/oncall', 'grelout.handler.disabled', 'oncall2') }, 30),
	'on-call received breaker.opened and handler.disabled about victim and about oncall2')
  or diag(join("\n", map { "$_->[0] " . encode_json($_->[1]) } events('/oncall')));

my @ev = about('/oncall', 'grelout.breaker.opened', 'victim');
is(scalar(@ev), 1, 'one grelout.breaker.opened about victim');
is($ev[0][1]{consecutive_failures}, 3, 'with consecutive_failures 3');
like($ev[0][1]{error} // '', qr/^HTTP 500/, 'and the error');
ok(defined $ev[0][1]{at}, 'and "at"');
@ev = about('/oncall', 'grelout.handler.disabled', 'victim');
is(scalar(@ev), 1, 'one grelout.handler.disabled about victim');
is($ev[0][1]{reason}, 'breaker', "with reason 'breaker'");
is(status('oncall2', 'enabled'), 'f', 'oncall2: also disabled (its breaker, opened by the events)');

my $n_dead = status('victim', 'dead');
cmp_ok($n_dead, '>=', 1, "victim: $n_dead deliveries dead (one attempt each, before the breaker opened)");
ok(wait_until(sub { scalar(about('/oncall', 'grelout.delivery.dead', 'victim')) >= $n_dead }, 15),
	'on-call received a grelout.delivery.dead for each');
@ev = about('/oncall', 'grelout.delivery.dead', 'victim');
is(scalar(@ev), $n_dead, 'exactly one each');
is(scalar(grep {
	$job{ $_->[1]{message_id} // '' } && ($_->[1]{topic} // '') eq 'job.t'
	  && ($_->[1]{attempts} // 0) == 1 && ($_->[1]{error} // '') =~ /^HTTP 500/ } @ev),
	$n_dead, 'with the message id, topic job.t, attempts 1 and the error');
my %dead_ids = map { $_->[1]{message_id} => 1 } @ev;
is(scalar(keys %dead_ids), $n_dead, 'of distinct messages');

cmp_ok(sq("SELECT count(*) FROM grelout.deliveries WHERE handler = 'oncall2' AND state = 'dead'"), '>=', 1,
	"oncall2: some event deliveries dead");
is(scalar(about('/oncall', 'grelout.delivery.dead', 'oncall2')), 0,
	'no grelout.delivery.dead about an event\'s delivery reached on-call');
is(sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'grelout.delivery.dead'"
		. " AND payload->>'topic' LIKE 'grelout.%'"), '0',
	'no grelout.delivery.dead about an event is stored');
my @self = grep { ($_->[1]{handler} // '') eq 'oncall2' } events('/oncall2');
is(scalar(@self), 0, 'oncall2 never received an event about itself');
cmp_ok(scalar(events('/oncall2')), '>=', 3, 'though it received events about victim');
is(scalar(grep { ($_->[1]{handler} // '') eq 'oncall' } events('/oncall')), 0,
	'on-call never received an event about itself');
is(scalar(events('/all')), 0, "'#' received no grelout.* event");

# ---- 3. re-enabled: half-open, one probe, closed
$recv->script('/victim', [ { status => 204, delay => 1.5 } ], { status => 204 });
my $n_v = $recv->count('/victim');
my $pending = status('victim', 'pending');
cmp_ok($pending, '>=', 1, "victim: $pending deliveries waiting");
$offset = log_offset($node);
sq("UPDATE grelout.handlers SET enabled = true WHERE name = 'victim'");
ok(wait_until(sub { status('victim', 'breaker') eq 'half-open' }, 5),
	're-enabled: the breaker reads half-open');
ok(wait_until(sub { $recv->count('/victim') > $n_v }, 10), 'a probe goes out');
usleep(700_000);
is($recv->count('/victim'), $n_v + 1, 'one request only while the probe is out');
is(status('victim', 'breaker'), 'half-open', 'still half-open while the probe is out');
ok(wait_until(sub { status('victim', 'breaker') eq 'closed' }, 10), 'the 2xx closes the breaker');
ok(wait_until(sub { status('victim', 'pending') eq '0' }, 20), 'and the rest flows');
is($recv->count('/victim') - $n_v, $pending, 'each waiting delivery sent once');
ok(wait_until(sub { log_since($node, $offset) =~ /LOG:  grelout handler "victim" breaker closed/ }, 10),
	'a "breaker closed" LOG');
ok(wait_until(sub { about('/oncall', 'grelout.breaker.closed', 'victim') }, 15),
	'on-call received grelout.breaker.closed about victim');

# ---- a manual disable
sq("UPDATE grelout.handlers SET enabled = false WHERE name = 'all'");
ok(wait_until(sub { about('/oncall', 'grelout.handler.disabled', 'all') }, 15),
	'a manual disable: on-call received grelout.handler.disabled');
@ev = about('/oncall', 'grelout.handler.disabled', 'all');
is($ev[0][1]{reason}, 'manual', "with reason 'manual'");

$node->stop;
$recv->stop;
done_testing();
