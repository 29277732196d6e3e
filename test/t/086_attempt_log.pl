# The attempt log (issue 33, part 3): grelout.attempts against a live
# receiver.  With the default grelout.log_attempts (failed) the failed
# attempts of a delivery (retried, dead, a refused connection, a fan-out
# delivery) each leave a row with the status, duration, the body's first
# bytes and its Content-Type, and the success none; with "all" every
# attempt, successes included, also those of deliveries deleted at once
# (keep_delivered off, inline and fan-out); with "off" none.  attempt_body_max cuts the
# body; a logged delivery has as many rows as it had logged attempts (the
# rows are written by its settles), and an attempt whose settle is lost
# (fenced out by a changed lease) has none; the relays purge rows older than
# grelout.keep_attempts (7 days by default, then a shorter setting); a 1.1
# schema logs nothing, and logs once updated to 1.2; publishers cannot read
# the log.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT set_conf);

my $recv = start_receiver();
my $node = grelout_node('attempts',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.retry_max = '1s'",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $topic, $url, $extra) = @_;
	sq("INSERT INTO grelout.handlers (name, topic, url"
		  . ($extra ? ', max_attempts' : '')
		  . ") VALUES ('$name', '$topic', '$url'" . ($extra ? ", $extra" : '') . ')');
}

sub publish { return sq("SELECT outbox_publish('$_[0]', '{\"t\": \"$_[0]\"}')"); }

sub state_is
{
	my ($id, $state) = @_;
	return wait_until(sub {
		sq("SELECT state FROM grelout.outbox WHERE id = '$id'") eq $state }, 30);
}

# the logged rows of a message: "attempt|status|error class|body|type|duration
# ok", a line break of the body written as \n
sub rows
{
	my ($id, $handler) = @_;
	my $h = $handler ? " AND handler = '$handler'" : '';
	return [ split /\n/, sq(qq{SELECT attempt || '|' || coalesce(status::text, '-') || '|'
		|| coalesce(split_part(error, ':', 1), '-') || '|'
		|| coalesce(replace(response_body, E'\\n', '\\n'), '-') || '|' || coalesce(content_type, '-') || '|'
		|| (duration_ms >= 0 AND started_at <= now()
			AND started_at > now() - interval '5 minutes')::text
		FROM grelout.attempts WHERE message_id = '$id'$h ORDER BY attempt, started_at}) ];
}

# ---- the purge, with the default keep_attempts of 7 days: an 8-day-old
# row goes, a 6-day-old one stays
sq(q{INSERT INTO grelout.attempts (message_id, handler, attempt, started_at)
	VALUES ('00000000-0000-0000-0000-000000000008', 'old', 1, now() - interval '8 days'),
	       ('00000000-0000-0000-0000-000000000006', 'old', 1, now() - interval '6 days')});

# ---- default: failed attempts only
my $problem = '{"title": "upstream down", "detail": "try later"}';
$recv->script('/flaky', [ ({ status => 503, body => $problem,
	headers => { 'Content-Type' => 'application/problem+json' } }) x 2 ], {});
handler('flaky', 'flaky', $recv->url('/flaky'));
$recv->script('/dead', [], { status => 500, body => "nope\n",
	headers => { 'Content-Type' => 'text/plain; charset=utf-8' } });
handler('dead', 'dead', $recv->url('/dead'), 2);
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
handler('refused', 'refused', "http://127.0.0.1:$closed_port/x", 1);
$recv->script('/fa', [ { status => 502, body => 'bad gateway' } ], {});
$recv->script('/fb', [], {});
handler('fan_a', 'fan', $recv->url('/fa'));
handler('fan_b', 'fan', $recv->url('/fb'));

my $flaky = publish('flaky');
my $dead = publish('dead');
my $refused = publish('refused');
my $fan = publish('fan');
ok(state_is($flaky, 'delivered'), 'flaky: delivered on its third attempt');
ok(state_is($dead, 'dead'), 'dead: dead after two attempts');
ok(state_is($refused, 'dead'), 'refused: dead after one attempt');
ok(state_is($fan, 'delivered'), 'fan: delivered to both handlers');

is_deeply(rows($flaky), [
	"1|503|HTTP 503|$problem|application/problem+json|true",
	"2|503|HTTP 503|$problem|application/problem+json|true" ],
	'default: both failed attempts logged with status, body and content type; the success not');
is(sq("SELECT attempts FROM grelout.outbox WHERE id = '$flaky'"), '3',
	'flaky: three attempts, of which the two failed are logged');
is_deeply(rows($dead), [
	'1|500|HTTP 500|nope\n|text/plain; charset=utf-8|true',
	'2|500|HTTP 500|nope\n|text/plain; charset=utf-8|true' ],
	'default: the retried attempt and the dead one logged, the body as text (line break kept)');
my @r = @{ rows($refused) };
is(scalar(@r), 1, 'refused: one row');
like($r[0], qr/^1\|-\|[^|]+\|-\|-\|true$/,
	'a refused connection: no status, no body, no content type, an error');
is(sq("SELECT error = (SELECT last_error FROM grelout.outbox WHERE id = '$refused')
	FROM grelout.attempts WHERE message_id = '$refused'"), 't',
	'its error is the delivery\'s last_error');
is_deeply(rows($fan, 'fan_a'), [ '1|502|HTTP 502|bad gateway|-|true' ],
	'fan-out: the failed delivery logged under its handler (no Content-Type sent: NULL)');
is_deeply(rows($fan, 'fan_b'), [], 'fan-out: the delivered one not');

# every row is an attempt its settle recorded: no more rows than the
# deliveries' failed attempts
is(sq(q{SELECT count(*) FROM grelout.attempts WHERE handler <> 'old'}), '6',
	'six failed attempts, six rows');

# ---- an attempt whose settle is lost leaves no row: while its request is
# at the receiver, the delivery's lease changes (as when the lease lapsed
# and another relay claimed it), so its settle changes nothing; a twin
# message answered at the same moment, whose lease is left alone, is
# logged
$recv->script('/fenced', [ { delay => 2, status => 503, body => 'late' } ], {});
handler('fenced', 'fenced', $recv->url('/fenced'));
$recv->script('/twin', [ { delay => 2, status => 503, body => 'late' } ], {});
handler('twin', 'twin', $recv->url('/twin'));
my $fenced = publish('fenced');
my $twin = publish('twin');
ok(wait_until(sub { $recv->count('/fenced') >= 1 && $recv->count('/twin') >= 1 }, 30),
	'fenced and twin: both requests at the receiver');
sq("UPDATE grelout.outbox SET lease = lease + 1 WHERE id = '$fenced' AND state = 'processing'");
ok(wait_until(sub { @{ rows($twin) } >= 1 }, 30), 'twin: its failed attempt logged');
is(sq("SELECT count(*) FROM grelout.attempts WHERE message_id = '$fenced'"), '0',
	'fenced: its settle was lost, and no row was written for its attempt');
is(sq("SELECT state || '|' || attempts || '|' || (last_error IS NULL)
	FROM grelout.outbox WHERE id = '$fenced'"), 'processing|1|true',
	'fenced: the delivery shows no settle either');

# ---- all: every attempt
set_conf($node, 'grelout.log_attempts' => 'all');
$recv->script('/all', [ { status => 500, body => 'once' } ],
	{ status => 200, body => 'thanks', headers => { 'Content-Type' => 'text/plain' } });
handler('all', 'all', $recv->url('/all'));
my $all = publish('all');
ok(state_is($all, 'delivered'), 'all: delivered on its second attempt');
is_deeply(rows($all), [ '1|500|HTTP 500|once|-|true', '2|200|-|thanks|text/plain|true' ],
	'all: the failure and the success logged, the success without an error');
is(sq("SELECT count(*) FROM grelout.attempts WHERE message_id = '$all'"),
	sq("SELECT attempts FROM grelout.outbox WHERE id = '$all'"),
	'all: as many rows as the delivery had attempts');

# ---- delivered rows not kept (keep_delivered off): the settle statement
# that deletes them writes their attempts' rows, inline and fan-out
set_conf($node, 'grelout.keep_delivered' => 'off');
$recv->script($_, [], { status => 204 }) for qw(/gone /ga /gb);
handler('gone', 'gone', $recv->url('/gone'));
handler('gone_a', 'gonefan', $recv->url('/ga'));
handler('gone_b', 'gonefan', $recv->url('/gb'));
my $gone = publish('gone');
my $gonefan = publish('gonefan');
ok(wait_until(sub {
	sq("SELECT count(*) FROM grelout.outbox WHERE id IN ('$gone', '$gonefan')") eq '0'
	  && sq("SELECT count(*) FROM grelout.fanout WHERE message_id = '$gonefan'") eq '0'
}, 30), 'keep_delivered off: both messages delivered and deleted at once');
my $logged = sub {
	sq("SELECT string_agg(handler || ':' || attempt || ':' || status, ',' ORDER BY handler)"
		  . " FROM grelout.attempts WHERE message_id = '$_[0]'");
};
is($logged->($gone), 'gone:1:204', 'an inline delivery deleted at once: its attempt logged');
is($logged->($gonefan), 'gone_a:1:204,gone_b:1:204',
	'fan-out deliveries deleted at once: each attempt logged under its handler');
set_conf($node, 'grelout.keep_delivered' => 'on');

# ---- attempt_body_max cuts the body
set_conf($node, 'grelout.attempt_body_max' => '16');
$recv->script('/long', [], { status => 200, body => 'abcdefghijklmnopqrstuvwxyz' });
handler('long', 'long', $recv->url('/long'));
my $long = publish('long');
ok(state_is($long, 'delivered'), 'long: delivered');
is(sq("SELECT response_body FROM grelout.attempts WHERE message_id = '$long'"),
	'abcdefghijklmnop', 'attempt_body_max = 16: the body\'s first 16 bytes');
set_conf($node, 'grelout.attempt_body_max' => '0');
my $long2 = publish('long');
ok(state_is($long2, 'delivered'), 'long: delivered again');
is(sq("SELECT coalesce(response_body, 'null') || '|' || status
	FROM grelout.attempts WHERE message_id = '$long2'"),
	'null|200', 'attempt_body_max = 0: no body, the status still');

# ---- off: nothing
set_conf($node, 'grelout.log_attempts' => 'off');
$recv->script('/off', [ ({ status => 503, body => 'down' }) x 2 ], {});
handler('off', 'off', $recv->url('/off'));
my $off = publish('off');
ok(state_is($off, 'delivered'), 'off: delivered on its third attempt');
is(sq("SELECT attempts FROM grelout.outbox WHERE id = '$off'"), '3', 'off: three attempts');
is(sq("SELECT count(*) FROM grelout.attempts WHERE message_id = '$off'"), '0',
	'off: none logged');

# ---- the purge
ok(wait_until(sub {
	sq(q{SELECT count(*) FROM grelout.attempts
		WHERE message_id = '00000000-0000-0000-0000-000000000008'}) eq '0' }, 40),
	'keep_attempts 7 days: the relays purged the 8-day-old row');
is(sq(q{SELECT count(*) FROM grelout.attempts
	WHERE message_id = '00000000-0000-0000-0000-000000000006'}), '1',
	'and kept the 6-day-old one');
my $recent = sq(q{SELECT count(*) FROM grelout.attempts WHERE handler <> 'old'});
set_conf($node, 'grelout.keep_attempts' => '5d');
ok(wait_until(sub {
	sq(q{SELECT count(*) FROM grelout.attempts
		WHERE message_id = '00000000-0000-0000-0000-000000000006'}) eq '0' }, 40),
	'keep_attempts 5 days: the 6-day-old row purged');
is(sq(q{SELECT count(*) FROM grelout.attempts WHERE handler <> 'old'}), $recent,
	'the recent rows kept');

# ---- a 1.1 schema has no attempt log: the relays deliver and retry there
# as before, and log the attempts once ALTER EXTENSION ... UPDATE TO '1.2'
# has committed
set_conf($node, 'grelout.log_attempts' => 'failed');
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', "CREATE EXTENSION grelout VERSION '1.1'");
set_conf($node, 'grelout.database' => 'app, old');
$recv->script('/old', [], { status => 503, body => 'old down' });
$node->safe_psql('old', "INSERT INTO grelout.handlers (topic, url) VALUES ('old', '"
	. $recv->url('/old') . "')");
my $old = $node->safe_psql('old', q{SELECT outbox_publish('old', '{}')});
ok(wait_until(sub {
	$node->safe_psql('old', "SELECT attempts >= 2 FROM grelout.outbox WHERE id = '$old'") eq 't' }, 30),
	'1.1 schema: the relays retry a failing delivery, without an attempt log');
$node->safe_psql('old', "ALTER EXTENSION grelout UPDATE TO '1.2'");
my $done = $node->safe_psql('old', "SELECT attempts FROM grelout.outbox WHERE id = '$old'");
ok(wait_until(sub {
	$node->safe_psql('old', "SELECT count(*) > 0 FROM grelout.attempts WHERE message_id = '$old'") eq 't' }, 30),
	'after the update to 1.2: its next failed attempts are logged');
is($node->safe_psql('old', "SELECT count(*) FROM grelout.attempts
	WHERE message_id = '$old' AND (attempt <= $done - 1 OR status <> 503)"), '0',
	'only attempts made after the update, each with the status');

# ---- the log stays administrators' only
sq('CREATE ROLE publisher LOGIN');
sq('GRANT USAGE ON SCHEMA grelout TO publisher');
my ($ret, $out, $err) = $node->psql('app', 'SELECT count(*) FROM grelout.attempts',
	extra_params => [ '-U', 'publisher' ]);
like($err, qr/permission denied for table attempts/, 'a role without grants cannot read the log');

$node->stop;
done_testing();
