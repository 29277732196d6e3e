# The relays are terminated (pg_terminate_backend, i.e. SIGTERM) while their
# requests are in flight.  Requests that answer within the shutdown grace
# period are settled before the relay exits (delivered once); requests that
# do not are handed back by the stopping relay (pending, due now, their
# attempt given back) and delivered again by the relays the postmaster
# started again; a message whose only attempt was cut short is sent again,
# not dead-lettered.  Nothing is lost.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest qw(:DEFAULT relay_pids log_offset log_since);

my $recv = start_receiver();
# the lease bounds the request timeout (3/4 of it): 9 s, above the 6 s the
# receiver takes to answer the slow requests
my $node = grelout_node('terminate',
	"grelout.workers = 2",
	"grelout.lease_duration = '12s'",
	"grelout.poll_interval = '500ms'");

sub sq { return $node->safe_psql('app', $_[0]); }

sub terminate_relays
{
	return $node->safe_psql('postgres',
		"SELECT string_agg(pg_terminate_backend(pid)::text, ',')
		 FROM pg_stat_activity WHERE backend_type = 'grelout relay'");
}

# wait for two relays none of which is in @old
sub new_relays
{
	my @old = @_;
	return wait_until(sub {
		my @now = relay_pids($node);
		@now == 2 && !grep { my $p = $_; grep { $_ == $p } @old } @now;
	}, 60);
}

for my $t (qw(quick slow once))
{
	my $url = $recv->url("/$t");
	sq("INSERT INTO grelout.handlers (topic, url, max_attempts)
		VALUES ('$t', '$url', " . ($t eq 'once' ? 1 : 'NULL') . ")");
}
ok(wait_until(sub { scalar(relay_pids($node)) == 2 }, 60), 'two relays running');

# ---- requests that finish within the grace period are settled
my @before = relay_pids($node);
$recv->script('/quick', [ ({ delay => 0.5 }) x 10 ], {});
my $offset = log_offset($node);
sq("SELECT outbox_publish('quick', jsonb_build_object('n', g)) FROM generate_series(1, 10) g");
ok(wait_until(sub { $recv->count('/quick') >= 10 }, 60), 'quick: requests in flight');
is(terminate_relays(), 'true,true', 'quick: both relays terminated');
ok(new_relays(@before), 'quick: two new relays are back (backend_type "grelout relay")');
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'quick'") eq '0' }, 60),
	'quick: every message delivered');
my $stats = $recv->stats('/quick');
is($stats->{count} . ' ' . $stats->{distinct_ids}, '10 10',
	'quick: each delivered once: the relays finished their requests before exiting');
my $log = log_since($node, $offset);
like($log, qr/grelout relay \d stopping with 0 requests unfinished/, 'quick: a relay stopped cleanly');
unlike($log, qr/stopping with [1-9]\d* requests unfinished/, 'quick: no request left unfinished');

# ---- requests still in flight when the grace period ends (20: a new
# handler's adaptive limit is 10 in each relay, issue 32, and no answer
# comes to grow it before the relays are terminated)
my $n = 20;
@before = relay_pids($node);
$recv->script('/slow', [ ({ delay => 6 }) x $n ], {});
$recv->script('/once', [ { delay => 6 } ], {});
$offset = log_offset($node);
my @ids = split /\n/, sq("SELECT outbox_publish('slow', jsonb_build_object('n', g)) FROM generate_series(1, $n) g");
my $once = sq("SELECT outbox_publish('once', '{}')");
ok(wait_until(sub { $recv->count('/slow') >= $n && $recv->count('/once') >= 1 }, 60),
	"slow: all requests in flight");
ok(wait_until(sub { sq('SELECT sum(in_flight) FROM grelout.relays') eq $n + 1 }, 30),
	'slow: grelout.relays shows the ' . ($n + 1) . ' requests in flight');
is(sq("SELECT string_agg(DISTINCT activity, ',') FROM grelout.relays WHERE in_flight > 0"), 'delivering',
	'slow: and the relays busy with them say they are delivering');
is(terminate_relays(), 'true,true', 'slow: both relays terminated');
ok(new_relays(@before), 'slow: two new relays are back');
like(log_since($node, $offset), qr/grelout relay \d stopping with [1-9]\d* requests unfinished/,
	'slow: a relay stopped with requests still in flight');

ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'slow'") eq '0' }, 120),
	'slow: every message is eventually delivered');
my $sum = $recv->summary('/slow');
my %seen;
$seen{ $_->{id} }++ for @$sum;
is(scalar(grep { $seen{$_} } @ids), $n, 'slow: every message reached the receiver');
my @again = grep { $seen{$_} >= 2 } keys %seen;
cmp_ok(scalar @again, '>=', 1, 'slow: interrupted messages were sent again (' . scalar(@again) . ')');
is(scalar(grep { $_->{attempt} ne '1' } @$sum), 0,
	'slow: each was sent again as attempt 1: the stopping relay gave the attempt back');

# the message whose only attempt was cut short
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE id = '$once'") eq '0' }, 60),
	'once: its only attempt was handed back, so it is sent again and delivered');
is($recv->count('/once'), 2, 'once: sent a second time');
unlike(log_since($node, $offset), qr/grelout message \Q$once\E of topic "once" is dead/,
	'once: not dead-lettered');
is(sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL'), '2',
	'grelout.relays shows the two new relays');

$node->stop;
$recv->stop;
done_testing();
