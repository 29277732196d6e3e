# A claim that dead-letters a lapsed claim and is then rolled back has
# dead-lettered nothing (issue 9, defect 9): no WARNING, no count in
# grelout.relays; once a claim commits, the dead letter is logged and
# counted once.
#
# The claim's commit is made to fail with a deferred constraint trigger on
# grelout.outbox that refuses a row becoming dead while a flag row exists.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('claim_rollback', "grelout.poll_interval = '200ms'");
sub sq { return $node->safe_psql('app', $_[0]); }

ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');

my $url = $recv->url('/never');
sq(<<"SQL");
INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('exhausted', '$url', 1);
CREATE TABLE public.refuse_dead_flag (on_ boolean);
INSERT INTO public.refuse_dead_flag VALUES (true);
CREATE FUNCTION public.refuse_dead() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	IF NEW.state = 'dead' AND EXISTS (SELECT 1 FROM public.refuse_dead_flag) THEN
		RAISE EXCEPTION 'test: a dead letter refused at commit';
	END IF;
	RETURN NULL;
END
\$\$;
CREATE CONSTRAINT TRIGGER refuse_dead AFTER UPDATE ON grelout.outbox
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.refuse_dead();
SQL

# a claim whose relay died on its last attempt: its lease has lapsed
my $offset = log_offset($node);
my $id = sq(<<'SQL');
INSERT INTO grelout.outbox (id, topic, payload, attempts, state, available_at, lease)
VALUES (gen_random_uuid(), 'exhausted', '{}', 1, 'processing', now() - interval '1 second', 42)
RETURNING id
SQL

ok(wait_until(sub { () = log_since($node, $offset) =~ /a dead letter refused at commit/g; }, 60),
	'the claim that dead-letters it fails at commit');
ok(wait_until(sub { my @n = log_since($node, $offset) =~ /a dead letter refused at commit/g; @n >= 2 }, 60),
	'... again at the next try');
my $log = log_since($node, $offset);
unlike($log, qr/grelout message $id .* is dead/, 'no dead-letter WARNING for a claim rolled back');
is(sq('SELECT dead_lettered FROM grelout.relays'), '0', 'no dead letter counted for a claim rolled back');
is(sq("SELECT state FROM grelout.outbox WHERE id = '$id'"), 'processing', 'the row is unchanged');

# let the claim commit
sq('DELETE FROM public.refuse_dead_flag');
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE id = '$id'") eq 'dead' }, 60),
	'once the claim commits, the message is dead');
ok(wait_until(sub { sq('SELECT dead_lettered FROM grelout.relays') eq '1' }, 30),
	'... counted once');
$log = log_since($node, $offset);
my @warnings = $log =~ /(grelout message $id of topic "exhausted" is dead)/g;
is(scalar(@warnings), 1, '... with one WARNING');
is($recv->count('/never'), 0, 'and no request was sent for it');

$node->stop;
done_testing();
