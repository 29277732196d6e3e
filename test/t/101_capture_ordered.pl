# A captured row's changes to an ordered handler arrive in commit order
# (issue 13 with issue 12): 100 UPDATEs of one row, committed one by one by
# four sessions (the row lock puts them in a commit order, which the
# counter column records), delivered to an endpoint that fails a fifth of
# its requests at random.  Every update arrives, none out of order (a
# request is the next update or a repeat of the last success), and never
# two at once.  Unordered, the retries of failed requests would let later
# updates overtake them.
use strict;
use warnings;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $updates = 100;
my $recv = start_receiver();
my $node = grelout_node('capture_ordered',
	"grelout.workers = 2",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '20ms'",
	"grelout.retry_max = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.max_attempts = 1000");
sub sq { return $node->safe_psql('app', $_[0]); }

$recv->script('/row', [], { fail_rate => 0.2, delay => 0.002 });
my $url = $recv->url('/row');
sq(qq{
	CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL);
	INSERT INTO counter VALUES (1, 0);
	SELECT grelout.capture('counter', events => '{update}');
	INSERT INTO grelout.handlers (name, topic, url, ordered)
	VALUES ('rows', 'public.counter.update', '$url', true);
	CREATE PROCEDURE bump(times int) LANGUAGE plpgsql AS \$\$
	BEGIN
		FOR i IN 1 .. times LOOP
			UPDATE counter SET n = n + 1 WHERE id = 1;
			COMMIT;
		END LOOP;
	END
	\$\$;
});

my @h;
for (1 .. 4)
{
	my ($out, $err) = ('', '');
	push @h, IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('app'),
		  '-c', 'CALL bump(' . ($updates / 4) . ')' ],
		'>', \$out, '2>', \$err);
}
$_->finish for @h;
is(sq('SELECT n FROM counter'), $updates, "$updates updates committed by four sessions");

ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox") eq '0' }, 180),
	'the outbox drains');

# the receiver's requests, oldest first: each the next update, or a repeat
# of the last one answered 2xx; none before the previous one was answered
my ($top, $out_of_order, $overlaps, $repeats, $failed, $last_done) = (0, 0, 0, 0, 0, 0);
my @examples;
for my $r (@{ $recv->requests('/row') })
{
	my $p = decode_json($r->{body});
	my $n = $p->{new}{n};
	$overlaps++ if !defined $last_done || $r->{received_at} < $last_done;
	$last_done = $r->{done_at};
	if ($n == $top) { $repeats++ }
	elsif ($n != $top + 1)
	{
		$out_of_order++;
		push @examples, "update $n after $top" if @examples < 5;
	}
	if (($r->{status} // 0) >= 200 && $r->{status} < 300) { $top = $n if $n > $top }
	else { $failed++ }
}
is($out_of_order, 0, 'every update arrived in commit order') or diag(join("\n", @examples));
is($overlaps, 0, 'never two updates of the row at once');
is($top, $updates, "all $updates updates delivered");
cmp_ok($failed, '>', 0, "the endpoint failed some requests ($failed), which were retried");

done_testing();
