# Redirects are never followed: a 3xx answer is a failed attempt whose
# last_error says so, the Location (another path, another host, or a
# file:// URL) is never requested, and every retry goes to the handler's
# own URL again.
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('redirects',
	"grelout.retry_base = '50ms'",
	"grelout.retry_max = '200ms'");

my $trap = IO::Socket::INET->new(Listen => 16, LocalAddr => '127.0.0.1', LocalPort => 0,
	Proto => 'tcp', ReuseAddr => 1) or die "listen: $!";
my $tport = $trap->sockport;

my %location = (
	r301 => $recv->url('/target'),
	r302 => $recv->url('/target'),
	r303 => $recv->url('/target'),
	r307 => $recv->url('/target'),
	r308 => $recv->url('/target'),
	other_host => "http://127.0.0.1:$tport/elsewhere",
	to_file => 'file:///etc/passwd',
	relative => '/target',
);
my %status = (r301 => 301, r302 => 302, r303 => 303, r307 => 307, r308 => 308,
	other_host => 302, to_file => 307, relative => 308);

for my $t (sort keys %location)
{
	$recv->script("/$t", [], { status => $status{$t},
		headers => { Location => $location{$t} }, body => "moved to $location{$t}" });
	$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('$t', '"
		  . $recv->url("/$t") . "', 3)");
	$node->safe_psql('app', "SELECT outbox_publish('$t', '{\"t\": \"$t\"}')");
}
my $n = scalar keys %location;
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE state = 'dead'") eq $n }, 60),
	'every redirected message went dead after its three attempts');

for my $t (sort keys %location)
{
	my $err = $node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = '$t'");
	like($err, qr/^HTTP $status{$t} \(redirects are not followed\)/,
		"$t: last_error says HTTP $status{$t} and that redirects are not followed");
	is($recv->count("/$t"), 3, "$t: all three attempts went to the handler's own URL");
}
is($recv->count('/target'), 0, 'no Location was ever requested');
ok(!IO::Select->new($trap)->can_read(0.5), 'no connection to the other host of a Location');
is($node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE state = 'delivered' OR attempts <> 3"), '0',
	'no redirected message counts as delivered');
is(scalar(grep { $_->{method} ne 'POST' } @{ $recv->requests }), 0,
	'every request was a POST (a 303 did not turn one into a GET)');

$node->stop;
done_testing();
