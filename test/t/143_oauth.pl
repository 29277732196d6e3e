# OAuth2 client credentials (issue 34), against a local token server that
# guards a webhook receiver (test/oauth_server.py): a webhook request must
# carry a Bearer token it issued, unexpired and unrevoked, else 401.
#
# - A handler with oauth gets a token with a form POST (grant_type
#   client_credentials, Basic client authentication, its scope and
#   audience) and reuses it for every request until shortly before it
#   expires.
# - Revoked tokens: the 401 drops the token, a new one is fetched and the
#   request sent again, without using an attempt.
# - Expiry: a token that expires is replaced before it is sent again (no
#   401).
# - Token server down (503) or refusing the client (401 invalid_client): a
#   transport failure of the handler, retried; delivered once it is back.
# - A slow token server holds back no other handler.
# - No token and no client secret reaches the server log or a table.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GreloutTest qw(:DEFAULT start_oauth_server);

my $auth = start_oauth_server(expires_in => 3600);
my $plain = start_receiver();
my $node = grelout_node('oauth',
	"log_statement = 'none'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '300ms'");

# handler(NAME, TOPIC, OAUTH_JSON, MAX_ATTEMPTS): a handler of the token
# server's receiver, its oauth bound as a psql variable
sub handler
{
	my ($name, $topic, $oauth, $max) = @_;
	my $f = PostgreSQL::Test::Utils::tempdir() . "/oauth.json";
	open(my $fh, '>', $f) or die;
	print $fh $oauth;
	close $fh;
	$node->safe_psql('app', "\\set oauth `cat $f`\n"
		  . "INSERT INTO grelout.handlers (name, topic, url, oauth, max_attempts)"
		  . " VALUES ('$name', '$topic', '" . $auth->url("/$name") . "', :'oauth', $max)");
}

# publish(TOPIC, N): N messages
sub publish
{
	my ($topic, $n) = @_;
	$node->safe_psql('app',
		"SELECT outbox_publish('$topic', jsonb_build_object('n', i)) FROM generate_series(1, $n) AS i");
}

# pending(TOPIC): messages of the topic not yet delivered (delivered ones
# are gone)
sub pending
{
	my ($topic) = @_;
	return $node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic = '$topic'");
}

# 1. a token, reused
handler('api', 'oa', $auth->oauth_json(scope => 'events:write read', audience => 'https://api.example/'), 10);
publish('oa', 30);
ok(wait_until(sub { pending('oa') eq '0' }, 60), '30 messages delivered to the endpoint that demands a token')
  or diag(explain($auth->oauth_stats));
is($auth->count('/api'), 30, '... the receiver accepted 30 requests');
my $tr = $auth->token_requests;
is(scalar(@$tr), 1, 'one token served them all');
is_deeply([map { $tr->[0]{$_} } qw(auth grant_type scope audience content_type client_id status)],
	['basic', 'client_credentials', 'events:write read', 'https://api.example/',
		'application/x-www-form-urlencoded', $auth->client_id, 200],
	'the token request: a form POST of client_credentials, Basic client authentication, the scope and audience');
is($auth->oauth_stats->{webhooks_unauthorized}, 0, 'no request was refused');

# 2. the token revoked: a 401, a new token, the request sent again
$auth->token_config(expires_in => 2);
ok($auth->revoke >= 1, 'the token server revokes its tokens');
publish('oa', 1);
ok(wait_until(sub { pending('oa') eq '0' }, 60), 'the message after the revocation is delivered');
my $unauth = $auth->unauthorized;
is(scalar(@$unauth), 1, '... after one 401');
is($unauth->[0]{reason}, 'revoked', '... for the revoked token');
is(scalar(@{ $auth->token_requests }), 2, '... and one new token');
is($node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic = 'oa'"), '0',
	'... delivered without a failure recorded');

# 3. expiry: the 2-second token is replaced before it is used again
sleep(3);
publish('oa', 1);
ok(wait_until(sub { pending('oa') eq '0' }, 60), 'the message after the token expired is delivered');
is(scalar(@{ $auth->token_requests }), 3, '... with a token fetched anew');
is(scalar(@{ $auth->unauthorized }), 1, '... before sending: no 401 for the expired token');

# 4. the token server answers 503: a transport failure, retried
$auth->token_config(expires_in => 3600, status => 503);
$auth->revoke;
publish('oa', 1);
my $err;
ok(wait_until(sub {
	$err = $node->safe_psql('app', "SELECT coalesce(max(last_error), '') FROM grelout.outbox WHERE topic = 'oa'");
	$err =~ /^OAuth token request failed: HTTP 503/ }, 60),
	'token server down: the delivery fails with the token request\'s error')
  or diag($err);
my $status = $node->safe_psql('app', "SELECT last_status IS NULL, state IN ('pending', 'processing') FROM grelout.outbox WHERE topic = 'oa'");
is($status, 't|t', '... without an HTTP status of the endpoint, and kept for a retry (pending, or already claimed again)');
$auth->token_config(status => undef, expires_in => 3600);
ok(wait_until(sub { pending('oa') eq '0' }, 60), 'delivered once the token server answers again');

# 5. a client the token server refuses: its error code in last_error
handler('wrong', 'ob', $auth->oauth_json(client_secret => 'not-the-secret'), 2);
publish('ob', 1);
ok(wait_until(sub {
	$err = $node->safe_psql('app', "SELECT state || ':' || attempts || ':' || last_error FROM grelout.outbox WHERE topic = 'ob'");
	$err =~ /^dead:/ }, 60), 'refused client credentials: dead after its attempts');
like($err, qr/^dead:2:OAuth token request failed: HTTP 401 \(invalid_client\)/,
	'... each attempt failed with the token server\'s 401 invalid_client');
is($auth->count('/wrong'), 0, '... and nothing reached its endpoint');

# 6. a slow token server holds back no other handler
$node->safe_psql('app', "INSERT INTO grelout.handlers (name, topic, url) VALUES ('plain', 'oc', '"
	  . $plain->url('/plain') . "')");
handler('slow', 'oc', $auth->oauth_json, 5);
$auth->token_config(delay => 4, expires_in => 3600);
$auth->revoke;
publish('oc', 5);
ok(wait_until(sub { $plain->count('/plain') >= 5 }, 60), 'the handler without oauth gets its 5 messages');
is($auth->count('/slow'), 0, '... while the other waits for its token');
ok(wait_until(sub { pending('oc') eq '0' }, 60), 'then the token comes and the waiting messages are delivered');
is($auth->count('/slow'), 5, '... all 5');

# 7. no token nor client secret in the log or a table
my @tokens = map { my $a = $_->{headers}{authorization} // ''; $a =~ s/^Bearer //; $a }
  @{ $auth->requests };
ok(scalar(@tokens) >= 5 && !grep({ $_ eq '' } @tokens), 'every request the receiver accepted carried a token');
my $log = slurp_file($node->logfile);
ok(!grep({ index($log, $_) >= 0 } @tokens), 'no token is in the server log');
ok(index($log, $auth->client_secret) < 0, 'nor the client secret');
my $dump = $node->safe_psql('app', "SELECT string_agg(coalesce(last_error, ''), ' ') FROM grelout.outbox")
  . $node->safe_psql('app', "SELECT string_agg(row_to_json(m)::text, ' ') FROM grelout.handlers_masked m");
ok(!grep({ index($dump, $_) >= 0 } @tokens, $auth->client_secret), 'nor a table an operator reads');

$node->stop;
$auth->stop;
$plain->stop;
done_testing();
