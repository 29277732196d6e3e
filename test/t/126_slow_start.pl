# Slots earned by answers (issue 11, fair slots): beside a busy handler, a
# handler's requests in flight are bounded by its window, which opens by
# one for each answer its endpoint gives and halves for each request that
# got none, down to concurrency / 10 (at least 1).  With the breaker off,
# so that only the slots protect: G's backlog piles up while G is disabled,
# H gets a backlog and is busy, then G is enabled, its endpoint hanging past
# the request timeout.  G never has more than its floor in flight (1 of 10
# slots; its fair share would be 5, as this test counted without windows),
# H drains meanwhile; once H is done, G alone is bounded by its adaptive
# limit (issue 32), which its timeouts have cut to a few requests, where
# before it took every slot (one busy handler gets them all, window or
# not); it still gets requests.  Then G answers again, and its backlog is
# delivered.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GreloutTest qw(:DEFAULT);

my $concurrency = 10;
my $recv = start_receiver();
my $node = grelout_node('slow_start',
	"grelout.workers = 1",
	"grelout.concurrency = $concurrency",
	"grelout.request_timeout = '2s'",
	"grelout.breaker_threshold = 0",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '1s'",
	"grelout.retry_jitter = 0",
	"grelout.max_attempts = 1000");

sub sq { return $node->safe_psql('app', $_[0]); }

ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') eq '1' }, 60),
	'one relay running');
$recv->script('/h', [], { status => 204 });
$recv->script('/g', [], { delay => 30, watch_hangup => JSON::PP::true });
for my $h ('h', 'g')
{
	my $url = $recv->url("/$h");
	sq("INSERT INTO grelout.handlers (name, topic, url, enabled) VALUES ('$h', '$h.t', '$url', "
		. ($h eq 'g' ? 'false' : 'true') . ")");
}

# G's backlog routed while G is disabled (as it piles up while an endpoint
# is down), then H busy with a backlog, then G enabled beside it
sq("SELECT count(outbox_publish('g.t', jsonb_build_object('n', g))) FROM generate_series(1, 200) g");
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE route = 'new'") eq '0' }, 30),
	"G's backlog is routed");
sq("SELECT count(outbox_publish('h.t', jsonb_build_object('n', g))) FROM generate_series(1, 40000) g");
ok(wait_until(sub { $recv->count('/h') >= 50 }, 30), 'H is being delivered');
sq("UPDATE grelout.handlers SET enabled = true WHERE name = 'g'");
# G's first requests time out (2 s) and are sent again, H busy meanwhile
ok(wait_until(sub { $recv->count('/g') >= 2 }, 30), 'G gets requests beside H, again after a timeout');
my $g_beside = $recv->stats('/g')->{max_in_flight};
cmp_ok($recv->count('/h'), '<', 40000, 'H still busy when G is looked at');
# the floor, and one more while a timed-out request's hang-up reaches the
# receiver as the relay sends the next (its fair share would be 5)
cmp_ok($g_beside, '<=', 2,
	"beside busy H, G never had more than its window's floor in flight ($g_beside of $concurrency)");
cmp_ok($recv->count('/g'), '<', 200, 'G backlog still there meanwhile');
sq("DELETE FROM grelout.outbox WHERE topic = 'h.t' AND state = 'pending'");

# H done: G alone, hanging, keeps to its adaptive limit, which its
# timeouts cut (issue 32), and still gets requests
my $g_limit = sq("SELECT value FROM grelout.metrics() WHERE handler = 'g'"
	. " AND metric = 'grelout_handler_concurrency_limit'");
cmp_ok($g_limit, '<=', 5, "G's adaptive limit is cut by its timeouts ($g_limit)");
my $g_then = $recv->count('/g');
ok(wait_until(sub { $recv->count('/g') > $g_then }, 20), 'with H done, G alone still gets requests');

# G answers again: every message arrives
$recv->script('/g', [], { status => 204 });
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'g.t'") eq '0' }, 60),
	"G's backlog is delivered once it answers");
is(sq("SELECT count(*) FROM grelout.outbox WHERE state = 'dead'"), '0', 'nothing dead');

$node->stop;
$recv->stop;
done_testing();
