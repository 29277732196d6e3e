# Settles are fenced by the claim's lease token.  A relay is frozen
# (SIGSTOP) while its request is in flight; its lease lapses and the other
# relay takes the message over and delivers it.  When the frozen relay
# resumes, its late outcome for the old claim must change nothing: neither
# after a plain reclaim (a second attempt) nor after the message went dead
# and was redriven (attempts reset to the same number the stale claim had).
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('fencing',
	"grelout.workers = 2",
	"grelout.lease_duration = '8s'",
	"grelout.poll_interval = '200ms'",
	"grelout.keep_delivered = on");

my @stopped;
# never leave a frozen relay behind, whatever happens
END { kill 'CONT', @stopped if @stopped; }

sub sq { return $node->safe_psql('app', $_[0]); }

sub state_of { return sq("SELECT state FROM grelout.outbox WHERE id = '$_[0]'"); }

# publish on a topic whose first answer is a 500 after 3 s, find the relay
# that sent it while it still waits, and freeze it
sub publish_and_freeze
{
	my ($topic) = @_;
	$recv->script("/$topic", [ { status => 500, body => 'stale failure', delay => 3 } ], {});
	my $id = sq("SELECT outbox_publish('$topic', '{}')");
	wait_until(sub { $recv->count("/$topic") >= 1 }, 60) or return;
	my $pid;
	wait_until(sub { $pid = sq('SELECT pid FROM grelout.relays WHERE in_flight > 0 LIMIT 1'); $pid ne '' }, 10)
	  or return;
	kill 'STOP', $pid or return;
	push @stopped, $pid;
	return ($id, $pid);
}

sub resume
{
	my ($pid) = @_;
	kill 'CONT', $pid;
	@stopped = grep { $_ != $pid } @stopped;
}

for my $t (qw(reclaim redrive))
{
	my $url = $recv->url("/$t");
	sq("INSERT INTO grelout.handlers (topic, url, max_attempts)
		VALUES ('$t', '$url', " . ($t eq 'redrive' ? 1 : 'NULL') . ")");
}
ok(wait_until(sub { scalar(relay_pids($node)) == 2 }, 60), 'two relays running');

# ---- reclaim after the lease lapsed
my $offset = log_offset($node);
my ($id, $frozen) = publish_and_freeze('reclaim');
ok($frozen, 'reclaim: the relay holding the request is frozen');
is(state_of($id), 'processing', 'reclaim: the message is processing, its outcome not yet written');
ok(wait_until(sub { state_of($id) eq 'delivered' }, 60),
	'reclaim: the other relay takes it over once the lease lapsed, and delivers it');
is($recv->summary('/reclaim')->[1]{attempt}, '2', 'reclaim: as attempt 2');
resume($frozen);
ok(wait_until(sub { log_since($node, $offset) =~ /\[$frozen\] WARNING:  grelout message \Q$id\E of topic "reclaim" failed on attempt 1/ }, 60),
	'reclaim: the resumed relay reports its late failure of attempt 1');
sleep(1);
is(state_of($id), 'delivered', 'reclaim: its late settle did not undo the delivery');
is(sq("SELECT attempts || ' ' || (delivered_at IS NOT NULL) FROM grelout.outbox WHERE id = '$id'"), '2 true',
	'reclaim: attempts and delivered_at are those of the delivery');
is($recv->count('/reclaim'), 2, 'reclaim: the message was not sent again');

# ---- dead at the reclaim, redriven, delivered; then the stale outcome
$offset = log_offset($node);
($id, $frozen) = publish_and_freeze('redrive');
ok($frozen, 'redrive: the relay holding the request is frozen');
ok(wait_until(sub { state_of($id) eq 'dead' }, 60),
	'redrive: when the lease lapses its only attempt is used up: dead at the next claim');
is(sq('SELECT outbox_redrive()'), '1', 'redrive: redriven');
ok(wait_until(sub { state_of($id) eq 'delivered' }, 60), 'redrive: delivered by the other relay');
is(sq("SELECT attempts FROM grelout.outbox WHERE id = '$id'"), '1',
	'redrive: on attempt 1 again, the number the stale claim had');
resume($frozen);
ok(wait_until(sub { log_since($node, $offset) =~ /\[$frozen\] WARNING:  grelout message \Q$id\E of topic "redrive" is dead after attempt 1/ }, 60),
	'redrive: the resumed relay reports its stale attempt 1 as dead');
sleep(1);
is(state_of($id), 'delivered', 'redrive: its late settle did not overwrite the new delivery');
is(sq("SELECT dead_at IS NULL FROM grelout.outbox WHERE id = '$id'"), 't', 'redrive: dead_at stays unset');
is($recv->count('/redrive'), 2, 'redrive: two requests in all');

$node->stop;
$recv->stop;
done_testing();
