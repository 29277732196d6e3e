# Fan-out (1.1), the relay side, against a live receiver: a message to
# three matching handlers arrives once at each with the same webhook-id and
# its handler's name in grelout-handler; one failing handler retries and
# dies alone while the others are delivered (the message reads pending,
# then dead) and is redriven by handler; patterns and filters route
# exactly; a message with no match waits and goes to a handler created
# later; a handler created after routing does not get it; disabling pauses
# one handler only; deleting a handler drops its deliveries only, and
# DELETE then INSERT loses nothing; a handler insert in progress holds
# routing back until it commits; a delayed message is routed at once and
# sent when due; last_status and last_duration_ms of both kinds; the
# retention purge and keep_delivered = off remove a fan-out message with its
# rows, a delivered row at once (its message keeps that it was, for a
# handler's deletion); a stopping relay hands fan-out claims back; more
# deliveries than request slots are all delivered.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest qw(:DEFAULT set_conf);

my $recv = start_receiver();
my $node = grelout_node('fanout',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '200ms'",
	"grelout.retry_jitter = 0",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

# handler(NAME, PATTERN, PATH, EXTRA_COLUMNS): a handler posting to PATH.
sub handler
{
	my ($name, $pattern, $path, $extra) = @_;
	my $url = $recv->url($path);
	my ($cols, $vals) = ('', '');
	for my $c (sort keys %{ $extra // {} })
	{
		$cols .= ", $c";
		$vals .= ", $extra->{$c}";
	}
	sq("INSERT INTO grelout.handlers (name, topic, url$cols)"
		. " VALUES ('$name', '$pattern', '$url'$vals)");
}

sub publish
{
	my ($topic, $payload, $more) = @_;
	$payload //= '{}';
	$more = $more ? ", $more" : '';
	return sq("SELECT outbox_publish('$topic', '$payload'$more)");
}

sub msg { return sq("SELECT $_[1] FROM grelout.outbox WHERE id = '$_[0]'"); }

# rows(ID): "handler:state" of each fan-out row of a message, by handler.
sub rows
{
	return sq("SELECT string_agg(handler || ':' || state, ',' ORDER BY handler)"
		. " FROM grelout.fanout WHERE message_id = '$_[0]'");
}

sub routed { my ($id) = @_; return wait_until(sub { msg($id, 'route') ne 'new' }, 30); }

# ---- one message, three handlers: once at each, same webhook-id
handler('a-exact', 'a.order.created', '/a1');
handler('a-star', 'a.order.*', '/a2');
handler('a-all', 'a.#', '/a3');
my $t0 = time();
my $a = publish('a.order.created', '{"n": 1}');
ok(wait_until(sub {
	$recv->count('/a1') >= 1 && $recv->count('/a2') >= 1 && $recv->count('/a3') >= 1 }, 30),
	'a message matching three handlers reaches each');
ok(wait_until(sub { msg($a, 'state') eq 'delivered' }, 30),
	'the message reads delivered once all three are');
my %seen;
for my $p ('/a1', '/a2', '/a3')
{
	my $reqs = $recv->requests($p);
	is(scalar(@$reqs), 1, "$p received it once");
	is($reqs->[0]{headers}{'webhook-id'}, $a, "$p: webhook-id is the message id");
	is($reqs->[0]{headers}{'grelout-topic'}, 'a.order.created', "$p: grelout-topic");
	$seen{$p} = $reqs->[0]{headers}{'grelout-handler'};
}
is_deeply(\%seen, { '/a1' => 'a-exact', '/a2' => 'a-star', '/a3' => 'a-all' },
	'grelout-handler carries each handler\'s name');
is(msg($a, 'route'), 'fanout', 'routed as a fan-out message');
is(rows($a), 'a-all:delivered,a-exact:delivered,a-star:delivered',
	'one delivered row per handler');
is(sq("SELECT count(*) FROM grelout.fanout WHERE message_id = '$a'"
		. " AND last_status = 204 AND last_duration_ms >= 0 AND delivered_at IS NOT NULL"
		. " AND attempts = 1 AND lease IS NULL"),
	'3', 'each row has last_status, last_duration_ms, delivered_at, one attempt');

# ---- one of three fails: it retries and dies alone; redrive by handler
handler('b-ok1', 'b.t', '/b1');
handler('b-ok2', 'b.t', '/b2');
handler('b-bad', 'b.t', '/b3', { max_attempts => 3 });
$recv->script('/b3', [], { status => 500, body => 'down' });
my $b = publish('b.t');
ok(wait_until(sub { rows($b) =~ /b-ok1:delivered,b-ok2:delivered/ }, 30),
	'the two healthy handlers are delivered');
ok(wait_until(sub { rows($b) eq 'b-bad:dead,b-ok1:delivered,b-ok2:delivered' }, 30),
	'the failing one retries and dies alone');
is($recv->count('/b3'), 3, 'the failing handler got max_attempts attempts');
is($recv->count('/b1') . ' ' . $recv->count('/b2'), '1 1',
	'the healthy handlers got the message once each');
is(sq("SELECT attempts || ' ' || last_status || ' ' || (last_error LIKE 'HTTP 500%')"
		. " || ' ' || (dead_at IS NOT NULL)"
		. " FROM grelout.fanout WHERE message_id = '$b' AND handler = 'b-bad'"),
	'3 500 true true', 'the dead row: attempts, last_status, last_error, dead_at');
is(msg($b, 'state'), 'dead', 'the message reads dead once its deliveries are finished');
$recv->script('/b3', [], { status => 204 });
is(sq("SELECT outbox_redrive(handler => 'b-bad')"), '1', 'redrive by handler: one delivery');
ok(wait_until(sub { msg($b, 'state') eq 'delivered' }, 30),
	'the redriven delivery succeeds and the message reads delivered');
is($recv->count('/b1') . ' ' . $recv->count('/b2') . ' ' . $recv->count('/b3'), '1 1 4',
	'only the redriven handler was sent it again');

# ---- a message that is still being delivered reads pending
handler('p-ok', 'p.t', '/p1');
handler('p-slow', 'p.t', '/p2');
$recv->script('/p2', [{ status => 503 }], { status => 204 });
set_conf($node, 'grelout.retry_base' => '3s', 'grelout.retry_max' => '3s');
my $p = publish('p.t');
ok(wait_until(sub { rows($p) eq 'p-ok:delivered,p-slow:pending' }, 30),
	'one delivered, one waiting for its retry');
is(msg($p, 'state'), 'pending', 'the message reads pending while a delivery is unfinished');
ok(wait_until(sub { msg($p, 'state') eq 'delivered' }, 30), 'then delivered');
set_conf($node, 'grelout.retry_base' => '100ms', 'grelout.retry_max' => '200ms');

# ---- patterns and filters route exactly
handler('c-exact', 'c.x.y', '/c');
handler('c-star', 'c.*.y', '/c');
handler('c-hash', 'c.#', '/c');
handler('c-gold', 'c.#', '/c', { filter => q{'{"kind": "gold"}'} });
handler('c-other', 'c.z', '/c');
handler('c-deep', 'c.*', '/c');
my $c1 = publish('c.x.y', '{"kind": "gold", "n": 1}');
my $c2 = publish('c.x.y.z', '{"kind": "silver"}');
my $c3 = publish('c', '{"kind": "gold"}');
routed($c1);
routed($c2);
routed($c3);
is(rows($c1) =~ s/:\w+//gr, 'c-exact,c-gold,c-hash,c-star',
	'exact, *, # and a matching filter route; other topics and patterns do not');
is(msg($c2, 'route') . ' ' . msg($c2, 'handler'), 'single c-hash',
	'a filter that does not match and a * for two segments do not route');
is(msg($c3, 'route'), 'fanout', '# matches zero segments');
is(rows($c3) =~ s/:\w+//gr, 'c-gold,c-hash', 'c: the # handlers only');
ok(wait_until(sub { msg($c2, 'state') eq 'delivered' }, 30), 'the inline delivery is delivered');
is(msg($c2, "last_status || ' ' || (last_duration_ms >= 0)"), '204 true',
	'the inline delivery has last_status and last_duration_ms');

# ---- no match: waits, and goes to a handler created later
my $d = publish('d.late', '{"x": 1}');
ok(wait_until(sub { msg($d, 'route') eq 'waiting' }, 30), 'no match: the message waits');
is($recv->count('/d'), 0, 'and nothing is sent');
handler('d-late', 'd.*', '/d');
ok(wait_until(sub { $recv->count('/d') >= 1 }, 30), 'a handler created later gets it');
is($recv->requests('/d')->[0]{headers}{'grelout-handler'}, 'd-late', 'with its name');

# ---- a handler insert in progress holds routing back until it commits
my $admin = $node->background_psql('app');
$admin->query_safe("BEGIN; INSERT INTO grelout.handlers (name, topic, url)"
	. " VALUES ('r-new', 'r.t', '" . $recv->url('/r') . "')");
my $r = publish('r.t');
usleep(1_000_000);
is(msg($r, 'route'), 'new', 'a message published meanwhile is not routed');
$admin->query_safe('COMMIT');
ok(wait_until(sub { $recv->count('/r') >= 1 }, 30),
	'once the insert commits, the message goes to the new handler');
$admin->quit;

# ---- a handler created after routing does not get the message
handler('e-first', 'e.one', '/e1', { enabled => 'false' });
my $e = publish('e.one');
ok(wait_until(sub { msg($e, 'route') eq 'single' }, 30), 'routed to its only handler');
handler('e-later', 'e.#', '/e2');
sq("UPDATE grelout.handlers SET enabled = true WHERE name = 'e-first'");
ok(wait_until(sub { $recv->count('/e1') >= 1 }, 30), 'delivered to the handler it was routed to');
my $e2 = publish('e.one');
ok(wait_until(sub { $recv->count('/e2') >= 1 }, 30), 'a later message reaches the new handler');
is(scalar(grep { $_->{id} eq $e } @{ $recv->summary('/e2') }), 0,
	'the handler created after routing never got the earlier message');

# ---- disabling pauses one handler only
handler('f-on', 'f.t', '/f1');
handler('f-off', 'f.t', '/f2', { enabled => 'false' });
my $f = publish('f.t');
ok(wait_until(sub { $recv->count('/f1') >= 1 }, 30), 'the enabled handler is delivered');
usleep(500_000);
is($recv->count('/f2'), 0, 'the disabled handler is not');
is(rows($f), 'f-off:pending,f-on:delivered', 'its delivery waits, pending');
is(sq("SELECT attempts FROM grelout.fanout WHERE message_id = '$f' AND handler = 'f-off'"), '0',
	'never claimed');
sq("UPDATE grelout.handlers SET enabled = true WHERE name = 'f-off'");
ok(wait_until(sub { $recv->count('/f2') >= 1 }, 30), 'enabled again: delivered');
ok(wait_until(sub { msg($f, 'state') eq 'delivered' }, 30), 'and the message reads delivered');

# ---- deleting a handler drops its deliveries only; DELETE then INSERT loses nothing
handler('g-keep', 'g.t', '/g1');
handler('g-drop', 'g.t', '/g2', { enabled => 'false' });
my $g = publish('g.t');
ok(wait_until(sub { rows($g) eq 'g-drop:pending,g-keep:delivered' }, 30),
	'one delivered, one paused');
sq("DELETE FROM grelout.handlers WHERE name = 'g-drop'");
ok(wait_until(sub { msg($g, 'state') eq 'delivered' }, 30),
	'deleting the paused handler finishes the message');
is(rows($g), 'g-keep:delivered', 'its delivery is gone, the other stays');
is($recv->count('/g2'), 0, 'the deleted handler was never sent it');

handler('h-one', 'h.t', '/h', { enabled => 'false' });
my $h = publish('h.t');
ok(wait_until(sub { msg($h, 'route') eq 'single' }, 30), 'routed to its only handler');
sq("DELETE FROM grelout.handlers WHERE name = 'h-one'");
ok(wait_until(sub { msg($h, 'route') eq 'waiting' }, 30),
	'deleting its only handler sends the message back to wait');
handler('h-one', 'h.t', '/h');
ok(wait_until(sub { $recv->count('/h') >= 1 }, 30), 'inserting the handler again delivers it');
ok(wait_until(sub { msg($h, 'state') eq 'delivered' }, 30), 'delivered');
is($recv->count('/h'), 1, 'once');

# ---- a lapsed fan-out claim without attempts left is dead-lettered at the claim
handler('q-ok', 'q.t', '/q1');
handler('q-lapsed', 'q.t', '/q2', { max_attempts => 2, enabled => 'false' });
my $q = publish('q.t');
ok(wait_until(sub { rows($q) eq 'q-lapsed:pending,q-ok:delivered' }, 30), 'one delivered, one paused');
sq("UPDATE grelout.fanout SET state = 'processing', attempts = 2, lease = 7,"
	. " available_at = now() - interval '1 second'"
	. " WHERE message_id = '$q' AND handler = 'q-lapsed'");
sq("UPDATE grelout.handlers SET enabled = true WHERE name = 'q-lapsed'");
ok(wait_until(sub { msg($q, 'state') eq 'dead' }, 30),
	'the claim dead-letters the lapsed delivery and the message reads dead');
is(rows($q), 'q-lapsed:dead,q-ok:delivered', 'its row is dead');
is($recv->count('/q2'), 0, 'without a request');

# ---- a delayed message is routed at once and sent when due
handler('i-1', 'i.t', '/i');
handler('i-2', 'i.t', '/i');
my $t_pub = time();
my $i = publish('i.t', '{}', "delay => '3 seconds'");
ok(wait_until(sub { msg($i, 'route') eq 'fanout' }, 30), 'a delayed message is routed at once');
is(rows($i), 'i-1:pending,i-2:pending', 'its rows wait');
ok(time() - $t_pub < 2.5 ? $recv->count('/i') == 0 : 1, 'nothing is sent before it is due');
ok(wait_until(sub { $recv->count('/i') >= 2 }, 30), 'both deliveries are sent when due');
my @at = map { $_->{received_at} } @{ $recv->summary('/i') };
ok(!grep({ $_ < $t_pub + 2.9 } @at), 'not before the delay');

# ---- a stopping relay hands its fan-out claims back
handler('s-1', 's.t', '/s1');
handler('s-2', 's.t', '/s2');
$recv->script('/s2', [{ status => 204, delay => 6 }], { status => 204 });
my $s = publish('s.t');
ok(wait_until(sub { $recv->count('/s1') >= 1 && $recv->count('/s2') >= 1 }, 30),
	'both requests started');
$node->restart;
ok(wait_until(sub { msg($s, 'state') eq 'delivered' }, 60),
	'after the restart the message is delivered');
my @s2 = @{ $recv->summary('/s2') };
cmp_ok(scalar(@s2), '>=', 2, 'the unfinished request was sent again');
is($s2[-1]{attempt}, '1', 'its attempt was handed back (grelout-attempt 1 again)');

# ---- keep_delivered: the purge, and off, remove a fan-out message with its rows
set_conf($node, 'grelout.keep_delivered' => '1s');
ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE id = '$a'") eq '0' }, 60),
	'the retention purge removes a delivered fan-out message');
is(sq("SELECT count(*) FROM grelout.fanout WHERE message_id = '$a'"), '0', 'with its rows');
is(msg($b, 'count(*)') eq '0' ? 'gone' : 'kept', 'gone', 'and the redriven one');
set_conf($node, 'grelout.keep_delivered' => 'off');
handler('k-1', 'k.t', '/k');
handler('k-2', 'k.t', '/k');
my $k = publish('k.t');
ok(wait_until(sub { $recv->count('/k') >= 2 }, 30), 'keep_delivered = off: delivered');
ok(wait_until(sub { msg($k, 'count(*)') eq '0' }, 30), 'the message is deleted');
is(sq("SELECT count(*) FROM grelout.fanout WHERE message_id = '$k'"), '0', 'with its rows');

# ---- keep_delivered = off, mid-fan-out: a delivered row goes at once, and
# its message keeps the fact, so that deleting the handler of its last
# unfinished delivery finishes the message rather than routing it again
handler('m-ok', 'm.t', '/m1');
handler('m-off', 'm.t', '/m2', { enabled => 'false' });
my $m = publish('m.t');
ok(wait_until(sub { $recv->count('/m1') >= 1 && rows($m) eq 'm-off:pending' }, 30),
	'keep_delivered = off: the delivered row is deleted at once, the paused one waits');
ok(wait_until(sub { msg($m, 'fanout_delivered') eq 't' }, 30),
	'the message keeps that a delivery was delivered');
sq("DELETE FROM grelout.handlers WHERE name = 'm-off'");
ok(wait_until(sub { msg($m, 'count(*)') eq '0' }, 30),
	'deleting the paused handler finishes the message (and deletes it)');
is($recv->count('/m1'), 1, 'the delivered handler is not sent it again');
is($recv->count('/m2'), 0, 'the deleted one never was');

# ---- more deliveries than request slots: routing claims what fits, and a
# message wider than every slot is still routed and delivered
set_conf($node, 'grelout.concurrency' => '2');
handler("w-$_", 'w.t', "/w$_") for 1 .. 3;
my @w = map { publish('w.t', qq({"n": $_})) } 1 .. 3;
ok(wait_until(sub { !grep { $recv->count("/w$_") < 3 } 1 .. 3 }, 60),
	'concurrency 2: three messages to three handlers, all nine delivered');
ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'w.t'") eq '0' }, 30),
	'and the messages finished');
is(join(',', map { $recv->count("/w$_") } 1 .. 3), '3,3,3', 'each once');
set_conf($node, 'grelout.concurrency' => '50');

$node->stop;
$recv->stop;
done_testing();
