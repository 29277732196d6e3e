# A hostile or broken endpoint cannot hurt the relay: a 50 MB or endless
# response body is cut after a small bound, a 2xx one still settles the
# message as delivered on its first attempt, an error one leaves a short
# last_error, a silent endpoint times out at the handler's timeout, and
# meanwhile other messages flow and the relay's memory (VmRSS from /proc)
# (VmHWM, its peak resident set, from /proc) does not grow by more than a
# few megabytes.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('bigresp',
	"grelout.keep_delivered = on",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '500ms'");

my %script = (
	huge => { status => 200, size => 50_000_000 },
	endless => { status => 200, endless => JSON::PP::true },
	huge500 => { status => 500, size => 50_000_000 },
	endless503 => { status => 503, endless => JSON::PP::true },
	silent => { status => 204, delay => 30 },
	fast => { status => 204 },
);
for my $t (sort keys %script)
{
	$recv->script("/$t", [], $script{$t});
	my $timeout = $t eq 'silent' ? '1s' : '20s';
	$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, timeout, max_attempts) VALUES ('$t', '"
		  . $recv->url("/$t") . "', '$timeout', 1)");
}

my $pid;
ok(wait_until(sub { $pid = $node->safe_psql('app', 'SELECT pid FROM grelout.relays LIMIT 1'); $pid =~ /^\d+$/ }, 30),
	'the relay is running');

# rss_kb([FIELD]): the relay's resident memory now (VmRSS), or its peak
# so far (VmHWM), which no short-lived allocation can escape
sub rss_kb
{
	my ($field) = @_;
	$field //= 'VmRSS';
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	my ($kb) = join('', <$fh>) =~ /^$field:\s+(\d+) kB/m;
	return $kb;
}

# warm the relay up (libcurl, a first connection), then take the baseline
$node->safe_psql('app', "SELECT outbox_publish('fast', '{\"warm\": $_}')") for 1 .. 3;
ok(wait_until(sub { $recv->count('/fast') == 3 }, 30), 'warm-up messages delivered');
my $base = rss_kb();
my $base_hwm = rss_kb('VmHWM');
ok(defined $base && defined $base_hwm, "the relay's VmRSS and VmHWM are readable ($base kB, peak $base_hwm kB)");
my $peak = $base;

# settled(TOPIC): the message is delivered or dead; sample memory meanwhile
sub settled
{
	my ($topic) = @_;
	return wait_until(sub {
		my $rss = rss_kb();
		$peak = $rss if defined $rss && $rss > $peak;
		$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic = '$topic' AND state IN ('pending', 'processing')")
		  eq '0';
	}, 90);
}

for my $round (1 .. 2)
{
	for my $t (qw(huge endless huge500 endless503))
	{
		$node->safe_psql('app', "SELECT outbox_publish('$t', '{\"round\": $round}')");
		ok(settled($t), "$t (round $round): settled");
		$node->safe_psql('app', "DELETE FROM grelout.outbox WHERE topic = '$t' AND state = 'dead'")
		  if $round == 1 && $t =~ /\d/;
	}
}

for my $t (qw(huge endless))
{
	is($node->safe_psql('app', "SELECT string_agg(state || '/' || attempts || '/' || coalesce(last_error, 'none'), ' ') FROM grelout.outbox WHERE topic = '$t'"),
		'delivered/1/none delivered/1/none',
		"$t: a 2xx with a body cut short is delivered on the first attempt, twice");
	is($recv->count("/$t"), 2, "$t: one request per message");
}

my $err = $node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'huge500'");
like($err, qr/^HTTP 500: y{16}/, 'a 50 MB error body: last_error has its start');
cmp_ok(length($err), '<=', 512, 'and stays short (' . length($err) . ' bytes)');
$err = $node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'endless503'");
like($err, qr/^HTTP 503: x{16}/, 'an endless error body: last_error has its start');
cmp_ok(length($err), '<=', 512, 'and stays short (' . length($err) . ' bytes)');

# a silent endpoint: timed out at the handler's timeout while others flow
$node->safe_psql('app', "SELECT outbox_publish('silent', '{\"s\": 1}')");
ok(wait_until(sub { $recv->count('/silent') == 1 }, 30), 'the silent endpoint got its request');
$node->safe_psql('app', "SELECT outbox_publish('fast', '{\"during\": $_}')") for 1 .. 5;
ok(wait_until(sub { $recv->count('/fast') == 8 }, 30), 'other messages are delivered while one request hangs');
ok(settled('silent'), 'the hanging request is settled');
like($node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'silent'"),
	qr/^timed out after 1000 ms/, 'last_error says it timed out after the handler timeout');

my $growth = $peak - $base;
cmp_ok($growth, '<', 20 * 1024, "the relay's VmRSS grew by $growth kB at most (under 20 MB) with 50 MB and endless bodies offered");
my $hwm_growth = rss_kb('VmHWM') - $base_hwm;
cmp_ok($hwm_growth, '<', 20 * 1024, "the relay's peak resident set (VmHWM) grew by $hwm_growth kB (under 20 MB)");
is($node->safe_psql('app', 'SELECT pid FROM grelout.relays LIMIT 1'), $pid, 'the same relay process did it all (no crash, no restart)');

$node->stop;
done_testing();
