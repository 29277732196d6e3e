# Three relays share thousands of messages: each message is delivered
# exactly once, every relay shows in pg_stat_activity and grelout.relays,
# and the relays' delivered counters add up to the number of messages.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids);

my $n = 3000;
my $recv = start_receiver();
my $node = grelout_node('workers',
	"grelout.workers = 3",
	"grelout.concurrency = 20",
	"grelout.batch_size = 20",
	"grelout.request_timeout = '60s'",
	"grelout.lease_duration = '120s'");
my $url = $recv->url('/many');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('many', '$url')");

ok(wait_until(sub { scalar(relay_pids($node)) == 3 }, 60),
	'three relays in pg_stat_activity with backend_type "grelout relay"');
ok(wait_until(sub {
	$node->safe_psql('app', 'SELECT count(DISTINCT pid) FROM grelout.relays WHERE pid IS NOT NULL') eq '3'
}, 60), 'grelout.relays has a row for each relay');
is($node->safe_psql('app', 'SELECT string_agg(relay::text, \',\' ORDER BY relay) FROM grelout.relays'),
	'1,2,3', 'numbered 1 to 3');

# six transactions of 500
my @ids;
for my $t (0 .. 5)
{
	push @ids, split /\n/, $node->safe_psql('app',
		"SELECT outbox_publish('many', jsonb_build_object('n', g))
		 FROM generate_series($t * 500 + 1, $t * 500 + 500) g");
}
is(scalar @ids, $n, "$n messages published");

ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 300),
	'the outbox drains');
ok(wait_until(sub { $recv->count('/many') >= $n }, 30), "the receiver got $n requests");
my $stats = $recv->stats('/many');
is($stats->{count}, $n, "exactly $n requests");
is($stats->{distinct_ids}, $n, "$n distinct webhook-ids");
is($stats->{duplicated_ids}, 0, 'no message sent twice by two relays');
my %published = map { $_ => 1 } @ids;
is(scalar(grep { $published{ $_->{id} } } @{ $recv->summary('/many') }), $n,
	'every request is one of the published messages');

ok(wait_until(sub { $node->safe_psql('app', 'SELECT sum(delivered) FROM grelout.relays') eq "$n" }, 30),
	"the relays' delivered counters add up to $n");
my $per = $node->safe_psql('app', 'SELECT string_agg(delivered::text, \' \' ORDER BY relay) FROM grelout.relays');
note("delivered per relay: $per");
cmp_ok($node->safe_psql('app', 'SELECT count(*) FROM grelout.relays WHERE delivered > 0'), '>=', 2,
	"more than one relay delivered ($per)");

$node->stop;
$recv->stop;
done_testing();
