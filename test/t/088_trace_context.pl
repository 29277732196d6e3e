# W3C trace context, end to end (issue 33 part 1): a message published
# under a trace context (SET LOCAL grelout.traceparent, a message header, a
# sqlcommenter comment of a captured write) is delivered with a
# traceparent of the publisher's trace id and flags and a span id of each
# attempt's own, and the tracestate as received; a message without one
# gets no traceparent; a 1.1 row's traceparent that is not valid is sent
# as it was stored.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids);

my $recv = start_receiver();
my $node = grelout_node('trace_context',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0");
sub sq { return $node->safe_psql('app', $_[0]); }

my $port = $recv->port;
sq("INSERT INTO grelout.handlers (topic, url) VALUES
	('traced', 'http://127.0.0.1:$port/traced'),
	('items.#', 'http://127.0.0.1:$port/items')");
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');

# requests_of(PATH, ID, N): the first N requests that carried the message
sub requests_of
{
	my ($path, $id, $n) = @_;
	my @reqs;
	wait_until(sub {
		@reqs = grep { ($_->{headers}{'webhook-id'} // '') eq $id } @{ $recv->requests($path) };
		@reqs >= $n;
	}, 30);
	return @reqs;
}

# values_of(REQ, NAME): the values of every header line with that name
sub values_of
{
	my ($req, $name) = @_;
	return join('|', map { $_->[1] } grep { $_->[0] eq $name } @{ $req->{header_list} // [] });
}

my $trace = '4bf92f3577b34da6a3ce929d0e0e4736';
my $parent = '00f067aa0ba902b7';

# 1. SET LOCAL, two attempts: the first answered 503
$recv->script('/traced', [ { status => 503, body => 'not yet' } ], {});
my $id = sq("BEGIN;
	SET LOCAL grelout.traceparent = '00-$trace-$parent-01';
	SET LOCAL grelout.tracestate = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
	SELECT outbox_publish('traced', '{\"n\": 1}');
	COMMIT;");
my @reqs = requests_of('/traced', $id, 2);
is(scalar(@reqs), 2, 'two attempts of the traced message');
my @spans;
for my $i (0 .. $#reqs)
{
	my $r = $reqs[$i];
	my $n = $i + 1;
	my $tp = values_of($r, 'traceparent');
	like($tp, qr/^00-$trace-[0-9a-f]{16}-01$/,
		"attempt $n: one traceparent, the publisher's trace id and flags");
	my ($span) = $tp =~ /^00-[0-9a-f]{32}-([0-9a-f]{16})-/;
	$span //= '';
	isnt($span, $parent, "attempt $n: a span id other than the publisher's");
	isnt($span, '0' x 16, "attempt $n: not all zeros");
	is(values_of($r, 'tracestate'), 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE',
		"attempt $n: the tracestate as received");
	is($r->{headers}{'grelout-attempt'}, $n, "attempt $n: grelout-attempt $n");
	push @spans, $span;
}
isnt($spans[0], $spans[1], 'each attempt has a span id of its own');

# 2. a message header, flags 00, kept as the trace's
$id = sq("SELECT outbox_publish('traced', '{\"n\": 2}', headers =>
	'{\"TraceParent\": \"00-$trace-$parent-00\", \"x-other\": \"yes\"}')");
(my $r) = requests_of('/traced', $id, 1);
like(values_of($r, 'traceparent'), qr/^00-$trace-(?!$parent)[0-9a-f]{16}-00$/,
	'from a message header: the trace id and flags 00, a new span id');
is(values_of($r, 'tracestate'), '', 'no tracestate when none was given');
is(values_of($r, 'x-other'), 'yes', 'the other message headers are sent');

# 3. no trace context: no traceparent
$id = sq("SELECT outbox_publish('traced', '{\"n\": 3}')");
($r) = requests_of('/traced', $id, 1);
ok($r && values_of($r, 'traceparent') eq '', 'no trace context: no traceparent sent');

# 4. a captured write with a sqlcommenter comment
my $ctrace = 'a3ce929d0e0e47364bf92f3577b34da6';
sq("CREATE TABLE items (id int PRIMARY KEY, name text);
	SELECT grelout.capture('items', topic => 'items');");
sq("INSERT INTO items VALUES (1, 'one') /*controller='items',traceparent='00-$ctrace-b7ad6b7169203331-01'*/");
# (delivered and deleted at once: the only request to /items is its)
ok(wait_until(sub { $recv->count('/items') >= 1 }, 30), 'the captured row change is delivered');
($r) = @{ $recv->requests('/items') };
like(values_of($r, 'traceparent'), qr/^00-$ctrace-(?!b7ad6b7169203331)[0-9a-f]{16}-01$/,
	'a captured row change: the writing statement\'s trace id, a new span id');

# 5. a row stored around the checks (as under 1.1) with a traceparent that
# is not valid: sent as it is
$id = sq("INSERT INTO grelout.outbox (id, topic, payload, headers)
	VALUES (gen_random_uuid(), 'traced', '{}', '{\"traceparent\": \"not-a-traceparent\"}') RETURNING id");
($r) = requests_of('/traced', $id, 1);
is(values_of($r, 'traceparent'), 'not-a-traceparent', 'a stored invalid traceparent is sent as it is');

$node->stop;
$recv->stop;
done_testing();
