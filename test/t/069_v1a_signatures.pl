# Asymmetric Standard Webhooks signatures ("v1a", ed25519) end to end:
# requests that the relay really sent, recorded by the receiver, are
# verified by test/webhooks/verify_v1a.js, an implementation independent of
# grelout: Node's crypto.verify with the specification's algorithm (ed25519
# over "id.timestamp.body", the key from the whpk_ public key that
# grelout.handler_public_key gives).  Keys made by grelout.new_signing_key
# (the 32-byte seed form) and given in the 64-byte seed || public form;
# retried requests, UTF-8 and escaped payloads; a rotation from one signing
# key to another (two v1a signatures, each verifying with its own public
# key), rotations between a whsec_ secret and a whsk_ key in both
# directions (v1 and v1a together; the official "standardwebhooks" library
# verifies the v1 one in the mixed header), the end of a rotation, and a
# handler switched from HMAC to ed25519 without a restart.
#
# The official library (standardwebhooks 1.1.1, test/webhooks/package.json)
# does not support v1a: it verifies "v1" signatures only and skips the
# others, and its Webhook takes no public key.  verify_v1a.js tries it on
# every v1a signature anyway, and says so when it cannot verify them.
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

# verify(REQUESTS, KEY, [PREVIOUS]): run verify_v1a.js; returns (exit code, output).
sub verify
{
	my ($requests, @keys) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir() . '/requests.json';
	open(my $fh, '>:raw', $file) or die;
	print $fh JSON::PP->new->utf8->encode($requests);
	close $fh;
	my ($out, $err) = ('', '');
	run [ 'node', "$webhooks/verify_v1a.js", $file, @keys ], '<', \undef, '>', \$out, '2>', \$err;
	return ($? >> 8, $out . $err);
}

ok(npm_ready(), 'npm ci installed the verifier\'s dependencies')
  or BAIL_OUT('cannot verify without the standardwebhooks package');

my $recv = start_receiver();
my $node = grelout_node('v1a',
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '500ms'",
	"grelout.retry_jitter = 0");

# sql(SQL): one value from the database
sub sql { return $node->safe_psql('app', $_[0]); }

# publish(TOPIC, PAYLOAD_JSON)
sub publish
{
	my ($topic, $payload) = @_;
	(my $q = $payload) =~ s/'/''/g;
	sql("SELECT outbox_publish('$topic', '$q'::jsonb)");
}

# received(PATH, N): wait for N requests to PATH; returns them
sub received
{
	my ($path, $n) = @_;
	ok(wait_until(sub { $recv->count($path) >= $n }, 60), "$n request(s) to $path received");
	return $recv->requests($path);
}

my $hmac = new_secret(32);
for my $t ('ed', 'ed64', 'rot', 'mix_ed_hmac', 'mix_hmac_ed', 'switch')
{
	my $url = $recv->url("/$t");
	sql("INSERT INTO grelout.handlers (topic, url, secret) VALUES ('$t', '$url', grelout.new_signing_key())");
}
sql("UPDATE grelout.handlers SET secret = '$hmac' WHERE name = 'switch'");

# the keys the receivers are given
my %pub = map { $_ => sql("SELECT grelout.handler_public_key('$_')") }
  qw(ed ed64 rot mix_ed_hmac mix_hmac_ed);
like($pub{$_}, qr{^whpk_[A-Za-z0-9+/]{43}=$}, "handler $_ has a whpk_ public key") for sort keys %pub;
is(sql("SELECT count(DISTINCT grelout.handler_public_key(name)) FROM grelout.handlers WHERE name <> 'switch'"),
	'5', 'each handler has a key of its own');
is(sql("SELECT grelout.handler_public_key('switch') IS NULL"), 't', 'a whsec_ handler has no public key');

# ed64: the same key in the 64-byte form, seed || public key
sql(q{UPDATE grelout.handlers SET secret = 'whsk_' || replace(encode(
	decode(substr(secret, 6), 'base64') || decode(substr(grelout.handler_public_key(name), 6), 'base64'),
	'base64'), E'\n', '') WHERE name = 'ed64'});
is(length(sql("SELECT secret FROM grelout.handlers WHERE name = 'ed64'")), 5 + 88,
	'ed64 holds the 64-byte form');
is(sql("SELECT grelout.handler_public_key('ed64')"), $pub{ed64}, '... with the same public key');

# 1. one signing key: retries, UTF-8, escapes, a big body
$recv->script('/ed', [ { status => 500, body => 'try again' } ], { status => 204 });
my @payloads = (
	q({"n": 1}),
	q({"n": 2, "name": "Zoë ✓ 😀", "jp": "日本語"}),
	q({"n": 3, "s": "line\nbreak \"quoted\" \\\\ back\tslash \u0001"}),
	q({"n": 4, "blob": ") . ('x' x 100_000) . q("}),
);
publish('ed', $_) for @payloads;
publish('ed64', $_) for @payloads[ 0, 1 ];
my $reqs = received('/ed', 5);
ok(wait_until(sub { sql("SELECT count(*) FROM grelout.outbox WHERE topic IN ('ed', 'ed64')") eq '0' }, 30),
	'all delivered');
is(scalar(grep { ($_->{headers}{'webhook-signature'} // '') =~ m{^v1a,[A-Za-z0-9+/]{86}==$} } @$reqs), 5,
	'each request carries one v1a signature');
my ($rc, $out) = verify($reqs, $pub{ed});
is($rc, 0, 'node:crypto verifies all five requests (one a retry) with the public key') or diag($out);
like($out, qr/# 5 requests, \d+ checks, 0 failed/, 'the verifier checked all five');
like($out, qr/standardwebhooks does not verify v1a|standardwebhooks refuses/,
	'the verifier says whether the official library verified v1a');
($rc, $out) = verify($reqs, $pub{ed64});
isnt($rc, 0, 'another handler\'s public key does not verify them');
my @mangled = map { +{ %$_, body => $_->{body} . ' ' } } @$reqs;
($rc, $out) = verify(\@mangled, $pub{ed});
isnt($rc, 0, 'changed bodies do not verify');

($rc, $out) = verify(received('/ed64', 2), $pub{ed64});
is($rc, 0, 'the 64-byte key form signs as its seed does') or diag($out);

# 2. a rotation from one signing key to another: both v1a signatures
my $rot_old = $pub{rot};
sql("UPDATE grelout.handlers SET previous_secret = secret, secret = grelout.new_signing_key() WHERE name = 'rot'");
my $rot_new = sql("SELECT grelout.handler_public_key('rot')");
isnt($rot_new, $rot_old, 'the rotation gives the handler a new public key');
publish('rot', qq({"r": $_})) for 1 .. 3;
my $rot = received('/rot', 3);
is(scalar(grep { my @s = split(/ /, $_->{headers}{'webhook-signature'}); @s == 2 && !grep { !/^v1a,/ } @s } @$rot), 3,
	'during the rotation webhook-signature holds two space-separated v1a signatures');
($rc, $out) = verify($rot, $rot_new, $rot_old);
is($rc, 0, 'each rotation signature verifies with its own public key, the new one first') or diag($out);
($rc, $out) = verify($rot, $rot_old, $rot_new);
isnt($rc, 0, 'the first signature is not the previous key\'s');

# the rotation ends: one signature again, without a restart
sql("UPDATE grelout.handlers SET previous_secret = NULL WHERE name = 'rot'");
$recv->reset;
publish('rot', '{"r": 4}');
$rot = received('/rot', 1);
($rc, $out) = verify($rot, $rot_new);
is($rc, 0, 'after the rotation: one signature, verified with the new public key') or diag($out);
($rc, $out) = verify($rot, $rot_old);
isnt($rc, 0, 'after the rotation: the previous public key no longer verifies');

# 3. rotations between the kinds: a signing key with an HMAC secret as the
# previous one, and the other way round
sql("UPDATE grelout.handlers SET previous_secret = '$hmac' WHERE name = 'mix_ed_hmac'");
sql("UPDATE grelout.handlers SET previous_secret = secret, secret = '$hmac' WHERE name = 'mix_hmac_ed'");
is(sql("SELECT grelout.handler_public_key('mix_hmac_ed') IS NULL"), 't',
	'handler_public_key follows the current secret (a whsec_ one now)');
publish('mix_ed_hmac', qq({"m": $_})) for 1 .. 2;
publish('mix_hmac_ed', qq({"m": $_})) for 1 .. 2;
my $mix = received('/mix_ed_hmac', 2);
ok((grep { ($_->{headers}{'webhook-signature'} // '') =~ /^v1a,\S+ v1,\S+$/ } @$mix) == 2,
	'whsk_ current, whsec_ previous: "v1a,... v1,..."');
($rc, $out) = verify($mix, $pub{mix_ed_hmac}, $hmac);
is($rc, 0, 'the v1a signature verifies with the public key, the v1 one with the secret (and standardwebhooks)')
  or diag($out);
$mix = received('/mix_hmac_ed', 2);
ok((grep { ($_->{headers}{'webhook-signature'} // '') =~ /^v1,\S+ v1a,\S+$/ } @$mix) == 2,
	'whsec_ current, whsk_ previous: "v1,... v1a,..."');
($rc, $out) = verify($mix, $hmac, $pub{mix_hmac_ed});
is($rc, 0, 'the v1 signature verifies with the secret, the v1a one with the public key') or diag($out);

# 4. a handler switched from HMAC to a signing key: the next request is v1a
publish('switch', '{"s": 1}');
my $sw = received('/switch', 1);
like($sw->[0]{headers}{'webhook-signature'}, qr/^v1,/, 'a whsec_ handler signs v1');
sql("SELECT grelout.set_secret('switch', grelout.new_signing_key())");
my $sw_pub = sql("SELECT grelout.handler_public_key('switch')");
publish('switch', '{"s": 2}');
$sw = received('/switch', 2);
($rc, $out) = verify([ $sw->[1] ], $sw_pub);
is($rc, 0, 'after set_secret with a signing key the next request is v1a and verifies') or diag($out);

# 5. the keys are nowhere but in grelout.handlers
my $log = slurp_file($node->logfile);
my @seeds = split /\n/, sql("SELECT substr(coalesce(secret, ''), 6) FROM grelout.handlers WHERE secret LIKE 'whsk_%'
	UNION ALL SELECT substr(previous_secret, 6) FROM grelout.handlers WHERE previous_secret LIKE 'whsk_%'");
cmp_ok(scalar(@seeds), '>=', 6, 'control: the signing keys are stored');
is(scalar(grep { index($log, $_) >= 0 } @seeds), 0, 'no signing key appears in the server log');
is(sql("SELECT count(*) FROM grelout.handlers_masked AS m WHERE m::text LIKE '%whsk_%'"), '0',
	'handlers_masked shows no signing key');

$node->stop;
done_testing();
