# A role granted EXECUTE on outbox_publish can publish and nothing more: it
# cannot read grelout.handlers (secrets) or grelout.handlers_masked, read or
# change any message, write handlers, call redrive or purge, make signing
# keys or read a handler's public key, change any relay setting (SET,
# set_config, ALTER SYSTEM, ALTER ROLE/DATABASE SET, reload), even once an
# administrator grants it USAGE on schema grelout; a role granted EXECUTE
# on grelout.handler_public_key gets public keys and still no secret;
# and objects it creates in its own schema cannot hijack grelout's
# functions, whose search_path is pinned (outbox_publish runs as the caller
# and raises its privileges for its insert only).
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('privileges');
my $secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
$node->safe_psql('app', qq{
	CREATE ROLE producer LOGIN;
	CREATE ROLE outsider LOGIN;
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text) TO producer;
	GRANT CREATE ON DATABASE app TO producer;
	INSERT INTO grelout.handlers (topic, url, secret, enabled)
		VALUES ('orders', '} . $recv->url('/orders') . qq{', '$secret', false);
	INSERT INTO grelout.handlers (topic, url, secret, enabled)
		VALUES ('signed', '} . $recv->url('/signed') . qq{', grelout.new_signing_key(), false);
});
my $other = $node->safe_psql('app',
	"SELECT outbox_publish('orders', '{\"owner\": \"admin\"}', dedup_key => 'admin-1')");

# as(ROLE, SQL): run SQL as ROLE; returns (exit code, stdout, stderr with SQLSTATE)
sub as
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('app', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role ]);
	return ($ret, $out, $err // '');
}

# denied(ROLE, SQL, NAME, [SQLSTATES]): SQL fails for ROLE with one of the SQLSTATEs
sub denied
{
	my ($role, $sql, $name, $states) = @_;
	$states //= ['42501'];
	my ($ret, $out, $err) = as($role, $sql);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	ok($ret != 0 && defined $state && grep({ $_ eq $state } @$states),
		"$name: refused (" . ($state // 'no error') . ')')
	  or diag("stdout: $out\nstderr: $err");
	return $err;
}

# 1. publishing works
my ($ret, $id, $err) = as('producer', "SELECT outbox_publish('orders', '{\"owner\": \"producer\"}')");
is($ret, 0, 'producer can publish');
like($id, qr/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/, '... and gets a UUIDv7 back');
is($node->safe_psql('app', "SELECT payload->>'owner' FROM grelout.outbox WHERE id = '$id'"), 'producer',
	'... the message is stored');
denied('outsider', "SELECT outbox_publish('orders', '{}')", 'a role without the grant publishing');

# 2. everything else is closed, with and without USAGE on schema grelout
my @reads = (
	[ 'SELECT * FROM grelout.handlers', 'reading grelout.handlers' ],
	[ 'SELECT secret FROM grelout.handlers', 'reading handler secrets' ],
	[ 'SELECT * FROM grelout.handlers_masked', 'reading grelout.handlers_masked' ],
	[ 'SELECT * FROM grelout.outbox', 'reading grelout.outbox' ],
	[ 'SELECT * FROM grelout.status', 'reading grelout.status' ],
	[ 'SELECT * FROM grelout.relays', 'reading grelout.relays' ],
	[ 'SELECT * FROM grelout.relay_stats()', 'calling grelout.relay_stats()' ],
	[ "UPDATE grelout.outbox SET state = 'dead'", 'changing message states' ],
	[ "UPDATE grelout.outbox SET payload = '{}' WHERE id = '$other'", "changing another's message" ],
	[ 'DELETE FROM grelout.outbox', 'deleting messages' ],
	[ 'TRUNCATE grelout.outbox', 'truncating the outbox' ],
	[ "INSERT INTO grelout.outbox (id, topic, payload) VALUES (gen_random_uuid(), 'orders', '{}')",
		'inserting around outbox_publish' ],
	[ "BEGIN;\nLOCK TABLE grelout.outbox;\nCOMMIT;", 'locking the outbox' ],
	[ "INSERT INTO grelout.handlers (topic, url) VALUES ('x', 'http://127.0.0.1:1/')", 'adding a handler' ],
	[ "UPDATE grelout.handlers SET url = 'http://127.0.0.1:1/steal'", 'redirecting a handler' ],
	[ 'COPY grelout.handlers TO STDOUT', 'copying the handlers out' ],
	[ 'ALTER TABLE grelout.handlers DISABLE TRIGGER handlers_validate', 'disabling the validation trigger' ],
	[ 'CREATE TABLE grelout.mine (x int)', 'creating objects in schema grelout' ],
	[ 'SELECT outbox_redrive()', 'calling outbox_redrive' ],
	[ 'SELECT outbox_purge()', 'calling outbox_purge' ],
	[ 'SELECT grelout.new_signing_key()', 'making a signing key' ],
	[ "SELECT grelout.handler_public_key('signed')", "reading a handler's public key" ],
	[ "SELECT grelout.set_secret('signed', grelout.new_signing_key())", 'setting a signing key' ],
);
for my $phase ('no schema usage', 'USAGE on schema grelout granted')
{
	$node->safe_psql('app', 'GRANT USAGE ON SCHEMA grelout TO producer')
	  if $phase =~ /granted/;
	denied('producer', $_->[0], "$phase: $_->[1]") for @reads;
}

# 3. settings: none can be changed from a session of the producer
denied('producer', "SET grelout.max_payload_size = '256MB'", 'SET grelout.max_payload_size');
denied('producer', "SET grelout.block_private_networks = off", 'SET grelout.block_private_networks',
	[ '42501', '55P02' ]);
denied('producer', "SET grelout.allowed_networks = '0.0.0.0/0'", 'SET grelout.allowed_networks',
	[ '42501', '55P02' ]);
denied('producer', "SELECT set_config('grelout.ca_file', '/tmp/evil.pem', false)", 'set_config(grelout.ca_file)',
	[ '42501', '55P02' ]);
denied('producer', "ALTER SYSTEM SET grelout.block_private_networks = off", 'ALTER SYSTEM');
denied('producer', "ALTER SYSTEM SET grelout.ca_file = '/tmp/evil.pem'", 'ALTER SYSTEM grelout.ca_file');
denied('producer', "ALTER ROLE producer SET grelout.max_payload_size = '256MB'", 'ALTER ROLE producer SET');
denied('producer', "ALTER DATABASE app SET grelout.block_private_networks = off", 'ALTER DATABASE SET');
denied('producer', 'SELECT pg_reload_conf()', 'pg_reload_conf()');
denied('producer', 'SHOW grelout.ca_file', 'SHOW grelout.ca_file (superuser only)');
is($node->safe_psql('app', "SELECT count(*) FROM pg_db_role_setting"), '0', 'no role or database setting was stored');
unlike(slurp_file($node->data_dir . '/postgresql.auto.conf'), qr/grelout/, 'postgresql.auto.conf is untouched');
my $big = '{"x": "' . ('a' x (1024 * 1024 + 10)) . '"}';
denied('producer', "SELECT outbox_publish('orders', '$big')",
	'a payload over grelout.max_payload_size, which the producer could not raise', ['54000']);

# 4. publishing cannot reach other messages: dedup_key is per publishing
# role, so another role's key stores the producer's own message and reveals
# nothing of the other one
my ($r2, $id2) = as('producer', "SELECT outbox_publish('orders', '{\"owner\": \"producer\", \"evil\": true}', dedup_key => 'admin-1')");
like($id2, qr/^[0-9a-f-]{36}$/, 'a dedup_key another role stored publishes');
isnt($id2, $other, '... a message of its own, not the stored id');
is($node->safe_psql('app', "SELECT payload::text FROM grelout.outbox WHERE id = '$other'"), '{"owner": "admin"}',
	"... and leaves the other message's payload alone");
is($node->safe_psql('app', "SELECT published_by::regrole FROM grelout.outbox WHERE id = '$id2'"), 'producer',
	'... recorded as the producer\'s');
my ($r3, $id2b) = as('producer', "SELECT outbox_publish('orders', '{}', dedup_key => 'admin-1')");
is($id2b, $id2, '... and the producer\'s own key deduplicates');
is($node->safe_psql('app', "SELECT count(*) FROM grelout.outbox"), '3', '... storing one message for each role');

# 4b. handler_public_key, granted to a role that may not read the handlers,
# gives the public key and nothing more (SECURITY DEFINER); new_signing_key,
# granted, runs as its caller
$node->safe_psql('app', q{
	CREATE ROLE keyreader LOGIN;
	GRANT USAGE ON SCHEMA grelout TO keyreader;
	GRANT EXECUTE ON FUNCTION grelout.handler_public_key(text), grelout.new_signing_key() TO keyreader;
});
my $pub_admin = $node->safe_psql('app', "SELECT grelout.handler_public_key('signed')");
like($pub_admin, qr{^whpk_[A-Za-z0-9+/]{43}=$}, 'an administrator reads the whpk_ public key');
($ret, my $pub_reader, $err) = as('keyreader', "SELECT grelout.handler_public_key('signed')");
is($ret, 0, 'a role granted EXECUTE on handler_public_key calls it') or diag($err);
is($pub_reader, $pub_admin, '... and gets the same public key');
($ret, my $none, $err) = as('keyreader', "SELECT grelout.handler_public_key('orders') IS NULL");
is($none, 't', '... NULL for a handler whose secret is a whsec_ one');
denied('keyreader', 'SELECT secret FROM grelout.handlers', '... while reading handler secrets');
denied('keyreader', 'SELECT * FROM grelout.handlers_masked', '... and grelout.handlers_masked');
denied('keyreader', "UPDATE grelout.handlers SET secret = grelout.new_signing_key()", '... and changing a secret');
($ret, my $key, $err) = as('keyreader', 'SELECT grelout.new_signing_key()');
like($key, qr{^whsk_[A-Za-z0-9+/]{43}=$}, 'new_signing_key, granted, makes a key for its caller');
unlike(slurp_file($node->logfile), qr/\Q$key\E/, '... which is not in the server log');

# 5. the SECURITY DEFINER functions pin search_path
is($node->safe_psql('app', q{
	SELECT count(*) FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'grelout'
	WHERE p.prosecdef AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)}), '0',
	'every SECURITY DEFINER function of the extension pins search_path = pg_catalog, pg_temp');
cmp_ok($node->safe_psql('app', q{
	SELECT count(*) FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'grelout'
	WHERE p.prosecdef}), '>=', 2, '... there are at least two of them (outbox_redrive, outbox_purge)');
is($node->safe_psql('app', q{
	SELECT string_agg(p.proname || ' ' || p.prosecdef || ' ' || array_to_string(p.proconfig, ','), '; ' ORDER BY p.proname)
	FROM pg_proc p WHERE p.proname IN ('outbox_publish', 'outbox_message_status')}),
	'outbox_message_status false search_path=pg_catalog, pg_temp; outbox_publish false search_path=pg_catalog, pg_temp',
	'outbox_publish and outbox_message_status run as the caller, with search_path pinned too');

# objects of the producer's own, earlier on its search_path than pg_catalog
($ret, undef, $err) = as('producer', q{
	CREATE SCHEMA evil;
	CREATE FUNCTION evil.hijack() RETURNS boolean LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'hijacked by producer'; END$$;
	CREATE FUNCTION evil.eq(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT evil.hijack()';
	CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.eq);
	CREATE FUNCTION evil.eq(jsonb, jsonb) RETURNS boolean LANGUAGE sql AS 'SELECT evil.hijack()';
	CREATE OPERATOR evil.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = evil.eq);
	CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT CASE WHEN evil.hijack() THEN pg_catalog.now() END';
	CREATE FUNCTION evil.length(text) RETURNS int LANGUAGE sql AS 'SELECT CASE WHEN evil.hijack() THEN 0 END';
	CREATE FUNCTION evil.octet_length(text) RETURNS int LANGUAGE sql AS 'SELECT CASE WHEN evil.hijack() THEN 0 END';
	CREATE FUNCTION evil.jsonb_typeof(jsonb) RETURNS text LANGUAGE sql AS 'SELECT CASE WHEN evil.hijack() THEN ''x'' END';
	CREATE FUNCTION evil.gen_random_uuid() RETURNS uuid LANGUAGE sql AS 'SELECT CASE WHEN evil.hijack() THEN NULL::uuid END';
});
is($ret, 0, 'the producer made a schema of look-alike functions and operators') or diag($err);
($ret, my $id3, $err) = as('producer', q{
	SET search_path = evil, pg_catalog, public;
	SELECT outbox_publish('orders', '{"hijack": "attempt"}', key => 'k', headers => '{"x-a": "b"}',
		delay => '1 second', dedup_key => 'producer-2');
	SELECT outbox_publish('orders', '{"hijack": "again"}', dedup_key => 'producer-2');
});
is($ret, 0, 'outbox_publish ignores the caller\'s search_path') or diag($err);
unlike($err, qr/hijacked/, '... none of the look-alikes ran');
is($node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE dedup_key = 'producer-2' AND created_at > now() - interval '1 hour'"),
	'1', '... the message is stored once, with a real created_at');

$node->stop;
done_testing();
