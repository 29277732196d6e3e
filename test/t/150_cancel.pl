# pg_cancel_backend() of a grelout process cancels at most the statement
# it is running (issue 29): the launcher (new in 1.1) runs on, with the
# same pid, and still starts relays for a database given the extension
# later; a cancel while it waits for a lock on pg_database cancels that
# read only, which it does again once the lock is gone.  A relay runs on
# too and still delivers (see also 082_relay_signals.pl).
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('cancel',
	"grelout.database = '*'",
	"grelout.poll_interval = '500ms'");
sub sq { return $node->safe_psql('app', $_[0]); }

sub launcher_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout launcher'");
}

sub relays_in
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'grelout relay' AND datname = '$db'");
}

ok(wait_until(sub { launcher_pid() ne '' }, 60), 'the launcher runs');
ok(wait_until(sub { relays_in('app') eq '1' }, 60), 'a relay serves app');
my $lpid = launcher_pid();

# ---- the launcher, idle
for (1 .. 5)
{
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($lpid)");
	usleep(200_000);
}
# a launcher that exits on a cancel is gone at once, back after 5 s
usleep(1_000_000);
is(launcher_pid(), $lpid, 'launcher: the same launcher runs on after pg_cancel_backend');

$node->safe_psql('postgres', 'CREATE DATABASE later');
$node->safe_psql('later', 'CREATE EXTENSION grelout');
ok(wait_until(sub { relays_in('later') eq '1' }, 60),
	'launcher: it starts a relay for a database given the extension afterwards');
is(launcher_pid(), $lpid, 'launcher: still the same launcher');

# ---- the launcher, waiting for a lock on pg_database: the read is
# cancelled, not the launcher.  Sessions opened first: a new one reads
# pg_database at its start.
my $watch = $node->background_psql('postgres');
my $locker = $node->background_psql('postgres');
my $offset = log_offset($node);
$locker->query_safe('BEGIN; LOCK TABLE pg_database IN ACCESS EXCLUSIVE MODE');
$watch->query_safe('SELECT pg_reload_conf()');
ok(wait_until(sub {
	$watch->query_safe("SELECT wait_event_type FROM pg_stat_get_activity($lpid)") eq 'Lock'
}, 30), 'lock: the launcher waits for pg_database');
$watch->query_safe("SELECT pg_cancel_backend($lpid)");
ok(wait_until(sub { log_since($node, $offset) =~ /read of pg_database was cancelled/ }, 30),
	'lock: the launcher logs that its read was cancelled');
is($watch->query_safe("SELECT pid FROM pg_stat_get_activity($lpid)"), $lpid,
	'lock: the launcher runs on');
$locker->query_safe('COMMIT');
$locker->quit;
$watch->quit;
$node->safe_psql('postgres', 'CREATE DATABASE later2');
$node->safe_psql('later2', 'CREATE EXTENSION grelout');
ok(wait_until(sub { relays_in('later2') eq '1' }, 60),
	'lock: then it starts a relay for another database given the extension');
is(launcher_pid(), $lpid, 'lock: still the same launcher');

# ---- a relay
my ($rpid) = split /\n/, $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout relay' AND datname = 'app'");
my $url = $recv->url('/evt');
sq("INSERT INTO grelout.handlers (topic, url) VALUES ('evt', '$url')");
for (1 .. 5)
{
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($rpid)");
	usleep(200_000);
}
sq("SELECT outbox_publish('evt', jsonb_build_object('n', g)) FROM generate_series(1, 5) g");
ok(wait_until(sub { $recv->count('/evt') >= 5 }, 60), 'relay: it delivers after the cancels');
is($node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout relay' AND datname = 'app'"),
	$rpid, 'relay: the same relay runs on');
is(launcher_pid(), $lpid, 'the launcher was never replaced');

$node->stop;
$recv->stop;
done_testing();
