# An immediate shutdown (no grace for anything) with requests in flight and
# committed messages not yet sent, then a start: nothing is lost.  First, on
# the same short lease: a request's timeout is capped below the lease, so a
# slow endpoint never has the message sent again while it still waits.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids);

my $n = 50;
my $recv = start_receiver();
my $node = grelout_node('immediate',
	"grelout.lease_duration = '5s'",
	"grelout.poll_interval = '500ms'");
my $url = $recv->url('/imm');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('imm', '$url')");
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'the relay runs');

# ---- a handler timeout longer than the lease is cut to 3/4 of the lease
$recv->script('/capped', [ { delay => 10 } ], {});
my $curl = $recv->url('/capped');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, timeout) VALUES ('capped', '$curl', '60s')");
my $cid = $node->safe_psql('app', "SELECT outbox_publish('capped', '{}')");
ok(wait_until(sub { $recv->count('/capped') >= 2 }, 60), 'capped: the slow attempt was retried');
my $creqs = $recv->summary('/capped');
my $gap = $creqs->[1]{received_at} - $creqs->[0]{received_at};
ok($gap >= 3.75, sprintf('capped: not sent again before the first attempt timed out (%.2f s)', $gap));
is(join(',', map { $_->{attempt} } @$creqs), '1,2', 'capped: as attempt 2');
like(slurp_file($node->logfile),
	qr/grelout message \Q$cid\E of topic "capped" failed on attempt 1, retrying in [\d.]+ s\n.*DETAIL:  timed out after 3750 ms/,
	'capped: the first attempt timed out after 3/4 of the 5 s lease, not after 60 s');
ok(wait_until(sub { $node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE id = '$cid'") eq '0' }, 60),
	'capped: delivered by the second attempt');

# ---- immediate shutdown
# the first 20 requests take 3 s to answer
$recv->script('/imm', [ ({ delay => 3 }) x 20 ], {});
my @ids = split /\n/, $node->safe_psql('app',
	"SELECT outbox_publish('imm', jsonb_build_object('n', g)) FROM generate_series(1, $n) g");
ok(wait_until(sub { $recv->count('/imm') >= 20 }, 60), 'requests in flight');
# and more committed just before the stop, likely not sent yet
push @ids, split /\n/, $node->safe_psql('app',
	"SELECT outbox_publish('imm', jsonb_build_object('late', g)) FROM generate_series(1, 20) g");

ok($node->stop('immediate', fail_ok => 1), 'immediate shutdown');
ok($node->start(fail_ok => 1), 'started again');

ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'the relay runs again');
ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 120),
	'the outbox drains');
my %seen = map { $_->{id} => 1 } @{ $recv->summary('/imm') };
is(scalar(grep { $seen{$_} } @ids), scalar(@ids), 'every committed message was delivered');
my $after = $node->safe_psql('app', "SELECT outbox_publish('imm', '{\"after\": true}')");
ok(wait_until(sub { grep { $_->{id} eq $after } @{ $recv->summary('/imm') } }, 60),
	'a message published after the restart is delivered');

$node->stop;
$recv->stop;
done_testing();
