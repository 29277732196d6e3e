# Without shared_preload_libraries, CREATE EXTENSION grelout fails with a
# clear error, a hint and SQLSTATE 55000, and leaves nothing behind (also
# after a session LOAD); once the library is preloaded and the server
# restarted, the same statement works and the relay processes run.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');

my ($rc, $out, $err) = $node->psql('app', "\\set VERBOSITY verbose\nCREATE EXTENSION grelout;");
isnt($rc, 0, 'CREATE EXTENSION grelout fails without shared_preload_libraries');
like($err, qr/ERROR:  55000: grelout must be loaded via "shared_preload_libraries"/,
	'the error names shared_preload_libraries, with SQLSTATE 55000');
like($err, qr/HINT:  Add grelout to shared_preload_libraries in postgresql\.conf and restart the server\./,
	'the hint says what to do');
unlike($err, qr/XX000|P0001/, 'no internal or bare raise SQLSTATE');
is($node->safe_psql('app', q{SELECT count(*) FROM pg_extension WHERE extname = 'grelout'}), '0',
	'the extension is not created');
is($node->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'grelout'}), '0',
	'no schema grelout is left behind');
is($node->safe_psql('app', q{SELECT count(*) FROM pg_proc WHERE proname LIKE 'outbox\_%'}), '0',
	'no function is left behind');

# loading the library into one session is not enough
($rc, $out, $err) = $node->psql('app', "\\set VERBOSITY verbose\nLOAD 'grelout';\nCREATE EXTENSION grelout;");
isnt($rc, 0, 'CREATE EXTENSION still fails after LOAD in the session');
like($err, qr/55000: grelout must be loaded via "shared_preload_libraries"/, 'with the same error');

# a plain ERROR: the session goes on (no FATAL, no lost connection)
($rc, $out, $err) = $node->psql('app', "CREATE EXTENSION grelout;\nSELECT 'still here';",
	on_error_stop => 0);
is($out, 'still here', 'the session survives the failed CREATE EXTENSION');
unlike($err, qr/FATAL|server closed the connection/, 'no FATAL error');

# SQLSTATE as the client sees it
($rc, $out, $err) = $node->psql('app', q{DO $$
BEGIN
	CREATE EXTENSION grelout;
EXCEPTION WHEN object_not_in_prerequisite_state THEN
	RAISE NOTICE 'sqlstate %', SQLSTATE;
END $$;});
is($rc, 0, 'the error is catchable as object_not_in_prerequisite_state');
like($err, qr/NOTICE:  sqlstate 55000/, 'SQLSTATE 55000');

# with the library preloaded, it works
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'grelout'\ngrelout.database = 'app'\n");
$node->restart;
$node->safe_psql('app', 'CREATE EXTENSION grelout');
is($node->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.2',
	'CREATE EXTENSION works once grelout is preloaded');
ok($node->safe_psql('app', q{SELECT outbox_publish('preload', '{}') IS NOT NULL}) eq 't',
	'publishing works');
ok(wait_until(sub {
	$node->safe_psql('app', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'grelout relay'}) >= 1
}, 60), 'a relay process runs');
cmp_ok($node->safe_psql('app', q{SELECT count(*) FROM pg_settings WHERE name LIKE 'grelout.%'}), '>=', 19,
	'the grelout settings are defined');

$node->stop;
done_testing();
