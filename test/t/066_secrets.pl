# Secrets never leak.  Handlers hold signing secrets (current and previous,
# whsec_, and a whsk_ ed25519 signing key) and an Authorization header; after signed deliveries, retries, HTTP
# errors, a 410, connection failures, timeouts and dead letters, and after
# handler updates refused for a malformed secret, signing key or header,
# neither any secret (whole, or its base64 part) nor the header's token appears in the
# server log (log_statement = all, debug1), pg_stat_activity,
# grelout.status, grelout.relays, grelout.handlers_masked, any last_error,
# an error message, or the relay's process title.
#
# The secrets reach the server only through SQL expressions that compute
# them (encode() of hex), so that the statement log cannot hold them
# either: whatever the grep finds was written by grelout.
use strict;
use warnings;
use IO::Socket::INET;
use MIME::Base64 qw(encode_base64);
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

# random_bytes(N)
sub random_bytes
{
	my ($n) = @_;
	open(my $fh, '<:raw', '/dev/urandom') or die;
	read($fh, my $raw, $n) == $n or die;
	close $fh;
	return $raw;
}

# secret(N): [the SQL expression that makes it, the secret, its base64 part]
sub secret
{
	my ($n, $prefix) = @_;
	$prefix //= 'whsec_';
	my $raw = random_bytes($n);
	my $b64 = encode_base64($raw, '');
	return [ "'$prefix' || encode('\\x" . unpack('H*', $raw) . "'::bytea, 'base64')", "$prefix$b64", $b64 ];
}

my $s1 = secret(32);
my $s2 = secret(48);
my $token = secret(30, '');
my $bad_short = secret(23);
my $bad_prefix = secret(32, '');
my $bad_chars = secret(33);
my $sk = secret(32, 'whsk_');
my $bad_sk = secret(33, 'whsk_');
my @needles = (
	[ 'secret', $s1->[1] ], [ "secret's base64", $s1->[2] ],
	[ 'previous secret', $s2->[1] ], [ "previous secret's base64", $s2->[2] ],
	[ 'authorization token', $token->[2] ],
	[ 'refused 23-byte secret', $bad_short->[2] ],
	[ 'refused secret without prefix', $bad_prefix->[2] ],
	[ 'refused secret with a bad character', $bad_chars->[2] ],
	[ 'signing key', $sk->[1] ], [ "signing key's base64", $sk->[2] ],
	[ 'refused signing key of 33 bytes', $bad_sk->[2] ]);

my $recv = start_receiver();
my $node = grelout_node('secrets',
	"log_min_messages = debug1",
	"log_min_error_statement = error",
	"grelout.retry_base = '50ms'",
	"grelout.retry_max = '200ms'",
	"grelout.max_attempts = 2");

my $closed = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 1)
  or die;
my $closed_port = $closed->sockport;
close $closed;

my %handlers = (
	ok => [ $recv->url('/ok'), undef ],
	ed => [ $recv->url('/ed'), undef ],
	rot => [ $recv->url('/rot'), undef ],
	fail => [ $recv->url('/fail'), undef ],
	gone => [ $recv->url('/gone'), undef ],
	refused => [ "http://127.0.0.1:$closed_port/refused", undef ],
	slow => [ $recv->url('/slow'), "'300ms'" ],
);
$recv->script('/fail', [], { status => 500, body => 'internal error, please retry' });
$recv->script('/gone', [], { status => 410, body => 'gone for good' });
$recv->script('/slow', [], { status => 204, delay => 5 });
for my $t (sort keys %handlers)
{
	my ($url, $timeout) = @{ $handlers{$t} };
	my $prev = $t eq 'rot' ? $s1->[0] : 'NULL';
	my $sec = $t eq 'rot' ? $s2->[0] : $t eq 'ed' ? $sk->[0] : $s1->[0];
	$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, secret, previous_secret, headers, timeout)
		VALUES ('$t', '$url', $sec, $prev,
			jsonb_build_object('authorization', 'Bearer ' || encode('\\x"
		  . unpack('H*', MIME::Base64::decode_base64($token->[2])) . "'::bytea, 'base64')),
			" . ($timeout // 'NULL') . ")");
}
is($node->safe_psql('app', "SELECT count(*) FROM grelout.handlers WHERE secret IN ($s1->[0], $s2->[0], $sk->[0])"),
	scalar(keys %handlers), 'the handlers hold the expected secrets');

my @haystacks;

# sample(WHERE): the views and activity an operator or monitor can see now
sub sample
{
	my ($when) = @_;
	push @haystacks, [ "pg_stat_activity ($when)", $node->safe_psql('app',
		"SELECT string_agg(concat_ws(' ', datname, usename, application_name, state, wait_event, backend_type, query), E'\\n') FROM pg_stat_activity") ];
	push @haystacks, [ "grelout.status ($when)", $node->safe_psql('app', 'SELECT string_agg(s::text, E\'\\n\') FROM grelout.status s') ];
	push @haystacks, [ "grelout.relays ($when)", $node->safe_psql('app', 'SELECT string_agg(r::text, E\'\\n\') FROM grelout.relays r') ];
	push @haystacks, [ "grelout.handlers_masked ($when)", $node->safe_psql('app', 'SELECT string_agg(h::text, E\'\\n\') FROM grelout.handlers_masked h') ];
	push @haystacks, [ "outbox last_error ($when)", $node->safe_psql('app', "SELECT string_agg(coalesce(last_error, ''), E'\\n') FROM grelout.outbox") ];
	my $pids = $node->safe_psql('app', 'SELECT string_agg(pid::text, \' \') FROM grelout.relays');
	for my $pid (split / /, $pids)
	{
		if (open(my $fh, '<', "/proc/$pid/cmdline"))
		{
			local $/;
			push @haystacks, [ "relay process title ($when)", scalar <$fh> ];
		}
	}
}

for my $t (sort keys %handlers)
{
	$node->safe_psql('app', "SELECT outbox_publish('$t', '{\"topic\": \"$t\", \"n\": $_}')") for 1 .. 2;
}
sample('while delivering');
my $polls = 0;
ok(wait_until(sub {
	sample('while waiting') if ++$polls % 10 == 0;
	$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE state IN ('pending', 'processing')") eq '0' }, 90),
	'every message delivered or dead');
sample('after settling');

is($node->safe_psql('app', "SELECT string_agg(topic || ':' || state, ' ' ORDER BY topic, state) FROM grelout.outbox"),
	'fail:dead fail:dead gone:dead gone:dead refused:dead refused:dead slow:dead slow:dead',
	'the ok and rot messages were delivered, the others are dead');
my $errors = $node->safe_psql('app', "SELECT string_agg(DISTINCT split_part(last_error, ':', 1), ', ') FROM grelout.outbox");
like($errors, qr/HTTP 500/, 'one failure is an HTTP 500');
like($errors, qr/HTTP 410/, 'one failure is an HTTP 410');
like($errors, qr/could not connect/, 'one failure is a refused connection');
like($errors, qr/timed out/, 'one failure is a timeout');
my @signed = grep { $_->{headers}{'webhook-signature'} && $_->{headers}{authorization} } @{ $recv->requests };
cmp_ok(scalar(@signed), '>=', 4 + 2 + 2 + 2, 'the requests were signed and carried the authorization header');
like($recv->requests('/ed')->[0]{headers}{'webhook-signature'}, qr/^v1a,/, 'the signing key signed v1a');
is($recv->requests('/ok')->[0]{headers}{authorization}, "Bearer $token->[2]",
	'the token did reach the receiver (it is what we look for)');

# refused updates: the error must not echo what was refused
my @refusals = (
	[ "UPDATE grelout.handlers SET secret = $bad_short->[0] WHERE topic = 'ok'", qr/invalid handler secret/ ],
	[ "UPDATE grelout.handlers SET previous_secret = $bad_prefix->[0] WHERE topic = 'ok'", qr/invalid handler previous_secret/ ],
	[ "UPDATE grelout.handlers SET secret = $bad_chars->[0] || '!' WHERE topic = 'ok'", qr/invalid handler secret/ ],
	[ "UPDATE grelout.handlers SET secret = $bad_sk->[0] WHERE topic = 'ed'", qr/invalid handler secret/ ],
	[ "SELECT grelout.set_secret('ed', $bad_sk->[0], previous => true)", qr/invalid handler previous_secret/ ],
	[ "UPDATE grelout.handlers SET headers = jsonb_build_object('authorization', 'Bearer ' || "
		  . "encode('\\x" . unpack('H*', MIME::Base64::decode_base64($token->[2])) . "'::bytea, 'base64') || E'\\r\\n') WHERE topic = 'ok'",
		qr/invalid header value/ ]);
for my $r (@refusals)
{
	my ($ret, $out, $err) = $node->psql('app', $r->[0]);
	ok($ret != 0 && $err =~ $r->[1], "refused: $r->[1]");
	push @haystacks, [ 'error message of a refused update', $err ];
}
is($node->safe_psql('app', "SELECT count(*) FROM grelout.handlers WHERE topic = 'ok' AND secret = $s1->[0]"), '1',
	'the refused updates changed nothing');

# the needle search itself works: the handlers table holds the secrets
my $table = $node->safe_psql('app', 'SELECT string_agg(h::text, E\'\\n\') FROM grelout.handlers h');
ok(index($table, $s1->[2]) >= 0 && index($table, $token->[2]) >= 0,
	'control: the search finds the secret and token where they are stored');
like($node->safe_psql('app', "SELECT string_agg(h::text, ' ') FROM grelout.handlers_masked h WHERE topic = 'rot'"),
	qr/\{authorization\},t,t/, 'handlers_masked says there are secrets and which headers, not what they are');

$node->stop;
push @haystacks, [ 'server log', slurp_file($node->logfile) ];
like($haystacks[-1][1], qr/is dead after attempt/, 'the server log holds the dead-letter warnings');
like($haystacks[-1][1], qr/statement: UPDATE grelout\.handlers SET secret = 'whsec_' \|\| encode/,
	'the server log holds the statements (log_statement = all)');

for my $n (@needles)
{
	my @found = map { $_->[0] } grep { index($_->[1] // '', $n->[1]) >= 0 } @haystacks;
	my %seen;
	@found = grep { !$seen{$_}++ } @found;
	is(join(', ', @found), '', "the $n->[0] appears nowhere (" . scalar(@haystacks) . ' places searched)');
}

done_testing();
