# What a publisher may name and learn, with real deliveries (1.2, issue 29
# parts 3 and 4): message headers stored before 1.2 with names 1.2
# reserves, blank values or one name twice are sent without them;
# outbox_message_status shows a publisher the outcome class of real
# failures (an HTTP status, a refused connection, a name that does not
# resolve), never the body that echoes a token nor the endpoint's
# address; grelout.relays shows a relay's last error only in the database
# it serves; grelout.set_secret called with a bind parameter keeps a
# rejected secret out of the server log, where a literal in an INSERT
# lands.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Digest::MD5 qw(md5_hex);
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('publisher_names',
	"grelout.database = 'app, other'",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '60s'",
	"grelout.breaker_threshold = 0");
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION grelout');
sub sq { return $node->safe_psql('app', $_[0]); }

my $port = $recv->port;

# a port nobody listens on
my $closed = do {
	require IO::Socket::INET;
	my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0)
	  or die "no socket: $!";
	my $p = $s->sockport;
	close $s;
	$p;
};

sq("CREATE ROLE pub LOGIN");
sq("GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
	outbox_message_status(uuid) TO pub");
sq("INSERT INTO grelout.handlers (topic, url) VALUES
	('hdr', 'http://127.0.0.1:$port/hdr'),
	('echo', 'http://127.0.0.1:$port/echo'),
	('refused', 'http://127.0.0.1:$closed/refused'),
	('dns', 'http://no-such-host.invalid/x')");
$recv->script('/echo', [], { status => 503, body => 'bad token sk_live_ECHOED_42 from hooks.internal' });
ok(wait_until(sub { scalar(relay_pids($node)) == 2 }, 60), 'a relay for each database');

# --- part 3: headers of stored messages are sent under the 1.2 rules
my $id = sq(q{INSERT INTO grelout.outbox (id, topic, payload, headers)
	VALUES (gen_random_uuid(), 'hdr', '{}',
	 '{"webhook-version": "9", "Keep-Alive": "timeout=1", "TE": "trailers", "Expect": "100-continue",
	   "Upgrade": "h2c", "Content-Encoding": "gzip", "Accept": "  ", "X-Dup": "a", "x-dup": "b",
	   "X-Ok": "fine"}')
	RETURNING id});
my $req;
wait_until(sub {
	($req) = grep { ($_->{headers}{'webhook-id'} // '') eq $id } @{ $recv->requests('/hdr') };
	defined $req;
}, 30);
ok($req, 'the stored message is delivered');
my %sent;
push @{ $sent{ $_->[0] } }, $_->[1] for @{ $req->{header_list} // [] };
is(join('|', @{ $sent{'x-ok'} // [] }), 'fine', 'an ordinary header is sent');
is(join('|', map { @{ $sent{$_} // [] } } qw(webhook-version keep-alive te upgrade content-encoding x-dup)),
	'', 'webhook-*, hop-by-hop, framing and twice-named headers of a message are not sent');
is(join('|', @{ $sent{'expect'} // [] }), '', 'a message Expect is not sent');
is(join('|', @{ $sent{'accept'} // [] }), '*/*', 'a blank Accept does not remove libcurl\'s');

# --- part 4: outcome classes of real failures, as the publisher sees them
my %msg;
for my $t (qw(echo refused dns))
{
	$msg{$t} = $node->safe_psql('app', "SET ROLE pub; SELECT outbox_publish('$t', '{}')");
}
sub status_of
{
	my ($t) = @_;
	return $node->safe_psql('app',
		"SET ROLE pub; SELECT coalesce(last_error, '-') FROM outbox_message_status('$msg{$t}')");
}
for my $case (['echo', 'http 503'], ['refused', 'connection refused'], ['dns', 'dns'])
{
	my ($t, $class) = @$case;
	my $got;
	wait_until(sub { $got = status_of($t); $got ne '-' }, 30);
	is($got, $class, "outbox_message_status: $t reads \"$class\"");
}
like(sq("SELECT last_error FROM grelout.deliveries WHERE message_id = '$msg{echo}'"),
	qr/sk_live_ECHOED_42/, 'administrators still read the body in grelout.deliveries');
like(sq("SELECT last_error FROM grelout.deliveries WHERE message_id = '$msg{refused}'"),
	qr/^could not connect \(connection refused\)/, 'last_error says the connection was refused');

# --- part 4: a relay's last error only in its own database
$node->safe_psql('other', "INSERT INTO grelout.handlers (topic, url)
	VALUES ('o', 'http://127.0.0.1:$port/echo')");
$node->safe_psql('other', "SELECT outbox_publish('o', '{}')");
my $rows = sub {
	my ($db) = @_;
	return $node->safe_psql($db, "SELECT database || ':' || coalesce(last_error, '-')
		FROM grelout.relays WHERE database = 'other'");
};
ok(wait_until(sub { $rows->('other') =~ /sk_live_ECHOED_42/ }, 30),
	'grelout.relays in database other shows its relay\'s last error');
is($rows->('app'), 'other:-', 'grelout.relays in database app shows other\'s relay without its error');
isnt($node->safe_psql('app', "SELECT coalesce(last_error, '-') FROM grelout.relays WHERE database = 'app'"),
	'-', 'and its own relay\'s last error as before');

# --- part 4: set_secret with a bind parameter keeps a bad secret out of the
# log.  This cluster logs every statement (log_statement = 'all'), which
# logs bind parameters too unless log_parameter_max_length = 0: the
# session that sets a secret says so (README gives the same recipe).
my $bad = 'whsec_LEAKCANARY-not-base64!!';
my $good = 'whsec_' . ('QUJD' x 11);    # base64 of 33 bytes
my $script = PostgreSQL::Test::Utils::tempdir() . '/set_secret.sql';
PostgreSQL::Test::Utils::append_to_file($script, "SELECT grelout.set_secret('hdr', :s);\n");
my @pgbench = ('pgbench', '-n', '-t', '1', '-M', 'extended', '-f', $script,
	'-h', $node->host, '-p', $node->port, 'app');
my $off = log_offset($node);
my $rc;
{
	local $ENV{PGOPTIONS} = '-c log_parameter_max_length=0';
	$rc = system(@pgbench, '-D', "s=$bad") >> 8;
	isnt($rc, 0, 'set_secret refuses a malformed secret');
	$rc = system(@pgbench, '-D', "s=$good") >> 8;
	is($rc, 0, 'set_secret takes a good one');
}
is(sq("SELECT md5(secret) FROM grelout.handlers WHERE name = 'hdr'"), md5_hex($good),
	'the secret is set');
my $log;
wait_until(sub { $log = log_since($node, $off); $log =~ /invalid handler secret/ }, 10);
like($log, qr/ERROR:  invalid handler secret/, 'the failed call is in the server log');
like($log, qr/STATEMENT:  SELECT grelout.set_secret\('hdr', \$1\)/, 'with $1 in its statement');
unlike($log, qr/LEAKCANARY|QUJDQUJD/, 'and no secret anywhere');

# without log_parameter_max_length = 0, log_statement = 'all' logs the value
$off = log_offset($node);
system(@pgbench, '-D', "s=${bad}2");
wait_until(sub { $log = log_since($node, $off); $log =~ /invalid handler secret/ }, 10);
like($log, qr/parameters: \$1 = 'whsec_LEAKCANARY/i,    # "Parameters:" from 17 on
	'log_statement = all logs bind parameters unless log_parameter_max_length = 0');

# the risk README names: a literal in a failing statement is logged
$off = log_offset($node);
$node->psql('app', "UPDATE grelout.handlers SET secret = 'whsec_LITERALCANARY!!' WHERE name = 'hdr'");
wait_until(sub { $log = log_since($node, $off); $log =~ /LITERALCANARY/ }, 10);
like($log, qr/STATEMENT:.*LITERALCANARY/, 'a literal secret in a failing UPDATE reaches the log');

$node->stop;
$recv->stop;
done_testing();
