# Per-key ordering (issue 12), live, with 4 relays: 200 keys x 50 messages
# published by 8 concurrent sessions (CI=true: 50 keys x 20), the endpoint
# failing 10% of requests at random, and a relay killed with SIGKILL while
# the sessions publish and the relays deliver: every key's messages arrive
# in commit order, never two of a key at once (the receiver checks both),
# and none is lost.  Then the head of line: a dead head of a 'block'
# handler holds exactly its key until it is redriven (by message id) or
# purged, and grelout.deliveries shows what blocks; nor does it hold back
# another handler of the same messages; with 'skip' the next goes, and a
# redriven delivery is sent at once.
#
# The commit order of a key is known to the test: each publishing
# transaction takes the key's counter row (a lock of the test's own, not
# grelout's) and numbers its messages from it, so numbers go up with the
# commits of the key.  The receiver (test/receiver.py, /_control/order)
# flags a request of a key that is neither the next number nor a repeat of
# the last success (at-least-once after the crash), and one that came
# before the previous request of its key was answered.
#
# 133_ordering_elastic.pl runs this file with elastic relays
# ($main::elastic_relays): one relay (grelout.workers) and up to four
# (grelout.max_workers), added by the launcher under the backlog, the one
# killed an added one when it runs; the same checks hold, and the added
# relays retire once the endpoint is quiet.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $ci = ($ENV{CI} // '') eq 'true';
my ($keys, $per_key) = $ci ? (50, 20) : (200, 50);
my $elastic;
{
	no warnings 'once';
	$elastic = $main::elastic_relays // 0;
}
# the relays there are at least (grelout.workers), and at most
my ($relays_min, $relays_max) = $elastic ? (1, 4) : (4, 4);

my $recv = start_receiver();
my $node = grelout_node($elastic ? 'ordering_elastic' : 'ordering',
	"restart_after_crash = on",
	"grelout.workers = $relays_min",
	"grelout.max_workers = $relays_max",
	"grelout.concurrency = 16",
	"grelout.lease_duration = '5s'",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '20ms'",
	"grelout.retry_max = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.max_attempts = 1000",
	"max_connections = 40");

sub sq { return $node->safe_psql('app', $_[0]); }

ok(wait_until(sub { scalar(relay_pids($node)) == $relays_min }, 60),
	"$relays_min relays run (grelout.workers)");

# most_relays(CODE): CODE, noting the most relays seen meanwhile
my $most = 0;
sub most_relays
{
	my ($code) = @_;
	return sub {
		my $r = scalar(relay_pids($node));
		$most = $r if $r > $most;
		return $code->();
	};
}

# ---- the publishers: tickets of one or two messages of a key, shuffled;
# each transaction takes one ticket and numbers its messages from the key's
# counter
sq(qq{
CREATE TABLE ctr (k int PRIMARY KEY, n int NOT NULL DEFAULT 0);
CREATE TABLE tickets (id int PRIMARY KEY, k int NOT NULL, cnt int NOT NULL);
INSERT INTO ctr (k) SELECT g FROM generate_series(1, $keys) g;
-- per key: two-message tickets for a fifth of its messages, the rest single
INSERT INTO tickets (id, k, cnt)
SELECT row_number() OVER (ORDER BY random()), k, cnt
FROM (SELECT k, 2 AS cnt FROM generate_series(1, $keys) k,
		generate_series(1, $per_key / 10)
	  UNION ALL
	  SELECT k, 1 FROM generate_series(1, $keys) k,
		generate_series(1, $per_key - 2 * ($per_key / 10))) t;
CREATE FUNCTION pub() RETURNS int LANGUAGE plpgsql AS \$\$
DECLARE
	t record;
	m int;
BEGIN
	SELECT * INTO t FROM tickets ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	DELETE FROM tickets WHERE id = t.id;
	UPDATE ctr SET n = n + t.cnt WHERE k = t.k RETURNING n - t.cnt INTO m;
	FOR i IN 1 .. t.cnt LOOP
		PERFORM outbox_publish('ord.t', jsonb_build_object('key', t.k, 'n', m + i),
			key => t.k::text);
	END LOOP;
	RETURN t.cnt;
END
\$\$;
CREATE PROCEDURE drain() LANGUAGE plpgsql AS \$\$
BEGIN
	WHILE pub() > 0 LOOP
		COMMIT;
	END LOOP;
END
\$\$;
});
is(sq("SELECT sum(cnt) FROM tickets"), $keys * $per_key, 'tickets for every message');

# elastic: a healthy endpoint slow enough (50 ms) that one relay's 16
# requests in flight cannot keep up for the second of saturation the
# launcher waits for.  Its failures would keep the handler's adaptive limit
# (halved by each 5xx) below the relay's room, and a relay held back by a
# handler's own limit is rightly not saturated: no relay would be added.
$recv->script('/ord', [], { fail_rate => $elastic ? 0 : 0.1, delay => $elastic ? 0.05 : 0.002 });
my $url = $recv->url('/ord');
sq("INSERT INTO grelout.handlers (name, topic, url, ordered)"
	. " VALUES ('ord', 'ord.#', '$url', true)");

# publish(): 8 sessions, each calling drain() until no ticket is left
sub publishers
{
	my @h;
	for (1 .. 8)
	{
		my ($out, $err) = ('', '');
		push @h, IPC::Run::start(
			[ 'psql', '-X', '-q', '-d', $node->connstr('app'), '-c', 'CALL drain()' ],
			'>', \$out, '2>', \$err);
	}
	return @h;
}

my @pubs = publishers();
ok(wait_until(most_relays(sub { $recv->count('/ord') >= $keys * $per_key / 4 }), 120),
	'a quarter of the messages delivered while the sessions publish');
# elastic: the relay killed is the last started, an added one if there is
my @relays = $elastic ?
	split(/\n/, $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity"
		. " WHERE backend_type = 'grelout relay' ORDER BY backend_start")) :
	relay_pids($node);
my $offset = log_offset($node);
my $killed_at = time();
ok(kill('KILL', $relays[ $elastic ? -1 : 1 ]), 'a relay killed with SIGKILL mid-run');
ok(wait_until(sub { log_since($node, $offset) =~ /all server processes terminated; reinitializing/ }, 60),
	'the server restarts after the crash');
$_->finish for @pubs;	# killed by the restart, or done
ok($node->poll_query_until('app', 'SELECT true'), 'the server accepts connections again');
ok(wait_until(sub { scalar(relay_pids($node)) >= $relays_min }, 60),
	"$relays_min relays run again");

# what the crash rolled back is published again
@pubs = publishers();
$_->finish for @pubs;
sq("CALL drain()");
is(sq("SELECT count(*) FROM tickets"), '0', 'every ticket published');
is(sq("SELECT sum(n) FROM ctr"), $keys * $per_key, 'every message numbered');

ok(wait_until(most_relays(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'ord.t'") eq '0' }), 300),
	'the outbox drains');
if ($elastic)
{
	cmp_ok($most, '>', $relays_min, "the launcher added relays under the backlog ($most at most)");
	cmp_ok($most, '<=', $relays_max, 'never more than grelout.max_workers');
}
else
{
	is($most, 4, 'four relays, no more');
}
my $o = $recv->order('/ord');
is($o->{keys}, $keys, 'every key reached the endpoint');
is($o->{out_of_order}, 0, 'every key\'s messages arrived in commit order')
	or diag_key($o);
is($o->{overlaps}, 0, 'never two requests of a key at once')
	or diag(explain($o->{examples}));
is(scalar(grep { $o->{delivered}{$_} == $per_key } keys %{ $o->{delivered} }), $keys,
	"every key's $per_key messages delivered: nothing lost");
my $failed = $o->{requests} - $keys * $per_key - $o->{repeats};
if ($elastic)
{
	is($failed, 0, 'the endpoint failed no request');
}
else
{
	cmp_ok($failed, '>', 0, "the endpoint failed some requests ($failed), which were retried");
}
note("requests $o->{requests}, repeats after the crash $o->{repeats}");

# diag_key(ORDER): the requests of the first key the order check flagged
sub diag_key
{
	my ($o) = @_;
	diag(explain($o->{examples}));
	my ($key) = ($o->{examples}[0] // '') =~ /key (\S+)/;
	return unless defined $key;
	diag("kill at $killed_at");
	for my $r (@{ $recv->requests('/ord') })
	{
		next unless $r->{body} =~ /"key": $key\b/;
		diag(sprintf('%.4f-%.4f %s attempt %s status %s peer %s', $r->{received_at},
			$r->{done_at} // 0, $r->{body}, $r->{headers}{'grelout-attempt'},
			$r->{status} // '-', $r->{peer_port}));
	}
}

# elastic: once the endpoint is quiet, the added relays retire, handing
# nothing back
if ($elastic)
{
	my $quiet = log_offset($node);
	ok(wait_until(sub { scalar(relay_pids($node)) == $relays_min }, 120),
		'the added relays retire when the backlog is gone');
	unlike(log_since($node, $quiet), qr/stopping with [1-9]/, 'with no request unfinished');
}

# ---- head of line, 'block': a dead head holds exactly its key
sub handler
{
	my ($name, $path, $on_dead) = @_;
	my $u = $recv->url($path);
	sq("INSERT INTO grelout.handlers (name, topic, url, ordered, on_dead, max_attempts)"
		. " VALUES ('$name', '$name.#', '$u', true, '$on_dead', 2)");
}

sub publish
{
	my ($topic, $key, $n) = @_;
	return sq("SELECT outbox_publish('$topic', '{\"key\": \"$key\", \"n\": $n}', key => '$key')");
}

sub state { return sq("SELECT state FROM grelout.deliveries WHERE message_id = '$_[0]'"); }

sub got
{
	my ($path, $key) = @_;
	return join(',', map { $_->{body} =~ /"n": (\d+)/ ? $1 : '?' }
		grep { $_->{body} =~ /"key": "$key"/ && ($_->{status} // 0) == 204 }
		@{ $recv->requests($path) });
}

handler('blk', '/blk', 'block');
$recv->script('/blk', [ { status => 500 }, { status => 500 } ], {});
my $a1 = publish('blk.a', 'a', 1);
my $a2 = publish('blk.a', 'a', 2);
my $a3 = publish('blk.a', 'a', 3);
ok(wait_until(sub { state($a1) eq 'dead' }, 30), 'block: the head of key a goes dead');
publish('blk.b', 'b', 1);
publish('blk.b', 'b', 2);
ok(wait_until(sub { got('/blk', 'b') eq '1,2' }, 30), 'block: another key flows');
is(got('/blk', 'a'), '', 'block: nothing of key a was delivered');
is($recv->count('/blk'), 4, 'block: the later messages of key a were never sent');
is(sq("SELECT string_agg(coalesce(blocked_by::text, '-'), ',' ORDER BY seq)"
		. " FROM grelout.deliveries WHERE handler = 'blk' AND key = 'a'"),
	"-,$a1,$a1", 'block: grelout.deliveries shows the dead head holding the key');
is(sq("SELECT outbox_redrive(message_id => '$a1')"), '1', 'block: redrive of the head by message id');
ok(wait_until(sub { got('/blk', 'a') eq '1,2,3' }, 30), 'block: then key a flows, in order');

# purge unblocks too
$recv->script('/blk', [ { status => 500 }, { status => 500 } ], {});
my $c1 = publish('blk.c', 'c', 1);
ok(wait_until(sub { state($c1) eq 'dead' }, 30), 'block: the head of key c goes dead');
publish('blk.c', 'c', 2);
sleep(1);
is(got('/blk', 'c'), '', 'block: key c held');
is(sq("SELECT outbox_purge(message_id => '$c1')"), '1', 'block: the dead head purged by message id');
ok(wait_until(sub { got('/blk', 'c') eq '2' }, 30), 'block: then the next goes');

# ---- fan-out: a blocked key of an ordered handler holds back neither the
# other handler of the same messages nor its own other keys
handler('fob', '/fob', 'block');
sq("INSERT INTO grelout.handlers (name, topic, url) VALUES ('foall', 'fob.#', '"
	. $recv->url('/foall') . "')");
$recv->script('/fob', [ { status => 500 }, { status => 500 } ], {});
my $f1 = publish('fob.a', 'a', 1);
ok(wait_until(sub { sq("SELECT state FROM grelout.deliveries WHERE message_id = '$f1'"
	. " AND handler = 'fob'") eq 'dead' }, 30), 'fan-out: the head of key a goes dead for the ordered handler');
my $f2 = publish('fob.a', 'a', 2);
publish('fob.b', 'b', 1);
ok(wait_until(sub { got('/foall', 'a') eq '1,2' && got('/fob', 'b') eq '1' }, 30),
	'fan-out: the other handler gets key a, the ordered one key b');
is(got('/fob', 'a'), '', 'fan-out: the ordered handler holds key a');
is(sq("SELECT blocked_by FROM grelout.deliveries WHERE message_id = '$f2' AND handler = 'fob'"),
	$f1, 'fan-out: grelout.deliveries shows what blocks');
is(sq("SELECT outbox_redrive(handler => 'fob', message_id => '$f1')"), '1', 'fan-out: redrive the head');
ok(wait_until(sub { got('/fob', 'a') eq '1,2' }, 30), 'fan-out: then key a flows, in order');

# ---- 'skip': the next goes; a redriven delivery goes at once
handler('skp', '/skp', 'skip');
$recv->script('/skp', [ { status => 500 }, { status => 500 } ], {});
my $s1 = publish('skp.a', 'a', 1);
ok(wait_until(sub { state($s1) eq 'dead' }, 30), 'skip: the head goes dead');
publish('skp.a', 'a', 2);
publish('skp.a', 'a', 3);
ok(wait_until(sub { got('/skp', 'a') eq '2,3' }, 30), 'skip: the next ones go, in order');
is(sq("SELECT outbox_redrive(handler => 'skp', message_id => '$s1')"), '1', 'skip: redrive');
ok(wait_until(sub { got('/skp', 'a') eq '2,3,1' }, 30), 'skip: the redriven one is sent at once');

$node->stop;
$recv->stop;
done_testing();
