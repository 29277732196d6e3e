# Standard Webhooks signatures end to end: requests that the relay really
# sent, recorded by the receiver, are verified by the official
# "standardwebhooks" npm package (test/webhooks/verify.js), including
# retried requests, UTF-8 and escaped payloads, key rotation (two
# signatures, each verifying with its own secret) and its end.
use strict;
use warnings;
use File::Basename qw(dirname);
use IPC::Run qw(run);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT new_secret);

my $src = $ENV{GRELOUT_SRC} // dirname(__FILE__) . '/../..';
my $webhooks = "$src/test/webhooks";

# npm_ready: install the verifier's dependencies (npm ci) unless present.
sub npm_ready
{
	return 1 if -f "$webhooks/node_modules/standardwebhooks/package.json";
	my $cache = PostgreSQL::Test::Utils::tempdir();
	my ($out, $err);
	local $ENV{npm_config_cache} = $cache;
	local $ENV{npm_config_update_notifier} = 'false';
	my $ok = run [ 'npm', 'ci', '--no-audit', '--no-fund' ], '<', \undef, '>', \$out, '2>', \$err,
	  init => sub { chdir $webhooks or die "chdir $webhooks: $!" };
	diag("npm ci failed:\n$out$err") unless $ok;
	return $ok;
}

# verify(REQUESTS, SECRET, [PREVIOUS]): run verify.js; returns (exit code, output).
sub verify
{
	my ($requests, @secrets) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir() . '/requests.json';
	open(my $fh, '>:raw', $file) or die;
	print $fh JSON::PP->new->utf8->encode($requests);
	close $fh;
	my ($out, $err) = ('', '');
	run [ 'node', "$webhooks/verify.js", $file, @secrets ], '<', \undef, '>', \$out, '2>', \$err;
	return ($? >> 8, $out . $err);
}

ok(npm_ready(), 'npm ci installed the official standardwebhooks package')
  or BAIL_OUT('cannot verify without the standardwebhooks package');

my $recv = start_receiver();
my $node = grelout_node('signatures',
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '500ms'",
	"grelout.retry_jitter = 0");

my $key_a = new_secret(32);
my $key_b = new_secret(64);
my $key_c = new_secret(24);
my $signed = $recv->url('/signed');
my $rotating = $recv->url('/rotating');
my $plain = $recv->url('/plain');
$node->safe_psql('app', qq{
	INSERT INTO grelout.handlers (topic, url, secret) VALUES ('signed', '$signed', '$key_a');
	INSERT INTO grelout.handlers (topic, url, secret, previous_secret)
		VALUES ('rotating', '$rotating', '$key_b', '$key_c');
	INSERT INTO grelout.handlers (topic, url) VALUES ('plain', '$plain');
});

# the first request fails, so one message is delivered on a retry, with a
# fresh timestamp and signature
$recv->script('/signed', [ { status => 500, body => 'try again' } ], { status => 204 });

my @payloads = (
	q({"n": 1}),
	q({"n": 2, "name": "Zoë ✓ 😀", "jp": "日本語"}),
	q({"n": 3, "s": "line\nbreak \"quoted\" \\\\ back\tslash \u0001"}),
	q({"n": 4, "f": 1.50, "e": 1e3, "neg": -0.0, "big": 123456789012345678901234567890}),
	q({"n": 5, "blob": ") . ('x' x 100_000) . q("}),
	q({"n": 6, "nested": {"a": [1, 2, {"b": null}], "t": true}}),
);
for my $p (@payloads)
{
	(my $q = $p) =~ s/'/''/g;
	$node->safe_psql('app', "SELECT outbox_publish('signed', '$q'::jsonb, key => 'k', "
		  . "headers => '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}')");
}
ok(wait_until(sub { $recv->count('/signed') >= 7 }, 60), 'six messages and one retry received');
ok(wait_until(sub { $node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic = 'signed'") eq '0' }, 30),
	'all six delivered');

my $reqs = $recv->requests('/signed');
is(scalar @$reqs, 7, 'seven requests: no duplicate beyond the retry');
my %ids;
$ids{ $_->{headers}{'webhook-id'} }++ for @$reqs;
is(scalar(keys %ids), 6, 'six distinct webhook-ids');
is(scalar(grep { $_ == 2 } values %ids), 1, 'the retried message kept its webhook-id');

# the bodies are the payloads' JSON text as PostgreSQL prints jsonb
my %want;
for my $p (@payloads)
{
	(my $q = $p) =~ s/'/''/g;
	my $text = $node->safe_psql('app', "SELECT '$q'::jsonb::text");
	utf8::decode($text);
	my $n = decode_json(do { my $t = $text; utf8::encode($t); $t })->{n};
	$want{$n} = $text;
}
my $bodies_ok = 1;
for my $r (@$reqs)
{
	my $n = decode_json(do { my $t = $r->{body}; utf8::encode($t); $t })->{n};
	$bodies_ok = 0 unless defined $n && $r->{body} eq $want{$n};
}
ok($bodies_ok, 'every body is exactly the payload text');
ok((grep { ($_->{headers}{'content-type'} // '') eq 'application/json' } @$reqs) == 7,
	'content-type is application/json');
my $now = time();
ok((grep { abs($_->{headers}{'webhook-timestamp'} - $now) < 600 } @$reqs) == 7,
	'webhook-timestamp is the Unix time of the attempt');

my ($rc, $out) = verify($reqs, $key_a);
is($rc, 0, 'standardwebhooks verifies all seven requests with the secret')
  or diag($out);
like($out, qr/# 7 requests, \d+ checks, 0 failed/, 'the verifier checked all seven');

($rc, $out) = verify($reqs, $key_b);
isnt($rc, 0, 'the verifier refuses the same requests with another secret');
my @mangled = map { +{ %$_, body => $_->{body} . ' ' } } @$reqs;
($rc, $out) = verify(\@mangled, $key_a);
isnt($rc, 0, 'the verifier refuses the requests with their bodies changed');

# key rotation: two signatures, current first, each verifying with its own secret
$node->safe_psql('app', "SELECT outbox_publish('rotating', '{\"r\": $_}')") for 1 .. 3;
ok(wait_until(sub { $recv->count('/rotating') >= 3 }, 30), 'rotation messages received');
my $rot = $recv->requests('/rotating');
ok((grep { my @s = split(/ /, $_->{headers}{'webhook-signature'}); @s == 2 } @$rot) == 3,
	'webhook-signature holds two space-separated signatures during a rotation');
($rc, $out) = verify($rot, $key_b, $key_c);
is($rc, 0, 'each rotation signature verifies with its own secret') or diag($out);
($rc, $out) = verify($rot, $key_c, $key_b);
isnt($rc, 0, 'the first signature is the current secret\'s, not the previous one\'s');

# the rotation ends: one signature again, without a restart
$node->safe_psql('app', "UPDATE grelout.handlers SET previous_secret = NULL WHERE topic = 'rotating'");
$recv->reset;
$node->safe_psql('app', "SELECT outbox_publish('rotating', '{\"r\": 4}')");
ok(wait_until(sub { $recv->count('/rotating') >= 1 }, 30), 'message after the rotation received');
$rot = $recv->requests('/rotating');
($rc, $out) = verify($rot, $key_b);
is($rc, 0, 'after the rotation: one signature, verified with the current secret') or diag($out);
($rc, $out) = verify($rot, $key_c);
isnt($rc, 0, 'after the rotation: the previous secret no longer verifies');

# a new secret takes effect at once
my $key_d = new_secret(48);
$node->safe_psql('app', "UPDATE grelout.handlers SET secret = '$key_d' WHERE topic = 'rotating'");
$node->safe_psql('app', "SELECT outbox_publish('rotating', '{\"r\": 5}')");
ok(wait_until(sub { $recv->count('/rotating') >= 2 }, 30), 'message after the key change received');
$rot = [ $recv->requests('/rotating')->[1] ];
($rc, $out) = verify($rot, $key_d);
is($rc, 0, 'a changed secret signs the next request') or diag($out);

# no secret, no signature, but the id and timestamp are there
$node->safe_psql('app', "SELECT outbox_publish('plain', '{\"p\": 1}')");
ok(wait_until(sub { $recv->count('/plain') >= 1 }, 30), 'unsigned message received');
my $p = $recv->requests('/plain')->[0];
ok(!exists $p->{headers}{'webhook-signature'}, 'no webhook-signature without a secret');
ok($p->{headers}{'webhook-id'} && $p->{headers}{'webhook-timestamp'} =~ /^\d+$/,
	'webhook-id and webhook-timestamp are sent without a secret too');

$node->stop;
done_testing();
