# Message headers never replace or remove what the handler or its URL sets
# (issue 15, item 2), also for messages stored around the publish checks
# (inserted straight into grelout.outbox): the URL's userinfo keeps its
# Basic Authorization, a handler header is sent once with the handler's
# value, credentials are never taken from a message, and an empty value
# does not remove libcurl's own header.  The receiver records every header
# line as it came, duplicates included.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use MIME::Base64 qw(encode_base64);
use GreloutTest qw(:DEFAULT relay_pids);

my $recv = start_receiver();
my $node = grelout_node('message_headers', "grelout.poll_interval = '500ms'");
sub sq { return $node->safe_psql('app', $_[0]); }

my $port = $recv->port;
sq("INSERT INTO grelout.handlers (topic, url) VALUES
	('basic', 'http://hookuser:hookpass\@127.0.0.1:$port/basic')");
sq("INSERT INTO grelout.handlers (topic, url, headers) VALUES
	('hdr', 'http://127.0.0.1:$port/hdr',
	 '{\"Authorization\": \"Bearer handler\", \"X-Dup\": \"handler\"}')");
ok(wait_until(sub { scalar(relay_pids($node)) == 1 }, 60), 'a relay runs');

# store(TOPIC, HEADERS_JSON): a message inserted around outbox_publish's checks
sub store
{
	my ($topic, $headers) = @_;
	return sq("INSERT INTO grelout.outbox (id, topic, payload, headers)
		VALUES (gen_random_uuid(), '$topic', '{}', '$headers') RETURNING id");
}

# sent(PATH, ID): the header lines of the request that carried the message
sub sent
{
	my ($path, $id) = @_;
	my $req;
	wait_until(sub {
		($req) = grep { ($_->{headers}{'webhook-id'} // '') eq $id } @{ $recv->requests($path) };
		defined $req;
	}, 30);
	return $req ? $req->{header_list} : undef;
}

# values_of(LIST, NAME): the values of every line with that name
sub values_of
{
	my ($list, $name) = @_;
	return join('|', map { $_->[1] } grep { $_->[0] eq $name } @{ $list // [] });
}

my $basic = 'Basic ' . encode_base64('hookuser:hookpass', '');

my $h = sent('/basic', store('basic', '{"Authorization": "Bearer attacker", "X-Trace": "t1"}'));
is(values_of($h, 'authorization'), $basic, 'URL userinfo: Basic kept, the message\'s Bearer not sent');
is(values_of($h, 'x-trace'), 't1', 'an ordinary message header is sent');

$h = sent('/basic', store('basic', '{"Authorization": ""}'));
is(values_of($h, 'authorization'), $basic, 'URL userinfo: an empty message Authorization removes nothing');

$h = sent('/basic', store('basic', '{"Accept": "", "Cookie": "a=b", "Proxy-Authorization": "Basic eA=="}'));
is(values_of($h, 'accept'), '*/*', 'an empty Accept does not remove libcurl\'s');
is(values_of($h, 'cookie') . values_of($h, 'proxy-authorization'), '',
	'Cookie and Proxy-Authorization are never taken from a message');

$h = sent('/hdr', store('hdr', '{"authorization": "Bearer attacker", "x-dup": "message", "X-Other": "ok"}'));
is(values_of($h, 'authorization'), 'Bearer handler', 'a handler Authorization is sent once, the message\'s not');
is(values_of($h, 'x-dup'), 'handler', 'a header the handler sets is not duplicated by the message');
is(values_of($h, 'x-other'), 'ok', 'the message\'s other headers are sent');

$node->stop;
$recv->stop;
done_testing();
