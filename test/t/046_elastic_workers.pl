# Elastic relays (issue 32): with grelout.workers = 1 and
# grelout.max_workers = 3, a backlog that one relay cannot keep up with (an
# endpoint that takes 50 ms, four requests in flight a relay) makes the
# launcher add relays, one at a time, up to three; they show in
# pg_stat_activity and grelout.relays and share the work; every message is
# delivered exactly once (no crash here: no duplicate at all).  After a
# quiet spell the extra relays retire, one at a time, back to one, and stay
# retired.  A launcher started again meanwhile keeps the extra relays; a
# handler's cap holds over them.  A reload lowering grelout.max_workers caps the next backlog.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use GreloutTest qw(:DEFAULT relay_pids set_conf log_offset log_since);

my $n = 3000;
my $recv = start_receiver();
my $node = grelout_node('elastic',
	"grelout.workers = 1",
	"grelout.max_workers = 3",
	"grelout.concurrency = 4",
	"grelout.batch_size = 4",
	"grelout.poll_interval = '200ms'",
	"grelout.request_timeout = '60s'",
	"grelout.lease_duration = '120s'");

sub sq { return $node->safe_psql('app', $_[0]); }

$recv->script('/many', [], { delay => 0.05 });
$recv->script('/more', [], { delay => 0.05 });
sq("INSERT INTO grelout.handlers (topic, url) VALUES ('many', '" . $recv->url('/many') . "')");
sq("INSERT INTO grelout.handlers (topic, url) VALUES ('more', '" . $recv->url('/more') . "')");
# a handler capped at 3 requests in flight over all relays, added or not
$recv->script('/capped', [], { delay => 0.05 });
sq("INSERT INTO grelout.handlers (name, topic, url, max_in_flight) VALUES ('capped', 'capped', '"
	. $recv->url('/capped') . "', 3)");

ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'one relay (grelout.workers) runs');
sleep(2);
is(scalar(relay_pids($node)), 1, 'with nothing to do, no relay is added');

# publish(TOPIC, COUNT): COUNT messages in transactions of 500; their ids
sub publish
{
	my ($topic, $count) = @_;
	my @ids;
	for (my $from = 1; $from <= $count; $from += 500)
	{
		my $to = $from + 499 > $count ? $count : $from + 499;
		push @ids, split /\n/, sq("SELECT outbox_publish('$topic', jsonb_build_object('n', g))"
			. " FROM generate_series($from, $to) g");
	}
	return @ids;
}

# drain(TOPIC): wait until the topic's messages are all delivered; the
# most relays seen meanwhile
sub drain
{
	my ($topic) = @_;
	my $most = 0;
	wait_until(sub {
		my $r = scalar(relay_pids($node));
		$most = $r if $r > $most;
		return sq("SELECT count(*) FROM grelout.outbox WHERE topic = '$topic'") eq '0';
	}, 300) or return -1;
	return $most;
}

# ---- a backlog: relays are added, up to grelout.max_workers
my $offset = log_offset($node);
my @ids = publish('many', $n);
my @capped = publish('capped', 300);
is(scalar @ids, $n, "$n messages published");
my $most = 0;
ok(wait_until(sub {
	my $r = scalar(relay_pids($node));
	$most = $r if $r > $most;
	return $r == 3;
}, 60), 'under the backlog the launcher adds relays: three run');
ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '3' }, 30),
	'grelout.relays shows the three');
is(sq("SELECT string_agg(relay::text, ',' ORDER BY relay) FROM grelout.relays"), '1,2,3',
	'numbered 1 to 3');

# a new launcher adopts the extra relays: it neither stops nor restarts them
my @three = relay_pids($node);
my $launcher = sq("SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout launcher'");
sq("SELECT pg_terminate_backend($launcher)");
ok(wait_until(sub {
	my $l = sq("SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout launcher'");
	return $l ne '' && $l ne $launcher;
}, 30), 'the launcher, terminated, is started again');
sleep(2);
is(join(',', relay_pids($node)), join(',', @three), 'the new launcher keeps the three relays running');

my $log = log_since($node, $offset);
like($log, qr/grelout adds relay 2 to database "app": its relays cannot keep up/,
	'the launcher logs the relay it adds, and why');
like($log, qr/grelout adds relay 3 to database "app"/, 'then the third');

my $drained = drain('many');
my $capped_most = drain('capped');
$most = $capped_most if $capped_most > $most;
ok($drained >= 0, 'the outbox drains');
$most = $drained if $drained > $most;
is($most, 3, 'never more relays than grelout.max_workers');
ok(wait_until(sub { $recv->count('/many') >= $n }, 30), "the receiver got $n requests");
my $stats = $recv->stats('/many');
is($stats->{count}, $n, "exactly $n requests");
is($stats->{distinct_ids}, $n, "$n distinct webhook-ids");
is($stats->{duplicated_ids}, 0, 'no message sent twice');
my %published = map { $_ => 1 } @ids;
is(scalar(grep { $published{ $_->{id} } } @{ $recv->summary('/many') }), $n,
	'every request is one of the published messages');
is(sq("SELECT count(*) FROM grelout.deliveries"), '0', 'nothing left pending or dead');
ok(wait_until(sub { $recv->count('/capped') >= 300 }, 30), 'the capped handler got its 300');
$stats = $recv->stats('/capped');
is($stats->{duplicated_ids}, 0, 'none of them twice');
cmp_ok($stats->{max_in_flight}, '<=', 3,
	"its cap held across the relays ($stats->{max_in_flight} in flight at most)");
cmp_ok(sq('SELECT count(*) FROM grelout.relays WHERE delivered > 0'), '>=', 2,
	'the added relays delivered too: ' . sq("SELECT string_agg(relay || ':' || delivered, ' ' ORDER BY relay) FROM grelout.relays"));

# ---- quiet: the extra relays retire, one at a time, and stay retired.
# Meanwhile a trickle (a message every half second to an endpoint taking a
# second: never enough to saturate a relay) keeps requests in flight, so a
# relay may be retired with some: it finishes them, sending none twice.
$recv->script('/trickle', [], { delay => 1 });
sq("INSERT INTO grelout.handlers (topic, url) VALUES ('trickle', '" . $recv->url('/trickle') . "')");
$offset = log_offset($node);
my ($trickled, $last_pub, $retiring_busy) = (0, 0, 0);
ok(wait_until(sub {
	if (time() - $last_pub >= 0.5)
	{
		sq("SELECT outbox_publish('trickle', jsonb_build_object('n', $trickled))");
		$trickled++;
		$last_pub = time();
	}
	$retiring_busy = 1 if sq("SELECT count(*) FROM grelout.relays"
		. " WHERE activity = 'retiring' AND in_flight > 0") ne '0';
	return scalar(relay_pids($node)) == 1;
}, 120), 'after a quiet spell the extra relays retire: one relay runs');
note($retiring_busy ? 'a relay was seen retiring with requests in flight'
	: 'no relay was seen retiring with requests in flight');
ok(wait_until(sub { $recv->count('/trickle') >= $trickled }, 30),
	"the $trickled messages of the trickle delivered");
is($recv->stats('/trickle')->{duplicated_ids}, 0, 'none of them twice');
$log = log_since($node, $offset);
like($log, qr/grelout retires relay 3 of database "app": its relays have had room to spare/,
	'the launcher logs the retirement, and why');
like($log, qr/grelout relay 3 retires from database "app"/, 'relay 3 retires by itself');
like($log, qr/grelout relay 2 retires from database "app"/, 'then relay 2');
unlike($log, qr/grelout relay \d stopping with/, 'no relay was stopped: they retired');
ok($log =~ /retires relay 3.*retires relay 2/s, 'the highest first');
sleep(4);
is(scalar(relay_pids($node)), 1, 'a retired relay is not started again');
is(sq("SELECT string_agg(relay::text, ',' ORDER BY relay) FROM grelout.relays"), '1',
	'grelout.relays shows relay 1 only');
is(sq('SELECT sum(delivered) FROM grelout.relays'), sq('SELECT delivered FROM grelout.relays'),
	'relay 1 counts on');

# ---- a reload lowers grelout.max_workers: the next backlog gets two
set_conf($node, 'grelout.max_workers' => '2');
@ids = publish('more', 1500);
ok(wait_until(sub { scalar(relay_pids($node)) == 2 }, 60), 'a new backlog: a relay is added again');
$drained = drain('more');
ok($drained >= 0, 'the second backlog drains');
is($drained, 2, 'two relays at most, as grelout.max_workers now says');
ok(wait_until(sub { $recv->count('/more') >= 1500 }, 30), 'the receiver got 1500 requests');
$stats = $recv->stats('/more');
is($stats->{count}, 1500, 'exactly 1500 requests');
is($stats->{duplicated_ids}, 0, 'none sent twice');

$node->stop;
$recv->stop;
done_testing();
