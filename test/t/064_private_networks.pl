# grelout.block_private_networks = on refuses endpoints whose resolved
# address is loopback, private, link-local, multicast or unspecified, in
# every spelling (127.0.0.1, localhost, 127.1, 2130706433, 0.0.0.0, [::1],
# [::ffff:127.0.0.1]), before any connection, with a last_error naming the
# policy; grelout.allowed_networks lets listed CIDRs through again, and
# only those.
use strict;
use warnings;
use IO::Select;
use IO::Socket::IP;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $rp = $recv->port;
my $node = grelout_node('private',
	"grelout.block_private_networks = on",
	# refused endpoints are to go dead after their attempts, not wait behind a breaker
	"grelout.breaker_threshold = 0",
	"grelout.retry_base = '50ms'",
	"grelout.retry_max = '200ms'",
	"grelout.retry_jitter = 0");

# a minimal HTTP endpoint on ::1, served from this process while waiting
my $v6 = IO::Socket::IP->new(LocalHost => '::1', LocalPort => 0, Listen => 16, ReuseAddr => 1);
my $v6port = $v6 ? $v6->sockport : 0;
my $v6_requests = 0;
my $v6_connections = 0;

# pump_v6: answer 204 to whatever connected to the ::1 endpoint
sub pump_v6
{
	return unless $v6;
	my $sel = IO::Select->new($v6);
	while ($sel->can_read(0))
	{
		my $c = $v6->accept or last;
		$v6_connections++;
		my $req = '';
		my $csel = IO::Select->new($c);
		while ($csel->can_read(5))
		{
			my $n = sysread($c, my $buf, 65536);
			last unless $n;
			$req .= $buf;
			if ($req =~ /\r\n\r\n/s)
			{
				my ($len) = $req =~ /^content-length:\s*(\d+)/mi;
				my ($head) = $req =~ /^(.*?\r\n\r\n)/s;
				last if length($req) >= length($head) + ($len // 0);
			}
		}
		$v6_requests++ if $req =~ /^POST /;
		syswrite($c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
		close $c;
	}
}

my %url = (
	v4 => "http://127.0.0.1:$rp/v4",
	localhost => "http://localhost:$rp/localhost",
	mapped => "http://[::ffff:127.0.0.1]:$rp/mapped",
	short => "http://127.1:$rp/short",
	decimal => "http://2130706433:$rp/decimal",
	zero => "http://0.0.0.0:$rp/zero",
);
$url{v6} = "http://[::1]:$v6port/v6" if $v6;
my @allowed_later = qw(v4 localhost mapped short decimal);

for my $t (sort keys %url)
{
	$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('$t', '$url{$t}', 1)");
	$node->safe_psql('app', "SELECT outbox_publish('$t', '{\"t\": \"$t\"}')");
}

# dead(TOPICS...): wait until these topics' messages are all dead
sub dead
{
	my @t = @_;
	my $list = join(',', map { "'$_'" } @t);
	return wait_until(sub {
		pump_v6();
		$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE state = 'dead' AND topic IN ($list)")
		  eq scalar(@t);
	}, 60);
}

# 1. everything loopback or unspecified is refused before connecting
ok(dead(keys %url), 'every message to a loopback or unspecified address went dead');
for my $t (sort keys %url)
{
	my $err = $node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = '$t'");
	like($err, qr/refused to connect to (loopback|unspecified) address .*grelout\.block_private_networks is on/,
		"$url{$t}: refused, last_error names the policy");
}
like($node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'zero'"),
	qr/unspecified address 0\.0\.0\.0/, '0.0.0.0 is named as unspecified');
like($node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'mapped'"),
	qr/loopback address ::ffff:127\.0\.0\.1/, 'the IPv4-mapped address is named as loopback');
is($recv->count, 0, 'the receiver on 127.0.0.1 got no request');
SKIP:
{
	skip 'no IPv6 loopback here', 2 unless $v6;
	like($node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'v6'"),
		qr/loopback address ::1 /, '::1 is named as loopback');
	pump_v6();
	is($v6_connections, 0, 'nothing connected to the endpoint on ::1');
}
like($node->safe_psql('app', "SELECT last_error FROM grelout.relays WHERE last_error IS NOT NULL LIMIT 1"),
	qr/block_private_networks/, 'grelout.relays shows the refusal too');

# 2. the allow-list lets 127.0.0.0/8 through (IPv4-mapped included), and nothing else
$node->append_conf('postgresql.conf', "grelout.allowed_networks = '127.0.0.0/8'\n");
$node->reload;
ok(wait_until(sub { $node->safe_psql('app', 'SHOW grelout.allowed_networks') eq '127.0.0.0/8' }, 30),
	'allowed_networks reloaded');
# generous attempts with short backoff: the relay reloads a moment after the server
$node->safe_psql('app', 'UPDATE grelout.handlers SET max_attempts = 40');
is($node->safe_psql('app', 'SELECT outbox_redrive()'), scalar(keys %url), 'all messages redriven');
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic IN ("
		  . join(',', map { "'$_'" } @allowed_later) . ")") eq '0' }, 60),
	'the messages to 127.0.0.0/8 are delivered');
is($recv->count("/$_"), 1, "$url{$_}: delivered once through the allow-list") for @allowed_later;
ok(dead('zero', ($v6 ? 'v6' : ())), '0.0.0.0 and ::1 are still refused (not in 127.0.0.0/8)');
like($node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'zero'"),
	qr/block_private_networks/, '... with the policy in last_error');
is($recv->count('/zero'), 0, '... and no request got through');

# 3. listing ::1 lets the IPv6 endpoint through too
SKIP:
{
	skip 'no IPv6 loopback here', 3 unless $v6;
	pump_v6();
	is($v6_connections, 0, 'still nothing connected to ::1');
	$node->append_conf('postgresql.conf', "grelout.allowed_networks = '127.0.0.0/8, ::1/128'\n");
	$node->reload;
	ok(wait_until(sub { $node->safe_psql('app', 'SHOW grelout.allowed_networks') eq '127.0.0.0/8, ::1/128' }, 30),
		'allowed_networks reloaded with ::1/128');
	$node->safe_psql('app', "SELECT outbox_redrive('v6')");
	ok(wait_until(sub {
		pump_v6();
		$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic = 'v6'") eq '0' }, 60),
		'the message to [::1] is delivered once ::1/128 is allowed')
	  or diag("v6 connections: $v6_connections, requests: $v6_requests");
}

# 4. turning the block on also covers connections kept alive from before:
# a reused keep-alive connection to 127.0.0.1 is refused too
$node->append_conf('postgresql.conf',
	"grelout.block_private_networks = off\ngrelout.allowed_networks = ''\n");
$node->reload;
ok(wait_until(sub { $node->safe_psql('app', 'SHOW grelout.block_private_networks') eq 'off' }, 30),
	'block_private_networks reloaded as off');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('keep', 'http://127.0.0.1:$rp/keep', 40)");
$node->safe_psql('app', "SELECT outbox_publish('keep', '{\"before\": true}')");
ok(wait_until(sub { $recv->count('/keep') == 1 }, 60), 'delivered to 127.0.0.1 with the block off');
$node->safe_psql('app', "UPDATE grelout.handlers SET max_attempts = 1 WHERE topic = 'keep'");
$node->append_conf('postgresql.conf', "grelout.block_private_networks = on\n");
$node->reload;
# the relay reloads a moment after the server: probe another loopback
# address (a new connection) until the block shows
my $i = 0;
ok(wait_until(sub {
	$i++;
	$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('probe$i', 'http://127.0.0.2:$rp/probe', 1)");
	$node->safe_psql('app', "SELECT outbox_publish('probe$i', '{}')");
	dead("probe$i");
	$node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'probe$i'") =~ /block_private_networks/;
}, 60), 'the relay applied the block (a new connection to 127.0.0.2 is refused)');
$node->safe_psql('app', "SELECT outbox_publish('keep', '{\"after\": true}')");
ok(dead('keep'), 'the message to 127.0.0.1 over a kept-alive connection went dead');
like($node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = 'keep'"),
	qr/refused to connect to loopback address 127\.0\.0\.1 .*block_private_networks/,
	'... refused by the policy');
is($recv->count('/keep'), 1, '... and the receiver got nothing more');

$node->stop;
done_testing();
