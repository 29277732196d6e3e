# The relay's timers ignore steps of the wall clock (issue 9, defect 9): a
# backward step neither suspends the poll fallback nor the retry after a
# failed cycle.
#
# The server runs under libfaketime with only the wall clock faked
# (FAKETIME_DONT_FAKE_MONOTONIC); its offset is read from a file on every
# call, so rewriting the file steps the clock of the running server.  Only
# pg_ctl (and so the postmaster and its children) gets LD_PRELOAD: psql and
# the receiver run on the real clock.  Messages are inserted straight into
# grelout.outbox, which sets no latch: only the relay's poll finds them.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $faketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
die "$faketime is missing: install libfaketime (scripts/deps)\n" unless -e $faketime;

my $recv = start_receiver();
my $clock = PostgreSQL::Test::Utils::tempdir() . '/faketime';

# step_clock(SECONDS): the server's wall clock, offset from the real one
sub step_clock
{
	my ($offset) = @_;
	open(my $fh, '>', "$clock.tmp") or die "cannot write $clock.tmp: $!";
	print $fh sprintf("%+d\n", $offset);
	close $fh or die;
	rename("$clock.tmp", $clock) or die "cannot rename to $clock: $!";
	return;
}
step_clock(0);

my $node = PostgreSQL::Test::Cluster->new('clock_step');
$node->init;
$node->append_conf('postgresql.conf', join("\n",
	"shared_preload_libraries = 'grelout'",
	"grelout.database = 'app'",
	"grelout.max_workers = 1",
	"grelout.poll_interval = '300ms'") . "\n");
{
	local $ENV{LD_PRELOAD} = $faketime;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $clock;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	local $ENV{DONT_FAKE_MONOTONIC} = '1';
	$node->start;
}
sub sq { return $node->safe_psql('app', $_[0]); }
$node->safe_psql('postgres', 'CREATE DATABASE app');
sq('CREATE EXTENSION grelout');
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');

my $url = $recv->url('/tick');
sq("INSERT INTO grelout.handlers (topic, url) VALUES ('tick', '$url')");

# stage(): a message due now, inserted without waking the relay
sub stage
{
	return sq("INSERT INTO grelout.outbox (id, topic, payload)
		VALUES (gen_random_uuid(), 'tick', '{}') RETURNING id");
}

# sent(N): whether the receiver has had N requests, waiting up to 30 s
sub sent
{
	my ($n) = @_;
	return wait_until(sub { $recv->count('/tick') >= $n }, 30);
}

# server_offset(): the server's wall clock less the real one, in seconds
sub server_offset
{
	return sq('SELECT extract(epoch FROM now())') - time();
}

ok(abs(server_offset()) < 60, 'the server clock starts at no offset');
stage();
ok(sent(1), 'the poll delivers a message before the step');

# the poll fallback: step the wall clock back an hour
step_clock(-3600);
my $off = server_offset();
ok($off < -3000 && $off > -4200, 'the server clock is an hour back')
	or diag("server clock offset: $off s");
stage();
ok(sent(2), 'the poll delivers a message after the backward step');

# the retry after a failed cycle: the claim's commit is refused while a
# flag row exists, and the clock steps back once more while it fails.  A
# message stamped before the step is not due until the clock catches up
# (available_at is wall-clock time in SQL), so a new one is staged after it.
sq(<<'SQL');
CREATE TABLE public.refuse_claim_flag (on_ boolean);
INSERT INTO public.refuse_claim_flag VALUES (true);
CREATE FUNCTION public.refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.state = 'processing' AND EXISTS (SELECT 1 FROM public.refuse_claim_flag) THEN
		RAISE EXCEPTION 'test: a claim refused at commit';
	END IF;
	RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER refuse_claim AFTER UPDATE ON grelout.outbox
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.refuse_claim();
SQL
my $offset = log_offset($node);
stage();
ok(wait_until(sub { () = log_since($node, $offset) =~ /a claim refused at commit/g; }, 30),
	'the cycle that claims a message fails');
step_clock(-7200);
$offset = log_offset($node);
stage();
ok(wait_until(sub { my @n = log_since($node, $offset) =~ /a claim refused at commit/g; @n >= 2 }, 30),
	'the failed cycle is retried after the backward step');
sq('DELETE FROM public.refuse_claim_flag');
ok(sent(3), 'once the claim may commit, the message staged after the step is delivered');

$node->stop;
$recv->stop;
done_testing();
