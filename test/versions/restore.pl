# The receiving side of the upgrade tests across versions (test/run's
# "versions" suite), run in the root of PostgreSQL N (17, 18, 19): for each
# of the two dumps source.pl made on 15 (the 1.1 database as it was, and the
# same updated to 1.2), a new cluster that preloads grelout (built for N)
# restores the pg_dumpall with psql, a receiver listening on the port its
# handlers name.  The restore installs grelout 1.2 (pg_dump writes CREATE
# EXTENSION without a version) and loads the rows into it; GreloutVersions
# then checks that the backlog is whole and delivered, the ordered key in
# order, and the handlers still work; after the 1.2 dump, that the
# publisher's messages are still its own (its role has another oid here).
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;
use GreloutVersions;

my $in = $ENV{GRELOUT_VERSIONS_DIR} or die "GRELOUT_VERSIONS_DIR is not set";
my $b = read_backlog("$in/backlog.json");

for my $from ('1.1', '1.2')
{
	my $recv = start_receiver(port => $b->{port});
	my $node = PostgreSQL::Test::Cluster->new("restored_$from");
	$node->init;
	$node->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'grelout'",
		"grelout.database = 'app'",
		"grelout.poll_interval = '200ms'",
		"grelout.retry_base = '100ms'",
		"grelout.retry_jitter = 0",
		"grelout.keep_delivered = on") . "\n");
	$node->start;
	my $label = 'PostgreSQL ' . $node->safe_psql('postgres',
		q{SELECT current_setting('server_version_num')::int / 10000}) . ", a dump of $from";

	# psql -f of a pg_dumpall script: its one expected error is the
	# CREATE ROLE of the bootstrap superuser, which initdb made
	my ($stdout, $stderr);
	IPC::Run::run([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', "$in/dumpall-$from.sql" ],
		'>', \$stdout, '2>', \$stderr);
	my @errors = grep { /ERROR/ } split /\n/, $stderr;
	is(scalar(@errors), 1, "$label: the restore raised one error") or diag($stderr);
	like($errors[0] // '', qr/role "\w+" already exists/, "$label: ... the bootstrap superuser's CREATE ROLE");

	is($node->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'grelout'}), '1.2',
		"$label: the restore installs grelout 1.2 (the dump names no version)");
	isnt($node->safe_psql('app', q{SELECT oid FROM pg_roles WHERE rolname = 'app_pub'}), $b->{publisher_oid},
		"$label: the publishing role has another oid than on 15");
	if ($from eq '1.2')
	{
		is($node->safe_psql('app', q{SELECT count(*) FROM grelout.outbox WHERE published_by <> 'app_pub'::regrole
			AND topic <> 'items.insert'}), '0',
			"$label: every restored message names its publisher, by its oid here");
	}
	check_delivers($node, $recv, $b, $label, $from eq '1.2');
	$node->stop;
	$recv->stop;
}
done_testing();
