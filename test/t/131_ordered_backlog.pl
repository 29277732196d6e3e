# A backlog of new messages does not hold back an ordered handler (issue
# 12 with the fan-out routing): routing claims new messages as it routes
# them and may take every free slot, but it never claims a delivery of an
# ordered handler with a key (only the claim statement takes a key's
# head).  So the claim still runs at least every 100 ms with a share of
# the slots.  Here a slow endpoint's 2,000 new messages (10 s of work for
# one relay of 10 slots) are published after ten messages of one key to an
# ordered handler: the ten arrive, in order, while most of the backlog is
# still undelivered.  Without the guarantee they would wait for the whole
# backlog to be routed.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT set_conf);

my $recv = start_receiver();
my $node = grelout_node('ordered_backlog',
	"grelout.workers = 1",
	"grelout.concurrency = 10",
	"grelout.relay = off");
sub sq { return $node->safe_psql('app', $_[0]); }

$recv->script('/slow', [], { delay => 0.05 });
my ($slow, $ord) = ($recv->url('/slow'), $recv->url('/ord'));
sq(qq{
	INSERT INTO grelout.handlers (name, topic, url) VALUES ('slow', 'bulk', '$slow');
	INSERT INTO grelout.handlers (name, topic, url, ordered) VALUES ('ord', 'seq', '$ord', true);
	SELECT outbox_publish('seq', jsonb_build_object('key', 'k', 'n', g), key => 'k')
	FROM generate_series(1, 10) g;
	SELECT count(outbox_publish('bulk', jsonb_build_object('i', g))) FROM generate_series(1, 2000) g;
});
set_conf($node, "grelout.relay" => "on");

ok(wait_until(sub { $recv->count('/ord') >= 10 }, 60), 'the ten ordered messages arrive');
my $slow_done = $recv->count('/slow');
cmp_ok($slow_done, '<', 1500,
	"while most of the slow endpoint's backlog is still to go ($slow_done of 2000 sent)");
my $o = $recv->order('/ord');
is($o->{out_of_order}, 0, 'in order');
is($o->{overlaps}, 0, 'one at a time');
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox") eq '0' }, 120), 'everything drains');

done_testing();
