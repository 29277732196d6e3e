# Several databases from one server, grelout.database = '*': the relays
# serve every connectable database with the extension (not one without
# it), each database's messages go to its own handlers only, a database
# given the extension after start is served without a restart, the relays
# step out of the way of DROP DATABASE (no FORCE, while delivering), ALTER
# DATABASE ... RENAME and ... SET TABLESPACE, and CREATE DATABASE ...
# TEMPLATE, and not for a role that may not run the command; grelout.relays
# counts per database, and a database left without a relay
# (grelout.max_relays) is logged once and shown, and served once a relay
# is free.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use GreloutTest qw(:DEFAULT log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('dbs',
	"grelout.database = '*'",
	"grelout.max_relays = 4",
	"grelout.poll_interval = '500ms'");

# app (made by grelout_node), a and b have the extension; plain has not
for my $db (qw(a b))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION grelout');
}
$node->safe_psql('postgres', 'CREATE DATABASE plain');
for my $db (qw(app a b))
{
	my $url = $recv->url("/$db");
	$node->safe_psql($db, "INSERT INTO grelout.handlers (topic, url) VALUES ('evt', '$url')");
}

# "db:relays,..." of the running relays, from pg_stat_activity
sub relays_by_db
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(datname || ':' || n, ',' ORDER BY datname), '')
		 FROM (SELECT datname, count(*) AS n FROM pg_stat_activity
		       WHERE backend_type = 'grelout relay' GROUP BY datname) s");
}

sub publish
{
	my ($db, $n) = @_;
	$node->safe_psql($db,
		"SELECT outbox_publish('evt', jsonb_build_object('db', current_database(), 'n', g))
		 FROM generate_series(1, $n) g");
}

# the databases named by the payloads a path received
sub senders
{
	my ($path) = @_;
	my %db;
	for my $r (@{ $recv->summary($path) })
	{
		$db{$1}++ if $r->{body} =~ /"db":\s*"(\w+)"/;
	}
	return join(',', map { "$_:$db{$_}" } sort keys %db);
}

ok(wait_until(sub { relays_by_db() eq 'a:1,app:1,b:1' }, 60),
	'a relay in each of app, a and b, none left in plain') or diag(relays_by_db());
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'grelout launcher'"), '1',
	'one launcher');

publish($_, 5) for qw(app a b);
ok(wait_until(sub { $recv->count('/app') >= 5 && $recv->count('/a') >= 5 && $recv->count('/b') >= 5 }, 60),
	'each database delivers its messages');
is(senders('/app') . ' ' . senders('/a') . ' ' . senders('/b'), 'app:5 a:5 b:5',
	"each database's messages went to its own handler only");
ok(wait_until(sub {
	$node->safe_psql('app',
		"SELECT string_agg(database || ':' || delivered, ',' ORDER BY database) FROM grelout.relays")
	  eq 'a:5,app:5,b:5'
}, 30), 'grelout.relays counts per database');
is($node->safe_psql('app', 'SELECT count(*) FROM grelout.relay_stats()'), '1',
	"relay_stats() (1.0) shows the relays of the database it is called in");

# ---- a database given the extension after start
$node->safe_psql('postgres', 'CREATE DATABASE d');
my $t0 = time();
$node->safe_psql('d', 'CREATE EXTENSION grelout');
ok(wait_until(sub { relays_by_db() eq 'a:1,app:1,b:1,d:1' }, 30),
	'a database given the extension later is served without a restart') or diag(relays_by_db());
note(sprintf('served %.1f s after CREATE EXTENSION', time() - $t0));
my $url = $recv->url('/d');
$node->safe_psql('d', "INSERT INTO grelout.handlers (topic, url) VALUES ('evt', '$url')");
publish('d', 2);
ok(wait_until(sub { $recv->count('/d') >= 2 }, 30), 'and delivers');

# ---- a role that may not drop a database does not get to stop its relay
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN CREATEDB');
my $app_relay = sub {
	$node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout relay' AND datname = 'app'");
};
my $before = $app_relay->();
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE app',
	extra_params => [ '-U', 'mallory' ]);
like($stderr, qr/must be owner of database app/, 'a non-owner cannot drop a served database');
is($app_relay->(), $before, 'and its relay was not stopped');

# ---- DROP DATABASE while its relay has requests in flight, no FORCE
$recv->script('/b', [ ({ delay => 4 }) x 3 ], {});
publish('b', 3);
ok(wait_until(sub { $recv->count('/b') >= 8 }, 30), 'b: requests in flight');
my $offset = log_offset($node);
($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE b');
is($ret, 0, 'DROP DATABASE of a served database succeeds without FORCE') or diag($stderr);
like(log_since($node, $offset), qr/grelout relay 1 stopping with \d+ requests unfinished/,
	'its relay stopped as usual');
publish('app', 1);
ok(wait_until(sub { $recv->count('/app') >= 6 }, 30), 'the other databases still deliver');
ok(wait_until(sub { relays_by_db() eq 'a:1,app:1,d:1' }, 30), 'no relay for the dropped database')
  or diag(relays_by_db());

# ---- ALTER DATABASE ... RENAME of a served database
($ret, $stdout, $stderr) = $node->psql('postgres', 'ALTER DATABASE a RENAME TO a2');
is($ret, 0, 'ALTER DATABASE RENAME of a served database succeeds') or diag($stderr);
ok(wait_until(sub { relays_by_db() eq 'a2:1,app:1,d:1' }, 30), 'its relay is back, in a2')
  or diag(relays_by_db());
publish('a2', 1);
ok(wait_until(sub { $recv->count('/a') >= 6 }, 30), 'and delivers');

# ---- CREATE DATABASE ... TEMPLATE of a served database; the copy has the
# extension too, and takes the last relay
($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE DATABASE e TEMPLATE a2');
is($ret, 0, 'CREATE DATABASE ... TEMPLATE of a served database succeeds') or diag($stderr);
ok(wait_until(sub { relays_by_db() eq 'a2:1,app:1,d:1,e:1' }, 30),
	'the template is served again, and the copy too') or diag(relays_by_db());

# ---- ALTER DATABASE ... SET TABLESPACE of a served database
my $tsdir = PostgreSQL::Test::Utils::tempdir();
$node->safe_psql('postgres', "CREATE TABLESPACE ts LOCATION '$tsdir'");
($ret, $stdout, $stderr) = $node->psql('postgres', 'ALTER DATABASE e SET TABLESPACE ts');
is($ret, 0, 'ALTER DATABASE ... SET TABLESPACE of a served database succeeds') or diag($stderr);
ok(wait_until(sub { relays_by_db() eq 'a2:1,app:1,d:1,e:1' }, 30), 'its relay is back')
  or diag(relays_by_db());

# ---- one database too many for grelout.max_relays = 4
$offset = log_offset($node);
$node->safe_psql('postgres', 'CREATE DATABASE f');
$node->safe_psql('f', 'CREATE EXTENSION grelout');
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT activity FROM grelout.relays WHERE database = 'f' AND relay IS NULL")
	  =~ /^unserved/
}, 30), 'grelout.relays shows the database left without a relay');
sleep(3);
my @logged = log_since($node, $offset) =~ /leaves database "f" unserved/g;
is(scalar @logged, 1, 'and it is logged once');
($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE d');
is($ret, 0, 'DROP DATABASE d frees a relay') or diag($stderr);
ok(wait_until(sub { relays_by_db() eq 'a2:1,app:1,e:1,f:1' }, 30), 'which serves f')
  or diag(relays_by_db());
is($node->safe_psql('app', "SELECT count(*) FROM grelout.relays WHERE relay IS NULL"), '0',
	'nothing is unserved any more');
unlike(log_since($node, 0), qr/database "b" does not exist|FATAL:.*"(?:a|b|d)"/,
	'no relay failed on a dropped or renamed database');

$node->stop;
$recv->stop;
done_testing();
