# grelout.handler_status (issue 11): one row a handler.  A new handler
# reads breaker 'closed', zeros and NULLs; in_flight, pending (inline and
# fan-out deliveries, disabled handlers included), dead, last_error,
# last_success_at, last_failure_at, consecutive_failures and
# oldest_pending_age follow what the relays do, and the counts are the same
# after a server restart (rebuilt at start).  With 200,000 delivered rows in
# grelout.outbox the view stays cheap: EXPLAIN (ANALYZE, BUFFERS) of
# SELECT * FROM grelout.handler_status reads less than a tenth of the
# buffers a count over the table reads, and has no Seq Scan on
# grelout.outbox.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GreloutTest qw(:DEFAULT set_conf);

my $recv = start_receiver();
my $node = grelout_node('handler_status',
	"grelout.workers = 1",
	"grelout.concurrency = 10",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '500ms'",
	"grelout.retry_jitter = 0",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

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

# status(NAME, EXPR): EXPR over the handler's row of grelout.handler_status
sub status
{
	my ($name, $expr) = @_;
	return sq("SELECT $expr FROM grelout.handler_status WHERE handler = '$name'");
}

# ---- the view has the columns of the interface, in order
is(sq("SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute"
		. " WHERE attrelid = 'grelout.handler_status'::regclass AND attnum > 0 AND NOT attisdropped"),
	'handler,topic,enabled,breaker,consecutive_failures,last_success_at,last_failure_at,'
	  . 'last_error,in_flight,pending,dead,oldest_pending_age',
	'grelout.handler_status has the interface\'s columns');

# ---- a new handler: closed, zeros and NULLs
handler('fresh', 'fresh.t', '/fresh');
is(status('fresh', "topic || ' ' || enabled || ' ' || breaker || ' ' || consecutive_failures"
		. " || ' ' || in_flight || ' ' || pending || ' ' || dead"),
	'fresh.t true closed 0 0 0 0', 'a new handler: its pattern, enabled, closed, zeros');
is(status('fresh', "(last_success_at IS NULL) || ' ' || (last_failure_at IS NULL)"
		. " || ' ' || (last_error IS NULL) || ' ' || (oldest_pending_age IS NULL)"),
	'true true true true', 'a new handler: NULL last_success_at, last_failure_at, last_error, oldest_pending_age');

# ---- in flight: four requests held by a slow endpoint
$recv->script('/slow', [], { delay => 4, watch_hangup => JSON::PP::true });
handler('slow', 'slow.t', '/slow');
sq("SELECT outbox_publish('slow.t', jsonb_build_object('n', g)) FROM generate_series(1, 4) g");
ok(wait_until(sub { $recv->count('/slow') >= 4 }, 30), 'slow: four requests started');
ok(wait_until(sub { status('slow', 'in_flight') eq '4' }, 5),
	'slow: in_flight = 4 while the requests are out')
  or diag(status('slow', '*'));
cmp_ok(status('slow', 'pending'), '<=', 4, 'slow: pending counts at most the four unfinished');
is(status('slow', 'dead'), '0', 'slow: nothing dead');

# ---- pending: disabled handlers, inline and fan-out deliveries
handler('paused', 'p.#', '/paused', { enabled => 'false' });
handler('paused_b', 'p.x', '/paused_b', { enabled => 'false' });
handler('paused_c', 'q.x', '/paused_c', { enabled => 'false' });
sq("SELECT outbox_publish('p.x', jsonb_build_object('n', g)) FROM generate_series(1, 5) g");
sq("SELECT outbox_publish('q.x', jsonb_build_object('n', g)) FROM generate_series(1, 7) g");
ok(wait_until(sub {
	status('paused', 'pending') eq '5' && status('paused_b', 'pending') eq '5'
	  && status('paused_c', 'pending') eq '7' }, 10),
	'pending counts fan-out deliveries (5 and 5) and inline ones (7) of disabled handlers')
  or diag(sq("SELECT handler, pending FROM grelout.handler_status ORDER BY 1"));
is(status('paused', "enabled || ' ' || in_flight || ' ' || dead"), 'false 0 0',
	'paused: disabled, nothing in flight or dead');
ok(wait_until(sub { status('paused', "oldest_pending_age > interval '0'") eq 't' }, 5),
	'paused: oldest_pending_age is set and positive');
usleep(1_200_000);
cmp_ok(status('paused', 'extract(epoch FROM oldest_pending_age)'), '>=', 1.0,
	'paused: oldest_pending_age grows with time');

# ---- dead: three messages of a handler with one attempt, answered 500
$recv->script('/dying', [], { status => 500, body => 'out of order' });
handler('dying', 'dying.t', '/dying', { max_attempts => 1 });
sq("SELECT outbox_publish('dying.t', jsonb_build_object('n', g)) FROM generate_series(1, 3) g");
ok(wait_until(sub { status('dying', 'dead') eq '3' }, 30), 'dying: dead = 3')
  or diag(status('dying', '*'));
is(status('dying', "pending || ' ' || in_flight || ' ' || breaker || ' ' || consecutive_failures"),
	'0 0 closed 3', 'dying: nothing pending, three consecutive failures, below the threshold: closed');
like(status('dying', 'last_error'), qr/^HTTP 500: out of order/, 'dying: last_error');
is(status('dying', "(last_failure_at IS NOT NULL) || ' ' || (last_success_at IS NULL)"),
	'true true', 'dying: last_failure_at set, last_success_at NULL');

# ---- delivered: last_success_at; a success resets consecutive_failures
handler('fine', 'fine.t', '/fine');
sq("SELECT outbox_publish('fine.t', '{}')");
ok(wait_until(sub { status('fine', 'last_success_at IS NOT NULL') eq 't' }, 30),
	'fine: last_success_at set after a delivery');
is(status('fine', "pending || ' ' || dead || ' ' || in_flight || ' ' || consecutive_failures"
		. " || ' ' || (last_failure_at IS NULL) || ' ' || (oldest_pending_age IS NULL)"),
	'0 0 0 0 true true', 'fine: zeros, no failure, nothing pending');
$recv->script('/dying', [], { status => 204 });
sq("SELECT outbox_publish('dying.t', '{\"ok\": true}')");
ok(wait_until(sub { status('dying', 'consecutive_failures') eq '0' }, 30),
	'dying: a 2xx resets consecutive_failures');
is(status('dying', "dead || ' ' || (last_success_at IS NOT NULL)"), '3 true',
	'dying: the dead stay counted, last_success_at is set');

# ---- the counts after a server restart
ok(wait_until(sub { status('slow', 'in_flight') eq '0' }, 30), 'slow: done');
$node->restart;
ok(wait_until(sub {
	status('paused', 'pending') eq '5' && status('paused_b', 'pending') eq '5'
	  && status('paused_c', 'pending') eq '7' && status('dying', 'dead') eq '3' }, 10),
	'after a restart: pending and dead are the same')
  or diag(sq("SELECT handler, pending, dead FROM grelout.handler_status ORDER BY 1"));
is(status('fresh', "breaker || ' ' || in_flight || ' ' || pending || ' ' || dead"), 'closed 0 0 0',
	'after a restart: the new handler still reads closed and zeros');

# ---- cheap with many rows: 200,000 delivered rows in grelout.outbox
sq(q{
	INSERT INTO grelout.outbox (id, topic, payload, state, route, handler, attempts,
		available_at, delivered_at, created_at)
	SELECT gen_random_uuid(), 'fine.t', jsonb_build_object('n', g), 'delivered', 'single', 'fine', 1,
		now(), now(), now()
	FROM generate_series(1, 200000) g
});
sq('VACUUM ANALYZE grelout.outbox');
is(sq("SELECT count(*) >= 200000 FROM grelout.outbox WHERE state = 'delivered'"), 't',
	'200,000 delivered rows');

# total shared buffers (hit + read) of a plan, and whether it seq-scans a relation
sub plan_of
{
	my ($query) = @_;
	my $json = sq("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) $query");
	return decode_json($json)->[0];
}

sub buffers
{
	my ($p) = @_;
	return ($p->{Plan}{'Shared Hit Blocks'} // 0) + ($p->{Plan}{'Shared Read Blocks'} // 0);
}

sub seq_scans
{
	my ($node, $out) = @_;
	push @$out, $node->{'Relation Name'}
	  if $node->{'Node Type'} eq 'Seq Scan' && defined $node->{'Relation Name'};
	seq_scans($_, $out) for @{ $node->{Plans} // [] };
	return $out;
}

my $count_plan = plan_of('SELECT count(*) FROM grelout.outbox');
my $status_plan = plan_of('SELECT * FROM grelout.handler_status');
my ($count_buf, $status_buf) = (buffers($count_plan), buffers($status_plan));
note("buffers: count(*) $count_buf, handler_status $status_buf;"
	. " handler_status took $status_plan->{'Execution Time'} ms");
cmp_ok($count_buf, '>', 500, "a count over grelout.outbox reads many buffers ($count_buf)");
cmp_ok($status_buf * 10, '<', $count_buf,
	"handler_status reads less than a tenth of that ($status_buf)");
my @scans = grep { $_ eq 'outbox' } @{ seq_scans($status_plan->{Plan}, []) };
is(scalar(@scans), 0, 'handler_status has no Seq Scan on grelout.outbox')
  or diag(sq('EXPLAIN SELECT * FROM grelout.handler_status'));
is(status('paused', 'pending') . ' ' . status('dying', 'dead') . ' ' . status('fine', 'pending'),
	'5 3 0', 'the counts are unchanged by the delivered rows');

$node->stop;
$recv->stop;
done_testing();
