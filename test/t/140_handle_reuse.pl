# The relay reuses its curl easy handles (one per request slot) and the
# keyed contexts of its signing keys: nothing of one request may reach the
# next.  With one relay of concurrency 1 every request runs on the same
# easy handle (with libcurl 8.1.0 or later: under an older one, such as
# Debian 12's 7.88, src/pure/http.c gives each request a new handle, and
# this test checks the keyed contexts and the requests only), and two handlers that differ in everything a request has
# (URL path and credentials, secret, static headers, message headers,
# timeout, body) alternate through it, including right after a request
# that timed out and one answered 500.  Every request must carry exactly
# its own handler's and message's URL, headers, signature, body and
# timeout.  Then one handler's URL and secret change: the next requests
# use the new ones only.
#
# The test publishes one message at a time and the next only once the
# previous one is settled (delivered, or dead), so nothing else is ever due
# while a request is in flight: the fair-slot rule (a handler with due work
# and nothing in flight gets a request beside the others) never applies and
# the order of the requests is exactly the order of publishing.  a's failed
# message is dead at once (max_attempts 1) and redriven by the test, rather
# than retried by the relay on its own clock.
use strict;
use warnings;
use Digest::SHA qw(hmac_sha256);
use JSON::PP;
use MIME::Base64 qw(decode_base64 encode_base64);
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT log_offset log_since new_secret);

my $recv = start_receiver();
my $node = grelout_node('handle_reuse',
	"grelout.workers = 1",
	"grelout.concurrency = 1",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '200ms'",
	"grelout.retry_jitter = 0");

sub sq { return $node->safe_psql('app', $_[0]); }

# signature(SECRET, REQUEST): the v1 signature SECRET gives the request.
sub signature
{
	my ($secret, $r) = @_;
	my $key = decode_base64(substr($secret, 6));
	my $h = $r->{headers};
	my $msg = "$h->{'webhook-id'}.$h->{'webhook-timestamp'}.$r->{body}";
	return 'v1,' . encode_base64(hmac_sha256($msg, $key), '');
}

my $secret_a = new_secret(32);
my $secret_a2 = new_secret(40);
my $port = $recv->port;
# handler a: credentials in its URL, a secret, static headers, 300 ms
# timeout, one attempt (a failed message goes dead, the test redrives it);
# handler b: none of these, its own header, a 5 s timeout
sq(qq{
	INSERT INTO grelout.handlers (topic, url, secret, headers, timeout, max_attempts)
		VALUES ('a', 'http://alice:pw-a\@127.0.0.1:$port/a', '$secret_a',
				'{"X-A": "static-a", "X-Common": "from-a"}', '300ms', 1);
	INSERT INTO grelout.handlers (topic, url, headers, timeout)
		VALUES ('b', 'http://127.0.0.1:$port/b', '{"X-B": "static-b"}', '5s');
});

# a's first request outlasts its 300 ms timeout (the receiver notes when
# the relay hangs up), its second is answered 500; every request of b
# takes 600 ms, which only a's timeout would cut
$recv->script('/a', [ { delay => 1.5, watch_hangup => JSON::PP::true },
		{ status => 500, body => 'a failed' } ], { status => 204 });
$recv->script('/b', [], { delay => 0.6, status => 204 });

my %body_of;
my @expected;    # "a ID" / "b ID": the requests, in the order they must come
my @not_settled;

# state_of(ID): the message's state, "gone" once delivered (and deleted)
sub state_of
{
	my ($id) = @_;
	return sq("SELECT coalesce((SELECT state FROM grelout.outbox WHERE id = '$id'), 'gone')");
}

# settle(TOPIC, ID, STATE): one request of ID is expected; wait until the
# message is STATE ("gone": delivered; "dead")
sub settle
{
	my ($t, $id, $state) = @_;
	push @expected, "$t $id";
	push @not_settled, "$t $id: " . state_of($id) . ", not $state"
	  unless wait_until(sub { state_of($id) eq $state }, 30);
	return;
}

# publish(TOPIC, N): publish one message of TOPIC (a's with a message
# header), returns its id
sub publish
{
	my ($t, $i) = @_;
	my $payload = sprintf('{"t": "%s", "n": %d, "pad": "%s"}', $t, $i, $t x (10 * $i));
	my $headers = $t eq 'a' ? q{, headers => '{"X-Msg-A": "m-a"}'} : '';
	my $id = sq("SELECT outbox_publish('$t', '$payload'$headers)");
	$body_of{$id} = sq("SELECT '$payload'::jsonb::text");
	return $id;
}

# redrive(ID): the dead message ID goes again, due now
sub redrive
{
	my ($id) = @_;
	my $got = sq("SELECT outbox_redrive(message_id => '$id')");
	push @not_settled, "a $id: redrive moved $got deliveries, not 1" unless $got eq '1';
	return;
}

# a and b take turns on the one handle: a1 (times out: dead), b1, a1
# again (500: dead), b2, a1 once more (delivered), b3, then a2, b4, a3,
# b5, ... : a has $n messages and $n + 2 requests, b $n + 2 messages
my $n = 5;
my $nb = $n + 2;
my $offset = log_offset($node);
my $a1 = publish('a', 1);
settle('a', $a1, 'dead');
my $a1_error_1 = sq("SELECT last_error FROM grelout.outbox WHERE id = '$a1'");
settle('b', publish('b', 1), 'gone');
redrive($a1);
settle('a', $a1, 'dead');
my $a1_error_2 = sq("SELECT last_error FROM grelout.outbox WHERE id = '$a1'");
settle('b', publish('b', 2), 'gone');
redrive($a1);
settle('a', $a1, 'gone');
for my $i (2 .. $n)
{
	settle('b', publish('b', $i + 1), 'gone');
	settle('a', publish('a', $i), 'gone');
}
settle('b', publish('b', $nb), 'gone');

is_deeply(\@not_settled, [], 'each message settled before the next was published')
  or diag(join("\n", @not_settled));
is(sq("SELECT count(*) FROM grelout.outbox"), '0', 'every message delivered')
  or diag(sq("SELECT topic, state, attempts, last_error FROM grelout.outbox"));
like($a1_error_1, qr/timed out/i, "a's first request failed by its timeout")
  or diag("last_error: $a1_error_1");
like($a1_error_2, qr/500/, "a's second request failed with its 500")
  or diag("last_error: $a1_error_2");
is($recv->count('/a'), $n + 2, "a: $n messages, one of them sent three times");
is($recv->count('/b'), $nb, "b: $nb messages, each sent once (a's 300 ms timeout never cut b's 600 ms answers)");
like(log_since($node, $offset), qr/timed out after 300 ms/,
	"a's slow answer was cut by a's own 300 ms timeout, not b's 5 s");

my @ra = @{ $recv->requests('/a') };
my @rb = @{ $recv->requests('/b') };
my @base = qw(accept content-length content-type grelout-attempt grelout-handler
  grelout-topic host user-agent webhook-id webhook-timestamp);
my @a_names = sort(@base, qw(authorization webhook-signature x-a x-common x-msg-a));
my @b_names = sort(@base, qw(x-b));

my @bad;
for my $r (@ra)
{
	my $h = $r->{headers};
	my $id = $h->{'webhook-id'} // '';
	my @names = sort map { $_->[0] } @{ $r->{header_list} };
	push @bad, "a $id: headers @names" unless "@names" eq "@a_names";
	push @bad, "a $id: body $r->{body}" unless defined $body_of{$id} && $r->{body} eq $body_of{$id};
	push @bad, "a $id: topic" unless ($h->{'grelout-topic'} // '') eq 'a';
	push @bad, "a $id: authorization" unless ($h->{authorization} // '') eq 'Basic ' . encode_base64('alice:pw-a', '');
	push @bad, "a $id: signature" unless ($h->{'webhook-signature'} // '') eq signature($secret_a, $r);
	push @bad, "a $id: static headers" unless ($h->{'x-a'} // '') eq 'static-a' && ($h->{'x-common'} // '') eq 'from-a';
	push @bad, "a $id: message header" unless ($h->{'x-msg-a'} // '') eq 'm-a';
}
for my $r (@rb)
{
	my $h = $r->{headers};
	my $id = $h->{'webhook-id'} // '';
	my @names = sort map { $_->[0] } @{ $r->{header_list} };
	push @bad, "b $id: headers @names" unless "@names" eq "@b_names";
	push @bad, "b $id: body $r->{body}" unless defined $body_of{$id} && $r->{body} eq $body_of{$id};
	push @bad, "b $id: topic" unless ($h->{'grelout-topic'} // '') eq 'b';
	push @bad, "b $id: attempt $h->{'grelout-attempt'}" unless ($h->{'grelout-attempt'} // '') eq '1';
	push @bad, "b $id: static header" unless ($h->{'x-b'} // '') eq 'static-b';
}
is_deeply(\@bad, [], 'every request has exactly its own URL, credentials, headers, signature and body')
  or diag(join("\n", @bad));

# the requests took turns on the one handle, one at a time, in exactly the
# order they were caused: a, b, a, b, ...; b's request came right after
# a's timed-out one and right after a's 500
my @order = sort { $a->{received_at} <=> $b->{received_at} } (@ra, @rb);
my @got = map { ($_->{path} eq '/a' ? 'a' : 'b') . ' ' . ($_->{headers}{'webhook-id'} // '') } @order;
is_deeply(\@got, \@expected, 'the requests alternated a, b, a, b, ... in the order of publishing')
  or diag("got:\n" . join("\n", @got) . "\nexpected:\n" . join("\n", @expected));
my @overlaps;
for my $i (1 .. $#order)
{
	my $prev_done = $order[$i - 1]{done_at};
	push @overlaps, "$got[$i] came before $got[$i - 1] was answered or hung up on"
	  unless defined $prev_done && $order[$i]{received_at} >= $prev_done;
}
is_deeply(\@overlaps, [], 'never two requests in flight at once (one slot, one handle)')
  or diag(join("\n", @overlaps));
my $timed_out = $ra[0];
ok(defined $timed_out->{hung_up_at} && $timed_out->{hung_up_at} - $timed_out->{received_at} < 1.0,
	"a's first request was hung up on before its 1.5 s answer (a's 300 ms timeout)")
  or diag(explain($timed_out));
is($ra[1]{status}, 500, "a's second request was answered 500");
ok(@order >= 4 && $order[0] == $ra[0] && $order[1]{path} eq '/b',
	'the first request of b came right after the request of a that timed out');
ok(@order >= 4 && $order[2] == $ra[1] && $order[3]{path} eq '/b',
	'the second request of b came right after the request of a answered 500');

# ---- a's URL (no credentials now) and secret change: the next requests use them
my $url_a2 = $recv->url('/a2');
sq("UPDATE grelout.handlers SET url = '$url_a2', secret = '$secret_a2', headers = '{}' WHERE topic = 'a'");
$recv->script('/a2', [], { status => 204 });
# again one message at a time, a and b in turns
@not_settled = ();
for my $i (1 .. 3)
{
	for my $t ('a', 'b')
	{
		my $id = sq("SELECT outbox_publish('$t', '{\"t\": \"$t\", \"again\": $i}')");
		settle($t, $id, 'gone');
	}
}
is_deeply(\@not_settled, [], 'the messages after the change delivered')
  or diag(join("\n", @not_settled));
is($recv->count('/a'), $n + 2, 'nothing more went to the old URL of a');
my @a2 = @{ $recv->requests('/a2') };
is(scalar(@a2), 3, 'the new URL of a got its three messages');
@bad = ();
for my $r (@a2)
{
	my $h = $r->{headers};
	push @bad, "no credentials: $h->{authorization}" if exists $h->{authorization};
	push @bad, 'old static headers' if exists $h->{'x-a'} || exists $h->{'x-common'};
	push @bad, 'not signed with the new secret'
	  unless ($h->{'webhook-signature'} // '') eq signature($secret_a2, $r);
	push @bad, 'signed with the old secret'
	  if ($h->{'webhook-signature'} // '') eq signature($secret_a, $r);
}
is_deeply(\@bad, [], 'after the change: no credentials, no old headers, signed with the new secret only')
  or diag(join("\n", @bad));
is($recv->count('/b'), $nb + 3, 'b got its three later messages');

$node->stop;
done_testing();
