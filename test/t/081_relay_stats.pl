# The relay reports its table statistics (issue 9, defect 2): during a
# drain with no publisher activity, the dead tuples the relay leaves in
# grelout.outbox show in pg_stat_user_tables while the relay lives, and
# autovacuum vacuums the table.  1.0 flushed them only when the relay
# exited, so autovacuum never saw them.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids);

my $recv = start_receiver();
my $node = grelout_node('relay_stats',
	"autovacuum_naptime = 1",
	"grelout.poll_interval = '500ms'");
sub sq { return $node->safe_psql('app', $_[0]); }

ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');
my ($pid) = relay_pids($node);

# a low threshold, so that the relay's dead tuples alone trigger a vacuum
# and the publisher's inserts (below the insert threshold) do not
sq("ALTER TABLE grelout.outbox SET (autovacuum_vacuum_threshold = 50,
	autovacuum_vacuum_insert_threshold = 100000)");
sq("SELECT outbox_publish('drain', jsonb_build_object('n', g)) FROM generate_series(1, 400) g");

# the drain: the handler appears, the relay delivers and deletes
my $url = $recv->url('/drain');
sq("INSERT INTO grelout.handlers (topic, url) VALUES ('drain', '$url')");
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox") eq '0' }, 120), 'the drain delivered everything');

ok(wait_until(sub {
	sq("SELECT n_tup_del >= 400 AND n_tup_upd >= 400 FROM pg_stat_user_tables WHERE relid = 'grelout.outbox'::regclass") eq 't'
}, 30), 'the relay\'s updates and deletes show in pg_stat_user_tables');
ok(wait_until(sub {
	sq("SELECT last_autovacuum IS NOT NULL FROM pg_stat_user_tables WHERE relid = 'grelout.outbox'::regclass") eq 't'
}, 60), 'autovacuum vacuumed grelout.outbox after the drain');
is(join(',', relay_pids($node)), $pid, 'all the while the same relay ran');

$node->stop;
$recv->stop;
done_testing();
