# The relays' "step aside" entries (issue 29): a role with CREATEDB that
# renames its own served database 100 times in one transaction holds one
# entry, not one a command (no rename runs out of them), and two more of
# its sessions wait to rename it too; whatever such a role holds, a
# superuser's DROP DATABASE of another served database gets its relays out
# and succeeds (no FORCE).  Before issue 29 the renames used up all 64
# entries and the DROP failed after 5 s, "being accessed by other users".
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT log_offset log_since);

my $node = grelout_node('aside',
	"grelout.database = '*'",
	"grelout.poll_interval = '500ms'",
	"max_connections = 30");

sub relays_in
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'grelout relay' AND datname = '$db'");
}

# a database of the role's own, with the extension (an administrator made it)
$node->safe_psql('postgres', 'CREATE ROLE dbmaker LOGIN CREATEDB');
$node->safe_psql('postgres', 'CREATE DATABASE own OWNER dbmaker');
$node->safe_psql('own', 'CREATE EXTENSION grelout');
# the administrator's database, to be dropped
$node->safe_psql('postgres', 'CREATE DATABASE victim');
$node->safe_psql('victim', 'CREATE EXTENSION grelout');
ok(wait_until(sub { relays_in('own') eq '1' && relays_in('victim') eq '1' }, 60),
	'relays serve both databases');

my $offset = log_offset($node);
my $maker = $node->background_psql('postgres', on_error_stop => 0);
$maker->query_safe('SET ROLE dbmaker');
$maker->query_safe('BEGIN');
for my $i (1 .. 100)
{
	my ($from, $to) = $i % 2 ? ('own', 'own2') : ('own2', 'own');
	$maker->query("ALTER DATABASE $from RENAME TO $to");
}
is(relays_in('own'), '0', 'the renames got the relays out of the role\'s database');
unlike(log_since($node, $offset), qr/could not ask the relays to leave/,
	'no rename ran out of entries');

# two more sessions of the role, waiting on the first's rename
my @more;
for (1 .. 2)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('SET ROLE dbmaker');
	$s->query_until(qr/started/, "\\echo started\nALTER DATABASE own RENAME TO own3;\n");
	push @more, $s;
}
ok(wait_until(sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'ALTER DATABASE own RENAME%'
		 AND wait_event_type = 'Lock'") eq '2'
}, 30), 'two more renames wait for the first');

# the administrator's drop
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE victim');
is($ret, 0, 'the superuser\'s DROP DATABASE of a served database succeeds');
unlike($err // '', qr/being accessed by other users/, 'no session was left in it');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_database WHERE datname = 'victim'"),
	'0', 'the database is gone');

$maker->query_safe('ROLLBACK');
$maker->quit;
$_->quit for @more;
ok(wait_until(sub { relays_in('own') eq '1' || relays_in('own3') eq '1' }, 60),
	'the relay is back in the role\'s database afterwards');

$node->stop;
done_testing();
