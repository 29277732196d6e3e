# With a poll interval of a minute, every delivery below can only happen in
# time if something wakes the relay: the commit of a publishing transaction
# (also COMMIT PREPARED, and through PgBouncer in transaction pooling mode),
# a redrive, the due time of a delayed message or of a retry, and a settings
# reload (grelout.relay off then on, a new grelout.concurrency).
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT set_conf);

my $recv = start_receiver();
my $node = grelout_node('wake', "grelout.poll_interval = '60s'");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($topic, $path) = @_;
	my $url = $recv->url($path);
	sq("INSERT INTO grelout.handlers (topic, url) VALUES ('$topic', '$url')");
}

# time of the n-th request (from 1) on a path, waiting for it
sub nth_received
{
	my ($path, $n, $timeout) = @_;
	wait_until(sub { $recv->count($path) >= $n }, $timeout // 30) or return undef;
	return $recv->summary($path)->[ $n - 1 ]{received_at};
}

sub relay_activity { return sq('SELECT activity FROM grelout.relays WHERE pid IS NOT NULL'); }

is(sq("SELECT current_setting('grelout.poll_interval')"), '1min', 'poll interval is a minute');
handler('wake', '/wake');
ok(wait_until(sub { relay_activity() ne '' }, 30), 'the relay runs');
# let the relay finish its first cycles and fall asleep
sleep(2);

# ---- commit wakes the relay, three times over
for my $n (1 .. 3)
{
	my $t0 = time();
	sq("SELECT outbox_publish('wake', '{\"n\": $n}')");
	my $at = nth_received('/wake', $n, 70);
	ok(defined $at && $at - $t0 < 10,
		sprintf('commit %d wakes the idle relay: received %.2f s after publish', $n, ($at // 0) - $t0));
	sleep(1);
}

# ---- a prepared transaction delivers at COMMIT PREPARED, and is woken by it
handler('prep', '/prep');
sq("BEGIN; SELECT outbox_publish('prep', '{\"p\": 1}'); PREPARE TRANSACTION 'grelout_p1';");
sleep(2);
is($recv->count('/prep'), 0, 'nothing delivered from a prepared, uncommitted transaction');
my $t0 = time();
sq("COMMIT PREPARED 'grelout_p1'");
my $at = nth_received('/prep', 1, 70);
ok(defined $at && $at - $t0 < 10,
	sprintf('COMMIT PREPARED wakes the relay: received %.2f s after', ($at // 0) - $t0));

# ---- a delayed message wakes the relay when it comes due
handler('delayed', '/delayed');
my $created = sq("SELECT extract(epoch FROM now()) FROM (SELECT outbox_publish('delayed', '{}', delay => '3 seconds')) s");
$at = nth_received('/delayed', 1, 70);
ok(defined $at && $at >= $created + 2.99, 'delayed message not received before its delay');
ok(defined $at && $at - $created < 15,
	sprintf('the relay wakes when the delayed message comes due (%.2f s)', ($at // 0) - $created));

# ---- a retry wakes the relay when it comes due
$recv->script('/retry', [ { status => 500 } ], {});
handler('retry', '/retry');
sq("SELECT outbox_publish('retry', '{}')");
my $first = nth_received('/retry', 1, 70);
my $second = nth_received('/retry', 2, 70);
ok(defined $second && $second - $first < 15,
	sprintf('the relay wakes for the retry (%.2f s after the failure)', ($second // 0) - ($first // 0)));

# ---- a redrive wakes the relay
$recv->script('/gone', [ { status => 410 } ], {});
handler('gone', '/gone');
my $gid = sq("SELECT outbox_publish('gone', '{}')");
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$gid'") eq 'dead' }, 70),
	'a 410 makes the message dead');
sleep(1);
$t0 = time();
is(sq('SELECT outbox_redrive()'), '1', 'outbox_redrive moves it back');
$at = nth_received('/gone', 2, 70);
ok(defined $at && $at - $t0 < 10,
	sprintf('the redrive wakes the relay: received %.2f s after', ($at // 0) - $t0));

# ---- grelout.relay = off stops claiming, on again delivers
set_conf($node, 'grelout.relay' => 'off');
ok(wait_until(sub { relay_activity() =~ /paused/ }, 30), 'grelout.relays shows the relay paused');
handler('off', '/off');
my $oid = sq("SELECT outbox_publish('off', '{}')");
sleep(2);
is($recv->count('/off'), 0, 'grelout.relay = off: nothing is sent');
is(sq("SELECT state || ' ' || attempts FROM grelout.outbox WHERE id = '$oid'"), 'pending 0',
	'grelout.relay = off: the message stays pending, unclaimed');
$t0 = time();
set_conf($node, 'grelout.relay' => 'on');
$at = nth_received('/off', 1, 70);
ok(defined $at && $at - $t0 < 15,
	sprintf('grelout.relay = on again: delivered %.2f s after the reload', ($at // 0) - $t0));

# ---- a reload of grelout.concurrency applies
set_conf($node, 'grelout.concurrency' => '1');
$recv->script('/conc1', [], { delay => 1.5 });
handler('conc1', '/conc1');
sq("SELECT outbox_publish('conc1', jsonb_build_object('n', g)) FROM generate_series(1, 3) g");
ok(wait_until(sub { $recv->count('/conc1') >= 3 && sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'conc1'") eq '0' }, 70),
	'concurrency = 1: all three delivered');
is($recv->stats('/conc1')->{max_in_flight}, 1, 'concurrency = 1: never two requests in flight');
set_conf($node, 'grelout.concurrency' => '3');
$recv->script('/conc3', [], { delay => 1.5 });
handler('conc3', '/conc3');
sq("SELECT outbox_publish('conc3', jsonb_build_object('n', g)) FROM generate_series(1, 3) g");
ok(wait_until(sub { $recv->count('/conc3') >= 3 && sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'conc3'") eq '0' }, 70),
	'concurrency = 3: all three delivered');
cmp_ok($recv->stats('/conc3')->{max_in_flight}, '>=', 2,
	'concurrency = 3 after a reload: requests in flight together');

# ---- through PgBouncer in transaction pooling mode
SKIP:
{
	my $pgbouncer = -x '/usr/sbin/pgbouncer' ? '/usr/sbin/pgbouncer' : undef;
	skip 'pgbouncer is not installed', 3 unless $pgbouncer;

	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my ($host, $pgport) = ($node->host, $node->port);
	my $user = sq('SELECT current_user');
	open(my $fh, '>', "$dir/users.txt") or die;
	print $fh "\"$user\" \"\"\n";
	close $fh;
	open($fh, '>', "$dir/pgbouncer.ini") or die;
	print $fh <<"EOF";
[databases]
app = host=$host port=$pgport dbname=app

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 2
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
	close $fh;
	my ($out, $err) = ('', '');
	my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', \$out, '2>', \$err);
	my @psql = ('psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
		'-h', '127.0.0.1', '-p', $port, '-U', $user, '-d', 'app');
	ok(wait_until(sub {
		my ($o, $e) = ('', '');
		IPC::Run::run([ @psql, '-c', 'SELECT 1' ], '>', \$o, '2>', \$e) && $o eq "1\n";
	}, 30), 'pgbouncer accepts connections') or diag("pgbouncer: $err " . (slurp_file("$dir/pgbouncer.log") // ''));

	handler('bouncer', '/bouncer');
	my ($o, $e) = ('', '');
	$t0 = time();
	my $ran = IPC::Run::run([ @psql, '-c', 'BEGIN',
		'-c', "SELECT outbox_publish('bouncer', '{\"via\": \"pgbouncer\"}')",
		'-c', 'COMMIT' ], '>', \$o, '2>', \$e);
	ok($ran, 'published in a transaction through pgbouncer') or diag($e);
	$at = nth_received('/bouncer', 1, 70);
	ok(defined $at && $at - $t0 < 10,
		sprintf('a commit through pgbouncer wakes the relay: received %.2f s after', ($at // 0) - $t0));
	$bouncer->signal('TERM');
	$bouncer->finish;
}

$node->stop;
$recv->stop;
done_testing();
