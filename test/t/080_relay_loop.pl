# The relay's loop never spins and does not depend on the server's session
# defaults (issue 9, defects 1, 5 and 6):
# - with grelout.keep_delivered an interval, a relay whose extension is
#   missing, or whose server defaults to read-only transactions, sleeps
#   between its cycles (1.0 used a whole core: its purge timer never moved);
# - with default_transaction_read_only = on and repeatable read server-wide,
#   a drain delivers everything with no failed cycle;
# - a pending message whose attempts already reached max_attempts is tried
#   once more, not dead-lettered untried at claim.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GreloutTest qw(:DEFAULT relay_pids set_conf log_offset log_since);

# cpu_ticks(PID): user + system CPU time the process used so far, in ticks
sub cpu_ticks
{
	my @f = split ' ', slurp_file("/proc/$_[0]/stat");
	return $f[13] + $f[14];
}

# busy(PID, SECONDS): CPU ticks the process used over that many seconds
sub busy
{
	my ($pid, $seconds) = @_;
	my $t0 = cpu_ticks($pid);
	usleep($seconds * 1_000_000);
	return cpu_ticks($pid) - $t0;
}

my $recv = start_receiver();
my $node = grelout_node('relay_loop',
	"grelout.keep_delivered = '1h'",
	"grelout.poll_interval = '500ms'");
sub sq { return $node->safe_psql('app', $_[0]); }

ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');
my ($pid) = relay_pids($node);

# restart(): terminate the relay and wait for the next one, which starts
# with its timers at zero (1.0's purge timer then never moved)
sub restart
{
	my $old = $pid;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	wait_until(sub { my @p = relay_pids($node); @p == 1 && $p[0] != $old }, 60);
	($pid) = relay_pids($node);
	return $pid != $old;
}

# 3 s at 100 ticks a second: 1.0 used about 300 here
sq('DROP EXTENSION grelout');
ok(restart(), 'a new relay started without the extension');
ok(wait_until(sub { sq("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'grelout relay' AND query LIKE 'waiting for CREATE EXTENSION%'") eq '1' }, 30),
	'the relay noticed the missing extension');
my $ticks = busy($pid, 3);
cmp_ok($ticks, '<', 60, "extension missing: the relay sleeps ($ticks ticks in 3 s)");
sq('CREATE EXTENSION grelout');

# server-wide read-only and repeatable read
my $offset = log_offset($node);
set_conf($node, default_transaction_read_only => 'on',
	default_transaction_isolation => 'repeatable read');
ok(restart(), 'a new relay started with the read-only default');
$ticks = busy($pid, 3);
cmp_ok($ticks, '<', 60, "read-only server default: the relay sleeps ($ticks ticks in 3 s)");

my $url = $recv->url('/drain');
my $rw = 'SET default_transaction_read_only = off; ';
sq("${rw}INSERT INTO grelout.handlers (topic, url) VALUES ('drain', '$url')");
sq("${rw}SELECT outbox_publish('drain', jsonb_build_object('n', g)) FROM generate_series(1, 300) g");
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'drain' AND state = 'delivered'") eq '300' }, 90),
	'read-only, repeatable read defaults: the drain delivers everything');
is($recv->stats('/drain')->{distinct_ids}, 300, 'every message reached the receiver');
my $log = log_since($node, $offset);
my @failed = $log =~ /(ERROR:.*(?:read-only transaction|could not serialize).*)/g;
is(scalar(@failed), 0, 'no relay cycle failed on the server defaults' . (@failed ? ": $failed[0]" : ''));
is(scalar(relay_pids($node)), 1, 'the relay still runs');
set_conf($node, default_transaction_read_only => 'off',
	default_transaction_isolation => 'read committed');

# a pending message with attempts used up is tried once more
$url = $recv->url('/again');
sq("INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('again', '$url', 2)");
my $id = sq("INSERT INTO grelout.outbox (id, topic, payload, attempts, last_error)
	VALUES (gen_random_uuid(), 'again', '{}', 5, 'HTTP 500') RETURNING id");
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$id'") eq 'delivered' }, 30),
	'a pending message past max_attempts gets one more attempt and is delivered');
is($recv->count('/again'), 1, 'it was sent');

# and when that attempt fails, it is dead after it
$recv->script('/again', [], { status => 500 });
$id = sq("INSERT INTO grelout.outbox (id, topic, payload, attempts)
	VALUES (gen_random_uuid(), 'again', '{}', 2) RETURNING id");
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$id'") eq 'dead' }, 30),
	'a failed extra attempt dead-letters it');
like(sq("SELECT attempts || ' ' || last_error FROM grelout.outbox WHERE id = '$id'"), qr/^3 HTTP 500/,
	'after that attempt, with its error');

$node->stop;
$recv->stop;
done_testing();
