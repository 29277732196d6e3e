# grelout.database as a list: grelout.workers relays serve each listed
# database; a listed database that does not exist is logged once (no relay
# failing and restarting every 2 s) and served once it is created (its
# relays wait for CREATE EXTENSION, as a single database's do); the list
# and grelout.workers take effect on reload; a publisher's commit wakes the
# relays of its own database only; a served database can be the template of
# CREATE DATABASE.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT set_conf log_offset log_since);

my $recv = start_receiver();
my $node = grelout_node('dblist',
	"grelout.database = 'app, nope ,l2'",
	"grelout.workers = 2",
	"grelout.poll_interval = '500ms'",
	"autovacuum = off");

sub relays_by_db
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(datname || ':' || n, ',' ORDER BY datname), '')
		 FROM (SELECT datname, count(*) AS n FROM pg_stat_activity
		       WHERE backend_type = 'grelout relay' GROUP BY datname) s");
}

ok(wait_until(sub { relays_by_db() eq 'app:2' }, 60), 'two relays in app') or diag(relays_by_db());
sleep(5);
my $log = log_since($node, 0);
my @nope = $log =~ /grelout\.database lists database "nope", which does not exist/g;
is(scalar @nope, 1, 'a missing database is logged once');
unlike($log, qr/FATAL:  database "(?:nope|l2)" does not exist|exited with exit code/,
	'no relay fails on it, no relay exits');

# created later: served at once, waiting for the extension, then delivering
$node->safe_psql('postgres', 'CREATE DATABASE l2');
ok(wait_until(sub { relays_by_db() eq 'app:2,l2:2' }, 30), 'a listed database is served once created')
  or diag(relays_by_db());
ok(wait_until(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE datname = 'l2' AND query LIKE 'waiting for CREATE EXTENSION%'") eq '2'
}, 30), 'its relays wait for CREATE EXTENSION');
$node->safe_psql('l2', 'CREATE EXTENSION grelout');
my $url = $recv->url('/l2');
$node->safe_psql('l2', "INSERT INTO grelout.handlers (topic, url) VALUES ('evt', '$url')");
$node->safe_psql('l2', "SELECT outbox_publish('evt', '{\"n\": 1}')");
ok(wait_until(sub { $recv->count('/l2') >= 1 }, 30), 'and delivers');

# wake-ups: with the poll at an hour, app's relays run no transaction while
# l2's publishers commit and l2's relays deliver
set_conf($node, 'grelout.poll_interval' => '1h');
my $app_xacts = sub {
	$node->safe_psql('postgres', "SELECT xact_commit FROM pg_stat_database WHERE datname = 'app'");
};
my $x0 = -1;
# once the cycles the reload caused are counted, the count stands still
ok(wait_until(sub { my $x = $app_xacts->(); sleep(2); my $same = ($x == $app_xacts->()); $x0 = $x; $same }, 30),
	"app's relays are idle");
for my $n (2 .. 4)
{
	$node->safe_psql('l2', "SELECT outbox_publish('evt', '{\"n\": $n}')");
	ok(wait_until(sub { $recv->count('/l2') >= $n }, 30), "l2: message $n delivered at once, woken by the commit");
}
sleep(2);
is($app_xacts->(), $x0, "app's relays were not woken by l2's commits");
set_conf($node, 'grelout.poll_interval' => '500ms');

# a served database as the template of CREATE DATABASE
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE DATABASE l2copy TEMPLATE l2');
is($ret, 0, 'CREATE DATABASE ... TEMPLATE of a served database succeeds') or diag($stderr);
ok(wait_until(sub { relays_by_db() eq 'app:2,l2:2' }, 30), 'its relays are back; the copy is not listed')
  or diag(relays_by_db());

# the list and grelout.workers on reload
set_conf($node, 'grelout.database' => 'l2, l2copy', 'grelout.workers' => '1');
ok(wait_until(sub { relays_by_db() eq 'l2:1,l2copy:1' }, 30),
	'on reload, the relays follow the new list and number') or diag(relays_by_db());
is($node->safe_psql('l2', "SELECT string_agg(database || ':' || relay, ',' ORDER BY database) FROM grelout.relays"),
	'l2:1,l2copy:1', 'grelout.relays shows each database with its relay');

$node->stop;
$recv->stop;
done_testing();
