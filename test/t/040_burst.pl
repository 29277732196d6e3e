# A burst of 3000 messages committed in one transaction is delivered by one
# relay, each message exactly once, over reused connections, and the relay's
# counters add up.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $n = 3000;
my $recv = start_receiver();
# generous request timeout and lease: on a loaded machine a slow answer must
# not turn into a timeout, which would legitimately deliver a message twice;
# the old 50 slots, which the connections' reuse is counted against (with
# the default bound of 2000 the handler's adaptive limit may reach hundreds
# in flight against this receiver, each on a connection of its own)
my $node = grelout_node('burst',
	"grelout.concurrency = 50",
	"grelout.request_timeout = '60s'",
	"grelout.lease_duration = '120s'");
my $url = $recv->url('/burst');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('burst', '$url')");

my @ids = split /\n/, $node->safe_psql('app',
	"SELECT outbox_publish('burst', jsonb_build_object('n', g), key => 'k' || (g % 7))
	 FROM generate_series(1, $n) g");
is(scalar @ids, $n, "$n messages published in one transaction");

ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 300),
	'the outbox drains');
ok(wait_until(sub { $recv->count('/burst') >= $n }, 30), "the receiver got $n requests");
my $stats = $recv->stats('/burst');
is($stats->{count}, $n, "exactly $n requests");
is($stats->{distinct_ids}, $n, "$n distinct webhook-ids");
is($stats->{duplicated_ids}, 0, 'no message sent twice');

my $sum = $recv->summary('/burst');
my %published = map { $_ => 1 } @ids;
is(scalar(grep { $published{ $_->{id} } } @$sum), $n, 'every request is one of the published messages');
my %bodies = map { $_->{body} => 1 } @$sum;
is(scalar(keys %bodies), $n, 'every payload arrived');
is(scalar(grep { $_->{attempt} ne '1' } @$sum), 0, 'all on the first attempt');
my %conns = map { $_->{peer_port} => 1 } @$sum;
cmp_ok(scalar(keys %conns), '<=', 200,
	'connections are reused: ' . scalar(keys %conns) . " connections for $n requests");

ok(wait_until(sub { $node->safe_psql('app', 'SELECT delivered FROM grelout.relays') eq "$n" }, 30),
	"grelout.relays counts $n deliveries");
is($node->safe_psql('app', 'SELECT retried + dead_lettered FROM grelout.relays'), '0',
	'no retry, no dead letter');

$node->stop;
$recv->stop;
done_testing();
