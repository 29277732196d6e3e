# Trace context with a real client (issue 33 part 1): a Node program
# (test/webhooks/traced_publish.js) publishes through node-postgres inside
# an active OpenTelemetry span, with @opentelemetry/instrumentation-pg's
# sqlcommenter on, so the query carries /*traceparent='...'*/ of its pg
# span; the webhook then receives a traceparent of that trace, with the
# flags of the span and a span id that is neither the request's nor the
# query's.  (No OTLP exporter: the spans stay in memory.)
use strict;
use warnings;
use File::Basename qw(dirname);
use IPC::Run qw(run);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids);

my $src = $ENV{GRELOUT_SRC} // dirname(__FILE__) . '/../..';
my $webhooks = "$src/test/webhooks";

# npm_ready: install the program's dependencies (npm ci) unless present.
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

ok(npm_ready(), 'npm ci installed pg and the OpenTelemetry packages')
  or BAIL_OUT('cannot publish from Node without them');

my $recv = start_receiver();
my $node = grelout_node('trace_node', "grelout.poll_interval = '200ms'");
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('orders', '"
	  . $recv->url('/orders') . "')");
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');

my $user = getpwuid($<);
my ($out, $err) = ('', '');
my $ran = run [ 'node', "$webhooks/traced_publish.js", $node->host, $node->port, 'app', $user, 'orders' ],
  '<', \undef, '>', \$out, '2>', \$err;
ok($ran, 'the traced Node program published') or diag("node: $out$err");
my $res = eval { decode_json((split /\n/, $out)[-1] // '{}') } // {};
like($res->{message_id} // '', qr/^[0-9a-f-]{36}$/, 'it got the message id');
like($res->{trace_id} // '', qr/^[0-9a-f]{32}$/, 'inside a span of a trace');
is($res->{query_trace_id} // '', $res->{trace_id} // 'none', 'its pg query span is of the same trace');

my $req;
wait_until(sub {
	($req) = grep { ($_->{headers}{'webhook-id'} // '') eq ($res->{message_id} // '') }
	  @{ $recv->requests('/orders') };
	defined $req;
}, 30);
ok($req, 'the webhook received the message');
my $tp = $req ? ($req->{headers}{traceparent} // '') : '';
like($tp, qr/^00-\Q$res->{trace_id}\E-[0-9a-f]{16}-01$/,
	'its traceparent carries the publisher\'s trace id and sampled flag');
my ($span) = $tp =~ /^00-[0-9a-f]{32}-([0-9a-f]{16})-/;
ok(defined $span && $span ne ($res->{request_span_id} // '') && $span ne ($res->{query_span_id} // ''),
	'with a span id of the attempt\'s own');

$node->stop;
$recv->stop;
done_testing();
