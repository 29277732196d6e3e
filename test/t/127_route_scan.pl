# Routing through a backlog reads outbox_route_idx from the last message it
# routed, not from the oldest new one (issue 14).  Each message routed leaves
# its entry in the partial index "WHERE route = 'new'" until a vacuum, and a
# scan from the oldest walks them all: over a drain that is quadratic, a
# tenth of the relay's CPU in figure 2.  Checked here by the index's buffer
# reads a scan (pg_statio_user_indexes, pg_stat_user_indexes) over a
# 6,000-message drain with autovacuum off: at most 6 (measured 3.3: the
# root, a leaf or two, and the scans from the oldest every 100 ms), where
# scanning from the oldest every time read 14.9.
#
# And nothing is lost by it: a message whose transaction began before the
# backlog was published and commits while it drains has an id below the
# ones routed, and is found by the scan from the oldest, which routing runs
# when it has caught up and at least every 100 ms.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT set_conf);

my $n = 6000;
my $recv = start_receiver();
my $node = grelout_node('route_scan',
	"autovacuum = off",
	"grelout.workers = 1",
	"grelout.concurrency = 50",
	"grelout.batch_size = 100",
	"grelout.request_timeout = '60s'",
	"grelout.lease_duration = '120s'");
my $url = $recv->url('/scan');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('scan', '$url')");
ok(wait_until(sub {
	$node->safe_psql('app', 'SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '1' }, 60),
	'one relay running');

# buffers of outbox_route_idx read and scans of it so far
sub route_idx_reads
{
	return split /\|/, $node->safe_psql('app',
		"SELECT idx_blks_read + idx_blks_hit, idx_scan"
		. " FROM pg_statio_user_indexes JOIN pg_stat_user_indexes USING (indexrelid)"
		. " WHERE indexrelid = 'grelout.outbox_route_idx'::regclass");
}

# ---- the buffers a drain reads of the routing index
set_conf($node, 'grelout.relay' => 'off');
$node->safe_psql('app',
	"SELECT count(outbox_publish('scan', jsonb_build_object('n', g))) FROM generate_series(1, $n) g");
my ($reads0, $scans0) = route_idx_reads();
set_conf($node, 'grelout.relay' => 'on');
ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 300),
	'the backlog drains');
is($recv->count('/scan'), $n, "the receiver got $n requests");
# the relay reports its statistics after its commits, at most once a second
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT n_tup_del FROM pg_stat_user_tables"
		. " WHERE relid = 'grelout.outbox'::regclass") >= $n }, 30),
	'the statistics count the drain');
sleep 2;
my ($reads1, $scans1) = route_idx_reads();
my ($reads, $scans) = ($reads1 - $reads0, $scans1 - $scans0);
my $per_scan = $reads / ($scans || 1);
diag(sprintf('%d buffer reads of outbox_route_idx in %d scans for %d messages (%.2f a scan)',
	$reads, $scans, $n, $per_scan));
cmp_ok($scans, '>', 0, 'routing scanned its index');
cmp_ok($per_scan, '<=', 6,
	sprintf('routing reads at most 6 buffers of its index a scan (%.2f)', $per_scan));

# ---- a message committed late, below the ids routed, is delivered
$recv->reset;
my $late = $node->background_psql('app');
$late->query_safe('BEGIN');
$late->query_safe("SELECT outbox_publish('scan', '{\"late\": true}')");
$node->safe_psql('app',
	"SELECT count(outbox_publish('scan', jsonb_build_object('n', g))) FROM generate_series(1, $n) g");
ok(wait_until(sub { $recv->count('/scan') >= 500 }, 120), 'the backlog is draining');
$late->query_safe('COMMIT');
$late->quit;
ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 300),
	'the backlog and the late message drain');
is($recv->count('/scan'), $n + 1, 'every message was delivered, the late one too');
my @late = grep { ($_->{body} // '') =~ /"late"/ } @{ $recv->summary('/scan') };
is(scalar(@late), 1, 'the late message arrived once');

done_testing();
