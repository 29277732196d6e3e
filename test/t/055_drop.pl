# DDL with relays running and requests in flight: DROP DATABASE of another
# database does not wait for the relays (they answer its ProcSignalBarrier),
# and DROP EXTENSION grelout succeeds while the relays keep running and wait
# for CREATE EXTENSION, after which they deliver again.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

# CPU time (user + system, in clock ticks) the processes used so far
sub cpu_ticks
{
	my $sum = 0;
	for my $pid (@_)
	{
		my @f = split ' ', slurp_file("/proc/$pid/stat");
		$sum += $f[13] + $f[14];
	}
	return $sum;
}

my $recv = start_receiver();
my $node = grelout_node('drop',
	"grelout.workers = 2",
	"grelout.poll_interval = '500ms'");
my $url = $recv->url('/hold');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, timeout) VALUES ('hold', '$url', '20s')");
ok(wait_until(sub { scalar(relay_pids($node)) == 2 }, 60), 'two relays running');
my @pids = relay_pids($node);
$node->safe_psql('postgres', 'CREATE DATABASE other');

# ---- DROP DATABASE while requests are in flight for 12 s
$recv->script('/hold', [ ({ delay => 12 }) x 5 ], {});
$node->safe_psql('app',
	"SELECT outbox_publish('hold', jsonb_build_object('n', g)) FROM generate_series(1, 5) g");
ok(wait_until(sub { $recv->count('/hold') >= 5 }, 60), 'requests in flight');
my ($timed_out, $stdout, $stderr) = (0, '', '');
my $t0 = time();
my $ret = $node->psql('postgres', 'DROP DATABASE other',
	timeout => 10, timed_out => \$timed_out, stdout => \$stdout, stderr => \$stderr);
my $took = time() - $t0;
ok(!$timed_out, sprintf('DROP DATABASE returned while requests were in flight (%.2f s)', $took));
is($ret, 0, 'DROP DATABASE succeeded') or diag($stderr);
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_database WHERE datname = 'other'"), '0',
	'the database is gone');
ok(wait_until(sub { $node->safe_psql('app', "SELECT count(*) FROM grelout.outbox") eq '0' }, 60),
	'the requests in flight finished and were settled');
is(join(',', relay_pids($node)), join(',', @pids), 'the same relays still run');

# ---- DROP EXTENSION with relays running and requests in flight
$recv->script('/hold', [ ({ delay => 3 }) x 3 ], {});
$node->safe_psql('app',
	"SELECT outbox_publish('hold', jsonb_build_object('m', g)) FROM generate_series(1, 3) g");
ok(wait_until(sub { $recv->count('/hold') >= 8 }, 60), 'requests in flight again');
my $offset = log_offset($node);
($timed_out, $stderr) = (0, '');
$ret = $node->psql('app', 'DROP EXTENSION grelout',
	timeout => 60, timed_out => \$timed_out, stderr => \$stderr);
ok(!$timed_out && $ret == 0, 'DROP EXTENSION grelout succeeds with relays running') or diag($stderr);
ok(wait_until(sub {
	log_since($node, $offset) =~ /grelout relay 1 is waiting for CREATE EXTENSION grelout in database "app"/
	  && log_since($node, $offset) =~ /grelout relay 2 is waiting for CREATE EXTENSION grelout in database "app"/
}, 60), 'both relays log that they wait for CREATE EXTENSION');
# the requests that were in flight finish with no row to settle; a reload
# wakes the relays: they look once and go back to sleep, using no CPU to
# speak of while they wait
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
sleep(1);
my $ticks0 = cpu_ticks(@pids);
sleep(3);
my $ticks = cpu_ticks(@pids) - $ticks0;
cmp_ok($ticks, '<', 50, "the waiting relays do not spin ($ticks CPU ticks in 3 s)");
is(join(',', relay_pids($node)), join(',', @pids), 'the relays keep running, quietly');
unlike(log_since($node, $offset), qr/exited with exit code|terminated by signal/,
	'no relay exited');
my $relay_errors = join('|', @pids);
unlike(log_since($node, $offset), qr/\[(?:$relay_errors)\] (?:ERROR|FATAL)/,
	'no relay logged an error while the extension was gone');

$node->safe_psql('app', 'CREATE EXTENSION grelout');
my $url2 = $recv->url('/again');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('again', '$url2')");
my $id = $node->safe_psql('app', "SELECT outbox_publish('again', '{\"back\": true}')");
ok(wait_until(sub { $recv->count('/again') >= 1 }, 60),
	'after CREATE EXTENSION again, a new message is delivered');
is($recv->requests('/again')->[0]{headers}{'webhook-id'}, $id, 'it is that message');
ok(wait_until(sub { $node->safe_psql('app', "SELECT count(*) FROM grelout.outbox") eq '0' }, 60),
	'and settled in the new table');
like(log_since($node, $offset), qr/found the grelout extension in database "app", delivering/,
	'the relay logs that it delivers again');
ok(wait_until(sub { $node->safe_psql('app', 'SELECT sum(delivered) FROM grelout.relays') >= 1 }, 30),
	'grelout.relays works again');

$node->stop;
$recv->stop;
done_testing();
