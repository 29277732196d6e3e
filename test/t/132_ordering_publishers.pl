# Per-key ordering is per publishing role (issue 29): head of line is per
# (published_by, key).  Two roles publish to one ordered handler with the
# same key text: role A's message delayed 100 years, and another of A's
# dead with on_dead = 'block', hold back A's later messages of those keys
# only; B's messages of the same keys are delivered at once, and
# grelout.deliveries.blocked_by names a dead head of the same publisher
# only.  Messages stored under 1.0 (published_by NULL) are a publisher of
# their own.  A captured table's changes are published as its owner,
# whichever role writes them, so that a row's changes stay in commit order.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('ordering_publishers',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '5s'",
	"grelout.retry_jitter = 0");
sub sq { return $node->safe_psql('app', $_[0]); }

sq(q{
CREATE ROLE alice;
CREATE ROLE bob;
GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text)
	TO alice, bob;
});

# as(ROLE, SQL): run SQL as ROLE, return its output
sub as_role
{
	my ($role, $sql) = @_;
	return sq("SET ROLE $role; $sql");
}

# the payloads ("who:n") the receiver got on a path, in order
sub got
{
	my ($path) = @_;
	return join(',', map {
		my $b = decode_json($_->{body});
		"$b->{who}:$b->{n}"
	} @{ $recv->requests($path) });
}

my $url = $recv->url('/ord');
# the first request fails: with max_attempts 1, alice's first message dies
$recv->script('/ord', [ { status => 500 } ], {});
sq(qq{INSERT INTO grelout.handlers (name, topic, url, ordered, on_dead, max_attempts)
	VALUES ('ord', 'ord', '$url', true, 'block', 1)});

# ---- a dead head of alice's
my $dead = as_role('alice',
	q{SELECT outbox_publish('ord', '{"who": "alice", "n": 1}', key => 'user-2')});
ok(wait_until(sub {
	sq("SELECT state FROM grelout.deliveries WHERE message_id = '$dead'") eq 'dead'
}, 60), 'dead: alice\'s first message of user-2 is dead');
my $a2 = as_role('alice',
	q{SELECT outbox_publish('ord', '{"who": "alice", "n": 2}', key => 'user-2')});
as_role('bob', q{SELECT outbox_publish('ord', '{"who": "bob", "n": 1}', key => 'user-2')});
ok(wait_until(sub { got('/ord') =~ /bob:1/ }, 30),
	'dead: bob\'s message of the same key is delivered at once');
is(sq("SELECT blocked_by FROM grelout.deliveries WHERE message_id = '$a2'"), $dead,
	'dead: alice\'s next message is blocked by her dead head');
unlike(got('/ord'), qr/alice:2/, 'dead: and not sent');

# blocked_by of bob's pending delivery of the key: none (the handler paused)
sq("UPDATE grelout.handlers SET enabled = false WHERE name = 'ord'");
my $b2 = as_role('bob',
	q{SELECT outbox_publish('ord', '{"who": "bob", "n": 2}', key => 'user-2')});
ok(wait_until(sub {
	sq("SELECT seq IS NOT NULL FROM grelout.deliveries WHERE message_id = '$b2'") eq 't'
}, 30), 'dead: bob\'s second message is routed');
is(sq("SELECT blocked_by IS NULL FROM grelout.deliveries WHERE message_id = '$b2'"), 't',
	'dead: bob\'s pending delivery of the key is blocked by nothing');
sq("UPDATE grelout.handlers SET enabled = true WHERE name = 'ord'");
ok(wait_until(sub { got('/ord') =~ /bob:2/ }, 30), 'dead: then it is delivered');

# ---- a head of alice's delayed 100 years
as_role('alice', q{SELECT outbox_publish('ord', '{"who": "alice", "n": 3}', key => 'user-1',
	delay => '100 years')});
as_role('alice', q{SELECT outbox_publish('ord', '{"who": "alice", "n": 4}', key => 'user-1')});
as_role('bob', q{SELECT outbox_publish('ord', '{"who": "bob", "n": 3}', key => 'user-1')});
ok(wait_until(sub { got('/ord') =~ /bob:3/ }, 30),
	'delayed: bob\'s message of the same key is delivered at once');
unlike(got('/ord'), qr/alice:[34]/, 'delayed: alice\'s later message waits for her delayed one');

# ---- messages stored under 1.0: published_by NULL, a publisher of their own
sq(q{BEGIN;
	WITH m AS (SELECT outbox_publish('ord', '{"who": "legacy", "n": 1}', key => 'user-3',
		delay => '100 years') AS id)
	UPDATE grelout.outbox o SET published_by = NULL FROM m WHERE o.id = m.id;
	WITH m AS (SELECT outbox_publish('ord', '{"who": "legacy", "n": 2}', key => 'user-3') AS id)
	UPDATE grelout.outbox o SET published_by = NULL FROM m WHERE o.id = m.id;
	COMMIT});
as_role('alice', q{SELECT outbox_publish('ord', '{"who": "alice", "n": 5}', key => 'user-3')});
ok(wait_until(sub { got('/ord') =~ /alice:5/ }, 30),
	'1.0: a role\'s message is not held back by a delayed 1.0 message of the key');
unlike(got('/ord'), qr/legacy/, '1.0: the 1.0 messages keep their own order');

# ---- capture: two roles update one row; the first change fails once and
# is retried after 5 s: the second waits for it
sq(q{
CREATE ROLE tabowner;
CREATE TABLE acct (id int PRIMARY KEY, who text, n int);
ALTER TABLE acct OWNER TO tabowner;
GRANT UPDATE, SELECT ON acct TO alice, bob;
INSERT INTO acct VALUES (1, 'init', 0);
SELECT grelout.capture('acct', events => '{update}');
});
my $curl = $recv->url('/cap');
$recv->script('/cap', [ { status => 500 } ], {});
sq(qq{INSERT INTO grelout.handlers (name, topic, url, ordered)
	VALUES ('cap', 'public.acct.update', '$curl', true)});
as_role('alice', q{UPDATE acct SET who = 'alice', n = 1 WHERE id = 1});
ok(wait_until(sub { $recv->count('/cap') >= 1 }, 30), 'capture: alice\'s change was sent (and failed)');
as_role('bob', q{UPDATE acct SET who = 'bob', n = 2 WHERE id = 1});
is(sq(q{SELECT string_agg(DISTINCT published_by::regrole::text, ',') FROM grelout.outbox
	WHERE topic = 'public.acct.update'}), 'tabowner',
	'capture: both changes are published as the table\'s owner');
ok(wait_until(sub { $recv->count('/cap') >= 3 }, 60), 'capture: every change delivered');
my $order = join(',', map {
	my $b = decode_json($_->{body});
	"$b->{new}{who}:$_->{status}"
} @{ $recv->requests('/cap') });
is($order, 'alice:500,alice:204,bob:204', 'capture: the row\'s changes in commit order');

$node->stop;
$recv->stop;
done_testing();
