# The relay delivers committed messages to a live receiver: the full request
# with every header of the contract, the relay's presence and counters, a
# delayed message, a topic without a handler and a disabled handler (both
# wait, then deliver without a restart), a redirect that is not followed, and
# grelout.keep_delivered (on, an interval purged by the relay, off).
use strict;
use warnings;
use Encode qw(encode_utf8);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT relay_pids set_conf);

my $recv = start_receiver();
my $node = grelout_node('delivery',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($topic, $path, $extra) = @_;
	my $url = $recv->url($path);
	my ($cols, $vals) = ('', '');
	if ($extra)
	{
		$cols = ', ' . join(', ', keys %$extra);
		$vals = ', ' . join(', ', values %$extra);
	}
	sq("INSERT INTO grelout.handlers (topic, url$cols) VALUES ('$topic', '$url'$vals)");
}

sub row_count { return sq("SELECT count(*) FROM grelout.outbox WHERE id = '$_[0]'"); }

# ---- the relay is there
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 30),
	'one relay in pg_stat_activity with backend_type "grelout relay"');
is($node->safe_psql('postgres',
		"SELECT datname FROM pg_stat_activity WHERE backend_type = 'grelout relay'"),
	'app', 'the relay is connected to grelout.database');
my $pid;
ok(wait_until(sub {
	($pid) = relay_pids($node);
	defined $pid && sq('SELECT count(*) || \' \' || max(pid) FROM grelout.relays') eq "1 $pid";
}, 30), 'grelout.relays has one row, with the pid of the relay in pg_stat_activity');
like(sq('SELECT activity FROM grelout.relays'), qr/^(idle|delivering)$/, 'grelout.relays shows the activity');
my $delivered_before = sq('SELECT delivered FROM grelout.relays');

# ---- full cycle with every header
handler('full', '/full', {
	headers => q{'{"Authorization": "Bearer t0ken", "X-Static": "static-1"}'} });
my $payload = '{"order": 42, "items": [1, 2, {"sku": "caf\u00e9-1"}], "ok": true, "note": null}';
my $expected_body = sq("SELECT '$payload'::jsonb::text");
my $extversion = sq("SELECT extversion FROM pg_extension WHERE extname = 'grelout'");
my $t_before = time();
my $id = sq("SELECT outbox_publish('full', '$payload', key => 'order-42',
	headers => '{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\", \"X-Correlation-Id\": \"corr-7\"}')");
like($id, qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
	'outbox_publish returned a UUIDv7');
ok(wait_until(sub { $recv->count('/full') >= 1 }, 30), 'message received');
my $r = $recv->requests('/full')->[0];
my $h = $r->{headers};
is($r->{method}, 'POST', 'method is POST');
is($h->{'content-type'}, 'application/json', 'content-type');
is($h->{'user-agent'}, "grelout/$extversion", 'user-agent is grelout/<extension version>');
is($h->{'user-agent'}, 'grelout/1.2', 'user-agent is grelout/1.2');
is($h->{'webhook-id'}, $id, 'webhook-id is the id outbox_publish returned');
like($h->{'webhook-timestamp'} // '', qr/^\d+$/, 'webhook-timestamp is Unix seconds');
ok(($h->{'webhook-timestamp'} // 0) >= int($t_before) - 1
	  && ($h->{'webhook-timestamp'} // 0) <= $r->{received_at} + 1,
	'webhook-timestamp is the time of the attempt');
is($h->{'grelout-topic'}, 'full', 'grelout-topic');
is($h->{'grelout-attempt'}, '1', 'grelout-attempt is 1 on the first attempt');
is($h->{'grelout-key'}, 'order-42', 'grelout-key');
is($h->{'authorization'}, 'Bearer t0ken', 'handler static header Authorization');
is($h->{'x-static'}, 'static-1', 'handler static header X-Static');
# the trace context goes on with a span id of the attempt's own (issue 33)
like($h->{'traceparent'}, qr/^00-4bf92f3577b34da6a3ce929d0e0e4736-(?!00f067aa0ba902b7)[0-9a-f]{16}-01$/,
	'message header traceparent: its trace id and flags, a new span id');
is($h->{'x-correlation-id'}, 'corr-7', 'message header X-Correlation-Id');
ok(!exists $h->{'webhook-signature'}, 'no webhook-signature without a secret');
is(encode_utf8($r->{body}), $expected_body, 'body is the payload JSON text');
my %pos;
my @names = map { $_->[0] } @{ $r->{header_list} };
for my $i (reverse 0 .. $#names) { $pos{ $names[$i] } = $i; }
ok($pos{'grelout-topic'} < $pos{'authorization'} && $pos{'authorization'} < $pos{'traceparent'}
	  && $pos{'x-static'} < $pos{'x-correlation-id'},
	'contract headers, then handler headers, then message headers');
ok(wait_until(sub { row_count($id) eq '0' }, 30), 'row deleted after delivery');

# a message without a key carries no grelout-key
my $id2 = sq("SELECT outbox_publish('full', '[]')");
ok(wait_until(sub { $recv->count('/full') >= 2 }, 30), 'second message received');
$r = $recv->requests('/full')->[1];
is($r->{headers}{'webhook-id'}, $id2, 'second request is the second message');
ok(!exists $r->{headers}{'grelout-key'}, 'no grelout-key header when the key is NULL');
is($r->{body}, '[]', 'a JSON array payload is sent as is');

# the relay's counters in grelout.relays
ok(wait_until(sub { sq('SELECT delivered FROM grelout.relays') == $delivered_before + 2 }, 30),
	'grelout.relays counts the two deliveries');
is(sq('SELECT retried + dead_lettered FROM grelout.relays'), '0', 'nothing retried or dead so far');
ok(sq('SELECT started_at <= now() FROM grelout.relays') eq 't', 'grelout.relays started_at set');

# ---- a large payload arrives whole
handler('big', '/big');
my $bid = sq("SELECT outbox_publish('big', jsonb_build_object('blob', repeat('x', 500000)))");
ok(wait_until(sub { $recv->count('/big') >= 1 }, 30), 'a 500 kB payload is delivered');
is(length($recv->requests('/big')->[0]{body}), length(sq("SELECT jsonb_build_object('blob', repeat('x', 500000))::text")),
	'the whole payload arrived');

# ---- a handler's URL can be changed while its message is retried
$recv->script('/old', [], { status => 500, body => 'old endpoint broken' });
handler('move', '/old');
my $mid = sq("SELECT outbox_publish('move', '{\"m\": 1}')");
ok(wait_until(sub { $recv->count('/old') >= 1 }, 30), 'the message fails at the old URL');
my $new_url = $recv->url('/new');
sq("UPDATE grelout.handlers SET url = '$new_url' WHERE topic = 'move'");
ok(wait_until(sub { $recv->count('/new') >= 1 }, 30), 'the next attempt goes to the new URL, without a restart');
is($recv->requests('/new')->[0]{headers}{'webhook-id'}, $mid, 'it is that message');
ok(wait_until(sub { row_count($mid) eq '0' }, 30), 'and it is delivered there');

# ---- delay
handler('later', '/later');
my ($lid, $created) = split /\|/, sq("SELECT outbox_publish('later', '{\"d\": 1}', delay => '2 seconds'),
	extract(epoch FROM now())");
is(sq("SELECT state FROM grelout.outbox WHERE id = '$lid'"), 'pending', 'delayed message waits as pending');
ok(wait_until(sub { $recv->count('/later') >= 1 }, 30), 'delayed message received');
$r = $recv->requests('/later')->[0];
ok($r->{received_at} >= $created + 1.99,
	sprintf('delayed message not received before its delay (%.2f s after publish)',
		$r->{received_at} - $created));

# ---- no handler, then a handler
my $oid = sq("SELECT outbox_publish('orphan', '{\"o\": 1}')");
usleep(1_500_000);    # several poll intervals of 200 ms
is($recv->count('/orphan'), 0, 'a message without a handler is not sent');
is(sq("SELECT state || ' ' || attempts FROM grelout.outbox WHERE id = '$oid'"), 'pending 0',
	'it stays pending with no attempt counted, not dead');
is(sq("SELECT pending || ' ' || dead || ' ' || has_handler FROM grelout.status WHERE topic = 'orphan'"),
	'1 0 false', 'grelout.status shows it pending without handler');
handler('orphan', '/orphan');
ok(wait_until(sub { $recv->count('/orphan') >= 1 }, 30),
	'delivered once a handler is added, without a restart');
is($recv->requests('/orphan')->[0]{headers}{'webhook-id'}, $oid, 'it is that message');
ok(wait_until(sub { row_count($oid) eq '0' }, 30), 'and its row is deleted');

# ---- disabled handler
handler('paused', '/paused', { enabled => 'false' });
my $pid2 = sq("SELECT outbox_publish('paused', '{\"p\": 1}')");
usleep(1_500_000);
is($recv->count('/paused'), 0, 'a disabled handler gets nothing');
is(sq("SELECT state || ' ' || attempts FROM grelout.outbox WHERE id = '$pid2'"), 'pending 0',
	'its message waits, pending, no attempt counted');
sq("UPDATE grelout.handlers SET enabled = true WHERE topic = 'paused'");
ok(wait_until(sub { $recv->count('/paused') >= 1 }, 30), 'enabling the handler delivers it');
is($recv->requests('/paused')->[0]{headers}{'webhook-id'}, $pid2, 'it is that message');

# ---- redirects are not followed
$recv->script('/redir', [], { status => 302, headers => { Location => $recv->url('/target') } });
handler('redir', '/redir', { max_attempts => 2 });
my $rid = sq("SELECT outbox_publish('redir', '{\"r\": 1}')");
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$rid'") eq 'dead' }, 30),
	'a message answered only with 302 goes dead after its attempts');
like(sq("SELECT last_error FROM grelout.outbox WHERE id = '$rid'"), qr/^HTTP 302\b/,
	'last_error names the 302');
is($recv->count('/redir'), 2, 'the redirecting endpoint got both attempts');
is($recv->count('/target'), 0, 'the redirect target got nothing');

# ---- keep_delivered
handler('keep', '/keep');
set_conf($node, 'grelout.keep_delivered' => 'on');
my $k1 = sq("SELECT outbox_publish('keep', '{\"k\": 1}')");
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$k1'") eq 'delivered' }, 30),
	'keep_delivered = on: the row is kept as delivered');
is(sq("SELECT delivered_at IS NOT NULL AND delivered_at >= created_at FROM grelout.outbox WHERE id = '$k1'"),
	't', 'delivered_at is set');
is($recv->count('/keep'), 1, 'kept row was delivered once');
is(sq("SELECT delivered FROM grelout.status WHERE topic = 'keep'"), '1',
	'grelout.status counts it delivered');

set_conf($node, 'grelout.keep_delivered' => '3s');
my $k2 = sq("SELECT outbox_publish('keep', '{\"k\": 2}')");
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$k2'") eq 'delivered' }, 30),
	'keep_delivered = 3s: the row is kept as delivered at first');
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE id IN ('$k1', '$k2')") eq '0' }, 60),
	'the relay purges delivered rows older than the interval');
is(sq("SELECT state FROM grelout.outbox WHERE id = '$rid'"), 'dead',
	'a dead row is never purged by the relay');

set_conf($node, 'grelout.keep_delivered' => 'off');
my $k3 = sq("SELECT outbox_publish('keep', '{\"k\": 3}')");
ok(wait_until(sub { $recv->count('/keep') >= 3 }, 30), 'keep_delivered = off: delivered');
ok(wait_until(sub { row_count($k3) eq '0' }, 30), 'keep_delivered = off: the row is deleted');

$node->stop;
$recv->stop;
done_testing();
