# The receiving side of the upgrade tests across versions (test/run's
# "versions" suite), run in the root of PostgreSQL N (17, 18, 19): a new
# cluster that preloads grelout (built for N) restores the pg_dumpall of a
# grelout 1.1 database that source.pl made on 15, with a receiver on the
# port its handlers name.  The restore installs grelout 1.2 (pg_dump writes
# CREATE EXTENSION without a version) and loads the 1.1 rows into it; then
# GreloutVersions checks that the backlog is whole and delivered, the
# ordered key in order, and the handlers still work.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;
use GreloutVersions;

my $in = $ENV{GRELOUT_VERSIONS_DIR} or die "GRELOUT_VERSIONS_DIR is not set";
my $b = read_backlog("$in/backlog.json");
my $recv = start_receiver(port => $b->{port});

my $node = PostgreSQL::Test::Cluster->new('restored');
$node->init;
$node->append_conf('postgresql.conf', join("\n",
	"shared_preload_libraries = 'grelout'",
	"grelout.database = 'app'",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_jitter = 0",
	"grelout.keep_delivered = on") . "\n");
$node->start;
my $version = $node->safe_psql('postgres', q{SELECT current_setting('server_version_num')::int / 10000});

# psql -f of a pg_dumpall script: its one expected error is the
# CREATE ROLE of the bootstrap superuser, which initdb made
my ($stdout, $stderr);
my $ok = IPC::Run::run([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', "$in/dumpall.sql" ],
	'>', \$stdout, '2>', \$stderr);
my @errors = grep { /ERROR/ } split /\n/, $stderr;
is(scalar(@errors), 1, "$version: the restore raised one error") or diag($stderr);
like($errors[0] // '', qr/role "\w+" already exists/, "$version: ... the bootstrap superuser's CREATE ROLE");

is($node->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.2',
	"$version: the restore installs grelout 1.2 (the dump names no version)");
isnt($node->safe_psql('app', q{SELECT oid FROM pg_roles WHERE rolname = 'app_pub'}), $b->{publisher_oid},
	"$version: the publishing role has another oid than on 15 (what the checks of its messages rely on)");
is($node->safe_psql('app', q{SELECT count(*) FROM grelout.outbox WHERE published_by IS NOT NULL
	AND published_by NOT IN (SELECT oid FROM pg_roles)}), '0',
	"$version: every restored message names a role of this cluster as its publisher");
check_delivers($node, $recv, $b, "restored into $version");
$node->stop;
done_testing();
