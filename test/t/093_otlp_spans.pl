# Span export over OTLP/HTTP (issue 33 part 1): with grelout.otlp_endpoint
# set, the relay exports one span a delivery attempt to a local OTLP
# receiver (test/webhooks/otlp_receiver.js).  A Node program with the
# OpenTelemetry SDK and instrumentation-pg (sqlcommenter on) publishes
# inside a traced request (test/webhooks/traced_publish.js); the span the
# relay exports is of that trace, its parent the publisher's pg span, its
# span id the one of the traceparent the webhook received, with the HTTP
# client and messaging attributes (url.full without the URL's credentials
# or query values).  A failing attempt's span has the ERROR status; a
# message without a trace context gets a root span.  A collector that is
# down, or stuck, delays no delivery, and its spans are counted as dropped
# in grelout.metrics(); so does one that grelout.block_private_networks
# refuses, as it would refuse a webhook's endpoint.
use strict;
use warnings;
use File::Basename qw(dirname);
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run qw(run);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT relay_pids set_conf log_offset log_since);

my $src = $ENV{GRELOUT_SRC} // dirname(__FILE__) . '/../..';
my $webhooks = "$src/test/webhooks";

# npm_ready: install the publisher's dependencies (npm ci) unless present.
sub npm_ready
{
	return 1 if -f "$webhooks/node_modules/\@opentelemetry/instrumentation-pg/package.json"
	  && -f "$webhooks/node_modules/pg/package.json";
	my $cache = PostgreSQL::Test::Utils::tempdir();
	my ($out, $err);
	local $ENV{npm_config_cache} = $cache;
	local $ENV{npm_config_update_notifier} = 'false';
	my $ok = run [ 'npm', 'ci', '--no-audit', '--no-fund' ], '<', \undef, '>', \$out, '2>', \$err,
	  init => sub { chdir $webhooks or die "chdir $webhooks: $!" };
	diag("npm ci failed:\n$out$err") unless $ok;
	return $ok;
}

# start_collector([HOST]): the OTLP receiver, as {pid, host, port}.
sub start_collector
{
	my ($host) = @_;
	$host //= '127.0.0.1';
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>', "$dir/otlp.out");
		open(STDERR, '>&', \*STDOUT);
		exec('node', "$webhooks/otlp_receiver.js", "$dir/port", $host) or die "exec failed: $!";
	}
	wait_until(sub { -s "$dir/port" }, 20) or die "otlp_receiver.js did not start";
	open(my $fh, '<', "$dir/port") or die;
	my $port = <$fh>;
	close $fh;
	return { pid => $pid, host => $host, port => $port };
}

my $http = HTTP::Tiny->new(timeout => 10);

# collector(COLLECTOR, METHOD, WHAT): its control endpoint's JSON.
sub collector
{
	my ($c, $method, $what) = @_;
	my $r = $http->request($method, "http://$c->{host}:$c->{port}/$what");
	die "collector control failed: $r->{status} $r->{content}" unless $r->{success};
	return decode_json($r->{content});
}

# span_of(COLLECTOR, CODE): the first span CODE accepts, waited for.
sub span_of
{
	my ($c, $code) = @_;
	my $found;
	wait_until(sub {
		($found) = grep { $code->($_) } @{ collector($c, 'GET', 'spans') };
		defined $found;
	}, 30);
	return $found;
}

# free_port(): a loopback port nothing listens on.
sub free_port
{
	my $sock = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1', LocalPort => 0)
	  or die "socket: $!";
	my $port = $sock->sockport;
	close $sock;
	return $port;
}

ok(npm_ready(), 'npm ci installed pg and the OpenTelemetry packages')
  or BAIL_OUT('cannot publish from Node without them');

my $otlp = start_collector();
my $recv = start_receiver();
my $rport = $recv->port;
my $node = grelout_node('otlp_spans',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.otlp_endpoint = 'http://127.0.0.1:$otlp->{port}/v1/traces'");
sub sq { return $node->safe_psql('app', $_[0]); }
sub metric
{
	return sq("SELECT coalesce(sum(value), 0) FROM grelout.metrics() WHERE metric = '$_[0]'");
}

sq("INSERT INTO grelout.handlers (name, topic, url) VALUES
	('orders-hook', 'orders', 'http://alice:s3cret\@127.0.0.1:$rport/orders?token=qzxk&v=2'),
	('failing-hook', 'failing', 'http://127.0.0.1:$rport/fail')");
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');

# 1. the traced Node publisher
my $user = getpwuid($<);
my ($out, $err) = ('', '');
my $ran = run [ 'node', "$webhooks/traced_publish.js", $node->host, $node->port, 'app', $user, 'orders' ],
  '<', \undef, '>', \$out, '2>', \$err;
ok($ran, 'the traced Node program published') or diag("node: $out$err");
my $pub = eval { decode_json((split /\n/, $out)[-1] // '{}') } // {};
like($pub->{query_span_id} // '', qr/^[0-9a-f]{16}$/, 'its pg query span is known');

my $req;
wait_until(sub {
	($req) = grep { ($_->{headers}{'webhook-id'} // '') eq ($pub->{message_id} // '') }
	  @{ $recv->requests('/orders') };
	defined $req;
}, 30);
ok($req, 'the webhook received the message');
my ($sent_span) = ($req ? $req->{headers}{traceparent} // '' : '') =~ /^00-[0-9a-f]{32}-([0-9a-f]{16})-01$/;
ok(defined $sent_span, 'with a traceparent');
$sent_span //= 'none';

my $span = span_of($otlp, sub { ($_[0]{attrs}{'messaging.message.id'} // '') eq ($pub->{message_id} // '-') });
ok($span, 'the collector received the attempt\'s span');
$span //= { attrs => {} };
my $at = $span->{attrs};
is($span->{traceId}, $pub->{trace_id}, 'its traceId is the publisher\'s trace');
is($span->{parentSpanId}, $pub->{query_span_id},
	'its parent is the publisher\'s span (the sqlcommenter traceparent\'s)');
is($span->{spanId}, $sent_span, 'its spanId is the one the webhook\'s traceparent carried');
is($span->{kind}, 3, 'kind CLIENT');
is($span->{name}, 'POST', 'named by the HTTP method');
ok(($span->{startTimeUnixNano} // 0) > 0 && $span->{endTimeUnixNano} >= $span->{startTimeUnixNano}
	  && abs($span->{endTimeUnixNano} / 1e9 - time()) < 60,
	'its start and end are Unix nanoseconds, now');
is($at->{'http.request.method'}, 'POST', 'http.request.method');
is($at->{'http.response.status_code'}, 204, 'http.response.status_code');
is($at->{'server.address'}, '127.0.0.1', 'server.address');
is($at->{'server.port'}, $rport, 'server.port');
is($at->{'url.full'}, "http://REDACTED:REDACTED\@127.0.0.1:$rport/orders?token=REDACTED&v=REDACTED",
	'url.full without credentials or query values');
# (a query value of letters no hex id can hold: the trace and span ids
# are random hex, and once held "abc")
unlike(encode_json($span), qr/s3cret|alice|qzxk/, 'no secret anywhere in the span');
is($at->{'messaging.destination.name'}, 'orders', 'messaging.destination.name is the topic');
is($at->{'grelout.handler'}, 'orders-hook', 'grelout.handler');
is($at->{'grelout.attempt'}, 1, 'grelout.attempt');
ok(!exists $span->{status} || ($span->{status}{code} // 0) != 2, 'no error status');
is($span->{resource}{'service.name'}, 'grelout', 'resource service.name');
is($span->{scope}, 'grelout', 'scope name');
like(collector($otlp, 'GET', 'stats')->{content_types}[0] // '', qr{^application/json},
	'sent as OTLP JSON');

# 2. a failing attempt, then its retry, under a trace context set in SQL
my $trace = '4bf92f3577b34da6a3ce929d0e0e4736';
my $parent = '00f067aa0ba902b7';
$recv->script('/fail', [ { status => 503, body => 'not yet' } ], {});
my $id = sq("BEGIN;
	SET LOCAL grelout.traceparent = '00-$trace-$parent-01';
	SELECT outbox_publish('failing', '{\"n\": 1}');
	COMMIT;");
my $failed = span_of($otlp, sub { ($_[0]{attrs}{'messaging.message.id'} // '') eq $id
	  && $_[0]{attrs}{'grelout.attempt'} == 1 });
ok($failed, 'the failed attempt\'s span arrived');
$failed //= { attrs => {} };
is($failed->{status}{code}, 2, 'with the ERROR status');
is($failed->{status}{message}, '503', 'its message the error type');
is($failed->{attrs}{'http.response.status_code'}, 503, 'and the answer\'s status code');
is($failed->{attrs}{'error.type'}, '503', 'error.type');
is($failed->{traceId}, $trace, 'of the publisher\'s trace');
is($failed->{parentSpanId}, $parent, 'child of the publisher\'s span');
my $retry = span_of($otlp, sub { ($_[0]{attrs}{'messaging.message.id'} // '') eq $id
	  && $_[0]{attrs}{'grelout.attempt'} == 2 });
ok($retry && !exists $retry->{status} && $retry->{attrs}{'http.response.status_code'} == 204,
	'the retry\'s span: attempt 2, a success');
ok($retry && $retry->{spanId} ne $failed->{spanId} && $retry->{parentSpanId} eq $parent,
	'a span id of its own, the same parent');

# 3. no trace context: a root span of a new trace
my $plain = sq("SELECT outbox_publish('orders', '{}')");
my $root = span_of($otlp, sub { ($_[0]{attrs}{'messaging.message.id'} // '') eq $plain });
ok($root && !exists $root->{parentSpanId} && ($root->{traceId} // '') =~ /^[0-9a-f]{32}$/
	  && $root->{traceId} !~ /^0+$/ && $root->{spanId} =~ /^[0-9a-f]{16}$/,
	'no trace context: a root span with new ids');

# 4. an unsampled trace: no span
my $unsampled = sq("BEGIN;
	SET LOCAL grelout.traceparent = '00-$trace-$parent-00';
	SELECT outbox_publish('orders', '{}');
	COMMIT;");
wait_until(sub { grep { ($_->{headers}{'webhook-id'} // '') eq $unsampled } @{ $recv->requests('/orders') } }, 30);
my $marker = sq("SELECT outbox_publish('orders', '{}')");
ok(span_of($otlp, sub { ($_[0]{attrs}{'messaging.message.id'} // '') eq $marker }),
	'a later message\'s span arrived');
ok(!grep({ ($_->{attrs}{'messaging.message.id'} // '') eq $unsampled } @{ collector($otlp, 'GET', 'spans') }),
	'an unsampled trace got no span');

my $received = scalar(@{ collector($otlp, 'GET', 'spans') });
is($received, 5, 'five spans received: two attempts of one message, one of three others');
is(metric('grelout_relay_spans_exported_total'), $received,
	'grelout.metrics() counts the exported spans');
is(metric('grelout_relay_spans_dropped_total'), '0', 'none dropped');

# 5. a collector that is down: deliveries as fast, spans dropped and counted
set_conf($node, 'grelout.otlp_endpoint' => 'http://127.0.0.1:' . free_port() . '/v1/traces');
my $log = log_offset($node);
my $t0 = time();
my @ids = map { sq("SELECT outbox_publish('orders', '{\"down\": $_}')") } 1 .. 5;
ok(wait_until(sub {
	my %got = map { ($_->{headers}{'webhook-id'} // '') => 1 } @{ $recv->requests('/orders') };
	!grep { !$got{$_} } @ids;
}, 30), 'with the collector down, every message is delivered');
my $took = time() - $t0;
cmp_ok($took, '<', 5, 'promptly');
ok(wait_until(sub { metric('grelout_relay_spans_dropped_total') >= 5 }, 10),
	'their spans are counted as dropped');
ok(wait_until(sub { log_since($node, $log) =~ /could not export \d+ spans to the OTLP collector/ }, 10),
	'the failed export is logged');

# 6. a stuck collector: deliveries not delayed while an export hangs
collector($otlp, 'POST', 'hang');
my $before = collector($otlp, 'GET', 'stats')->{requests};
set_conf($node, 'grelout.otlp_endpoint' => "http://127.0.0.1:$otlp->{port}/v1/traces");
my $dropped = metric('grelout_relay_spans_dropped_total');
sq("SELECT outbox_publish('orders', '{\"stuck\": 0}')");
ok(wait_until(sub { collector($otlp, 'GET', 'stats')->{requests} > $before }, 10),
	'an export reached the stuck collector');
my $hung = collector($otlp, 'GET', 'stats')->{requests};
$t0 = time();
@ids = map { sq("SELECT outbox_publish('orders', '{\"stuck\": $_}')") } 1 .. 5;
ok(wait_until(sub {
	my %got = map { ($_->{headers}{'webhook-id'} // '') => 1 } @{ $recv->requests('/orders') };
	!grep { !$got{$_} } @ids;
}, 30), 'with an export hanging, every message is delivered');
cmp_ok(time() - $t0, '<', 3, 'promptly');
is(collector($otlp, 'GET', 'stats')->{requests}, $hung, 'no second export while one is in flight');
ok(wait_until(sub { metric('grelout_relay_spans_dropped_total') > $dropped }, 15),
	'the hung export times out, its spans counted as dropped');

# 7. the SSRF rules: a collector at a blocked address is refused, as an
# endpoint would be (the webhooks' 127.0.0.1 allowed, the collector's
# 127.0.0.2 not)
my $blocked = start_collector('127.0.0.2');
$log = log_offset($node);
set_conf($node, 'grelout.block_private_networks' => 'on',
	'grelout.allowed_networks' => '127.0.0.1/32',
	'grelout.otlp_endpoint' => "http://127.0.0.2:$blocked->{port}/v1/traces");
$dropped = metric('grelout_relay_spans_dropped_total');
@ids = map { sq("SELECT outbox_publish('orders', '{\"blocked\": $_}')") } 1 .. 3;
ok(wait_until(sub {
	my %got = map { ($_->{headers}{'webhook-id'} // '') => 1 } @{ $recv->requests('/orders') };
	!grep { !$got{$_} } @ids;
}, 30), 'with the collector at a blocked address, every message is delivered');
ok(wait_until(sub { metric('grelout_relay_spans_dropped_total') >= $dropped + 3 }, 20),
	'the spans are dropped and counted');
is(collector($blocked, 'GET', 'stats')->{requests}, 0, 'the blocked collector got nothing');
like(log_since($node, $log), qr/could not export \d+ spans to the OTLP collector: refused to connect to loopback address 127\.0\.0\.2/,
	'the export was refused by grelout.block_private_networks');

$node->stop;
$recv->stop;
for my $c ($otlp, $blocked)
{
	kill 'TERM', $c->{pid};
	waitpid($c->{pid}, 0);
}
done_testing();
