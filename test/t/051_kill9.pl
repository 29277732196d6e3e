# A relay killed with SIGKILL while requests are in flight makes the server
# restart after the crash (restart_after_crash = on): no committed message
# is lost, and a message of a transaction still open at the crash is never
# delivered.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $n = 50;
my $recv = start_receiver();
my $node = grelout_node('kill9',
	"restart_after_crash = on",
	"grelout.lease_duration = '5s'",
	"grelout.poll_interval = '500ms'");
my $url = $recv->url('/k9');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('k9', '$url')");
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'the relay runs');
my ($relay) = relay_pids($node);

# the first 20 requests take 3 s to answer
$recv->script('/k9', [ ({ delay => 3 }) x 20 ], {});

# a transaction that publishes and stays open across the crash
my $open = $node->background_psql('app');
$open->query_safe("BEGIN; SELECT outbox_publish('k9', '{\"uncommitted\": true}');");

my @ids = split /\n/, $node->safe_psql('app',
	"SELECT outbox_publish('k9', jsonb_build_object('n', g)) FROM generate_series(1, $n) g");
ok(wait_until(sub { $recv->count('/k9') >= 20 }, 60), 'requests in flight');

my $offset = log_offset($node);
ok(kill('KILL', $relay), 'relay killed with SIGKILL');
ok(wait_until(sub { log_since($node, $offset) =~ /all server processes terminated; reinitializing/ }, 60),
	'the postmaster restarts after the crash');
eval { $open->quit };

ok($node->poll_query_until('app', 'SELECT true'), 'the server accepts connections again');
ok(wait_until(sub { my @p = relay_pids($node); @p == 1 && $p[0] != $relay }, 60),
	'a new relay is running');

ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 120),
	'the outbox drains');
my $after = $node->safe_psql('app', "SELECT outbox_publish('k9', '{\"after\": true}')");
ok(wait_until(sub { grep { $_->{id} eq $after } @{ $recv->summary('/k9') } }, 60),
	'a message published after the crash is delivered');

my $sum = $recv->summary('/k9');
my %seen = map { $_->{id} => 1 } @$sum;
is(scalar(grep { $seen{$_} } @ids), $n, 'every committed message was delivered');
# give a wrongly resurrected message every chance to show up
sleep(3);
$sum = $recv->summary('/k9');
is(scalar(grep { $_->{body} =~ /uncommitted/ } @$sum), 0,
	'the message of the transaction open at the crash was never delivered');
is($node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE payload ? 'uncommitted'"), '0',
	'and it is not in the outbox');

$node->stop;
$recv->stop;
done_testing();
