# TLS certificates and host names are verified.  A local nginx (started by
# this test, as this user, in its own directory) serves https on loopback
# with a certificate from a CA made here with openssl.  Without
# grelout.ca_file the delivery fails with a TLS error; with it (set in
# postgresql.conf and reloaded) it is delivered; a name the certificate
# does not hold, a self-signed certificate and an unreadable CA file still
# fail; and emptying ca_file again brings the failure back.
use strict;
use warnings;
use IO::Socket::INET;
use IPC::Run qw(run);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GreloutTest;

my $dir = PostgreSQL::Test::Utils::tempdir();

# sh(CMD...): run a command, die with its output if it fails.
sub sh
{
	my @cmd = @_;
	my ($out, $err) = ('', '');
	run \@cmd, '<', \undef, '>', \$out, '2>', \$err
	  or die "@cmd failed: $out$err";
	return $out;
}

# free_port(): a loopback port nobody listens on just now.
sub free_port
{
	my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp',
		Listen => 1) or die;
	my $p = $s->sockport;
	close $s;
	return $p;
}

# certificates: a CA, a server certificate it signs for 127.0.0.1 and
# localhost, and a self-signed one for the same names
open(my $fh, '>', "$dir/server.ext") or die;
print $fh "basicConstraints = CA:FALSE\n"
  . "keyUsage = critical, digitalSignature, keyEncipherment\n"
  . "extendedKeyUsage = serverAuth\n"
  . "subjectAltName = IP:127.0.0.1, DNS:localhost\n";
close $fh;
sh('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-days', '2',
	'-keyout', "$dir/ca.key", '-out', "$dir/ca.crt", '-subj', '/CN=grelout test CA',
	'-addext', 'basicConstraints=critical,CA:TRUE',
	'-addext', 'keyUsage=critical,keyCertSign,cRLSign');
sh('openssl', 'req', '-newkey', 'rsa:2048', '-nodes', '-sha256',
	'-keyout', "$dir/server.key", '-out', "$dir/server.csr", '-subj', '/CN=localhost');
sh('openssl', 'x509', '-req', '-in', "$dir/server.csr", '-CA', "$dir/ca.crt",
	'-CAkey', "$dir/ca.key", '-CAcreateserial', '-days', '2', '-sha256',
	'-extfile', "$dir/server.ext", '-out', "$dir/server.crt");
sh('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-days', '2',
	'-keyout', "$dir/self.key", '-out', "$dir/self.crt", '-subj', '/CN=localhost',
	'-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost');
like(sh('openssl', 'verify', '-CAfile', "$dir/ca.crt", "$dir/server.crt"), qr/OK/,
	'the server certificate verifies against the test CA');

# nginx, with every path of its own, answering 204 to everything
my $port = free_port();
my $self_port = free_port();
mkdir "$dir/nginx-tmp";
open($fh, '>', "$dir/nginx.conf") or die;
print $fh <<"EOF";
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log info;
events { worker_connections 64; }
http {
	access_log $dir/access.log;
	client_body_temp_path $dir/nginx-tmp/body;
	proxy_temp_path $dir/nginx-tmp/proxy;
	fastcgi_temp_path $dir/nginx-tmp/fastcgi;
	uwsgi_temp_path $dir/nginx-tmp/uwsgi;
	scgi_temp_path $dir/nginx-tmp/scgi;
	server {
		listen 127.0.0.1:$port ssl;
		listen 127.0.0.2:$port ssl;
		server_name localhost;
		ssl_certificate $dir/server.crt;
		ssl_certificate_key $dir/server.key;
		location / { return 204; }
	}
	server {
		listen 127.0.0.1:$self_port ssl;
		server_name localhost;
		ssl_certificate $dir/self.crt;
		ssl_certificate_key $dir/self.key;
		location / { return 204; }
	}
}
EOF
close $fh;
my $nginx_bin = -x '/usr/sbin/nginx' ? '/usr/sbin/nginx' : 'nginx';
my $nginx = fork();
die "fork: $!" unless defined $nginx;
if ($nginx == 0)
{
	open(STDOUT, '>', "$dir/nginx.out");
	open(STDERR, '>&', \*STDOUT);
	exec($nginx_bin, '-p', "$dir/", '-e', "$dir/nginx-error.log", '-c', "$dir/nginx.conf")
	  or die "exec nginx: $!";
}
END { kill 'TERM', $nginx if $nginx; }
ok(wait_until(sub {
	IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp') ? 1 : 0 }, 30),
	'nginx serves https on loopback')
  or diag(slurp_file("$dir/nginx.out") . slurp_file("$dir/nginx-error.log"));

my $node = grelout_node('tls',
	"grelout.retry_base = '50ms'",
	"grelout.retry_max = '200ms'");

# posts(PATH): how many POSTs nginx logged for a path
sub posts
{
	my ($path) = @_;
	return 0 unless -f "$dir/access.log";
	return scalar(grep { /"POST \Q$path\E HTTP\/1\.1" 204 / } split /\n/, slurp_file("$dir/access.log"));
}

# deliver(TOPIC, URL, MAX_ATTEMPTS): a handler and one message for it
sub deliver
{
	my ($topic, $url, $max) = @_;
	$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url, max_attempts) VALUES ('$topic', '$url', $max)
		ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, max_attempts = EXCLUDED.max_attempts");
	$node->safe_psql('app', "SELECT outbox_publish('$topic', '{\"tls\": \"$topic\"}')");
}

# settled(TOPIC, STATE): wait until the topic's message is dead, or gone
# (delivered); returns its last_error when dead
sub settled
{
	my ($topic) = @_;
	my $state;
	wait_until(sub {
		$state = $node->safe_psql('app', "SELECT coalesce(max(state), 'gone') FROM grelout.outbox WHERE topic = '$topic'");
		$state eq 'dead' || $state eq 'gone';
	}, 60);
	return $state eq 'dead'
	  ? $node->safe_psql('app', "SELECT last_error FROM grelout.outbox WHERE topic = '$topic'")
	  : $state;
}

# set_ca(VALUE): grelout.ca_file in postgresql.conf, reloaded
sub set_ca
{
	my ($value) = @_;
	$node->append_conf('postgresql.conf', "grelout.ca_file = '$value'\n");
	$node->reload;
	ok(wait_until(sub { $node->safe_psql('app', 'SHOW grelout.ca_file') eq $value }, 30),
		"grelout.ca_file reloaded as '$value'");
}

# await_failure(URL): the relay reloads on its own signal, a moment after
# the server: publish probes to URL until one fails with a TLS error
sub await_failure
{
	my ($url) = @_;
	my $i = 0;
	return wait_until(sub {
		$i++;
		deliver("probe$i", $url, 1);
		settled("probe$i") =~ /^TLS failure/;
	}, 60);
}

# 1. no CA: the certificate cannot be verified
deliver('noca', "https://127.0.0.1:$port/noca", 1);
my $err = settled('noca');
like($err, qr/^TLS failure/, 'without grelout.ca_file: dead with a TLS failure in last_error');
like($err, qr/certificate|verify|issuer/i, '... that says what was wrong with the certificate');
is(posts('/noca'), 0, '... and nginx never got the request');

# 2. the CA: delivered, by IP address and by name
set_ca("$dir/ca.crt");
deliver('withca', "https://127.0.0.1:$port/withca", 5);
is(settled('withca'), 'gone', 'with grelout.ca_file: delivered over https');
is(posts('/withca'), 1, '... nginx logged the POST once');
deliver('byname', "https://localhost:$port/byname", 5);
is(settled('byname'), 'gone', 'https://localhost is delivered (DNS name in subjectAltName)');
is(posts('/byname'), 1, '... nginx logged it');
$node->safe_psql('app', "UPDATE grelout.outbox SET attempts = 0 WHERE topic = 'noca'");
is($node->safe_psql('app', "SELECT outbox_redrive('noca')"), '1', 'the dead message is redriven');
$node->safe_psql('app', "UPDATE grelout.handlers SET max_attempts = 5 WHERE topic = 'noca'");
is(settled('noca'), 'gone', 'the message that failed before is delivered now');

# 3. still verified: another name, a self-signed certificate
deliver('wrongname', "https://127.0.0.2:$port/wrongname", 1);
$err = settled('wrongname');
like($err, qr/^TLS failure/, 'a host the certificate does not name: TLS failure');
like($err, qr/127\.0\.0\.2|name|match/i, '... about the name');
is(posts('/wrongname'), 0, '... nginx never got it');
deliver('selfsigned', "https://127.0.0.1:$self_port/selfsigned", 1);
$err = settled('selfsigned');
like($err, qr/^TLS failure/, 'a self-signed certificate: TLS failure even with a CA file');
is(posts('/selfsigned'), 0, '... nginx never got it');

# 4. a CA file that cannot be read is a TLS failure, not a silent fallback
set_ca("$dir/no-such-ca.crt");
ok(await_failure("https://127.0.0.1:$port/probe"), 'the relay applied the new ca_file');
deliver('badfile', "https://127.0.0.1:$port/badfile", 1);
$err = settled('badfile');
like($err, qr/^TLS failure/, 'an unreadable CA file: TLS failure');
is(posts('/badfile'), 0, '... nginx never got it');

# 5. back to the system CAs: verification fails again (no stale connection reused)
set_ca('');
ok(await_failure("https://127.0.0.1:$port/probe"), 'the relay applied the empty ca_file');
deliver('again', "https://127.0.0.1:$port/again", 1);
$err = settled('again');
like($err, qr/^TLS failure/, 'grelout.ca_file emptied: TLS failure again');
is(posts('/again'), 0, '... nginx never got it');

$node->stop;
kill 'TERM', $nginx;
waitpid($nginx, 0);
$nginx = 0;
done_testing();
