# Mutual TLS and a CA per handler (issue 34).  A local nginx (started by
# this test, in its own directory) serves https with HTTP/2 on loopback
# with a server certificate of a CA made here; it asks for a client
# certificate of a second CA made here and logs, for each request, the
# subject of the certificate the client presented.  grelout.ca_file is
# not set: each handler trusts the server through its own tls_ca.
#
# - A handler row whose certificate does not match its key, is expired,
#   lacks its key, or whose tls_ca is no certificate is refused, and the
#   error quotes neither the key nor the certificate.
# - Three handlers to one origin, two with certificates of their own and
#   one with none, their messages interleaved: each request carries its
#   own handler's certificate, never another's (no connection, HTTP/2
#   stream or TLS session of one handler serves another), over HTTP/2.
# - An endpoint that requires a certificate: delivered with it; without
#   it nginx answers 400.
# - A server that refuses the handshake without a certificate (openssl
#   s_server -Verify): a TLS failure, retried like any transport failure.
# - tls_ca replaces grelout.ca_file: with ca_file set to the server's CA,
#   a handler whose tls_ca is another CA fails verification, one without
#   tls_ca is delivered.
# - handlers_masked shows that a certificate is set, never the key; the
#   server log holds no line of the key.
use strict;
use warnings;
use IO::Socket::INET;
use IPC::Run qw(run start);
use PostgreSQL::Test::Utils;
use Test::More;
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

# write_file(PATH, TEXT)
sub write_file
{
	my ($path, $text) = @_;
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh $text;
	close $fh;
}

# ca(NAME): a CA certificate and key, $dir/NAME.crt and $dir/NAME.key
sub ca
{
	my ($name) = @_;
	sh('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
		'-nodes', '-sha256', '-days', '2', '-keyout', "$dir/$name.key", '-out', "$dir/$name.crt",
		'-subj', "/CN=grelout $name", '-addext', 'basicConstraints=critical,CA:TRUE',
		'-addext', 'keyUsage=critical,keyCertSign,cRLSign');
}

# leaf(NAME, CA, EXT): a certificate NAME.crt (key NAME.key) signed by CA
sub leaf
{
	my ($name, $ca, $ext) = @_;
	write_file("$dir/$name.ext", $ext);
	sh('openssl', 'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
		'-keyout', "$dir/$name.key", '-out', "$dir/$name.csr", '-subj', "/CN=$name");
	sh('openssl', 'x509', '-req', '-in', "$dir/$name.csr", '-CA', "$dir/$ca.crt",
		'-CAkey', "$dir/$ca.key", '-CAcreateserial', '-days', '2', '-sha256',
		'-extfile', "$dir/$name.ext", '-out', "$dir/$name.crt");
}

ca('server-ca');
ca('client-ca');
ca('other-ca');
leaf('server', 'server-ca', "basicConstraints = CA:FALSE\n"
	  . "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost\n");
my $client_ext = "basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n";
leaf('alice', 'client-ca', $client_ext);
leaf('bob', 'client-ca', $client_ext);

# an expired client certificate: "openssl ca" can date one in the past
mkdir "$dir/ca-db";
write_file("$dir/ca-db/index.txt", '');
write_file("$dir/ca-db/serial", "1000\n");
write_file("$dir/ca.cnf", <<"EOF");
[ ca ]
default_ca = old
[ old ]
database = $dir/ca-db/index.txt
new_certs_dir = $dir/ca-db
serial = $dir/ca-db/serial
default_md = sha256
policy = any
[ any ]
commonName = supplied
EOF
sh('openssl', 'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
	'-keyout', "$dir/old.key", '-out', "$dir/old.csr", '-subj', '/CN=old');
sh('openssl', 'ca', '-batch', '-config', "$dir/ca.cnf", '-cert', "$dir/client-ca.crt",
	'-keyfile', "$dir/client-ca.key", '-in', "$dir/old.csr", '-out', "$dir/old.crt",
	'-startdate', '20200101000000Z', '-enddate', '20200102000000Z', '-notext');

# and one that expires 20 s from now, while its handler is stored
my @end = gmtime(time() + 20);
my $brief_end = sprintf('%04d%02d%02d%02d%02d%02dZ', $end[5] + 1900, $end[4] + 1, @end[3, 2, 1, 0]);
my $brief_expires = time() + 20;
sh('openssl', 'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
	'-keyout', "$dir/brief.key", '-out', "$dir/brief.csr", '-subj', '/CN=brief');
sh('openssl', 'ca', '-batch', '-config', "$dir/ca.cnf", '-cert', "$dir/client-ca.crt",
	'-keyfile', "$dir/client-ca.key", '-in', "$dir/brief.csr", '-out', "$dir/brief.crt",
	'-startdate', '20200101000000Z', '-enddate', $brief_end, '-notext');

# nginx: "opt" asks for a client certificate and logs its subject; "req"
# requires one
my $opt_port = free_port();
my $req_port = free_port();
mkdir "$dir/nginx-tmp";
write_file("$dir/nginx.conf", <<"EOF");
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log info;
events { worker_connections 256; }
http {
	log_format who '\$server_port \$request_uri \$status \$server_protocol '
		'verify=\$ssl_client_verify dn=\$ssl_client_s_dn';
	access_log $dir/access.log who;
	client_body_temp_path $dir/nginx-tmp/body;
	proxy_temp_path $dir/nginx-tmp/proxy;
	fastcgi_temp_path $dir/nginx-tmp/fastcgi;
	uwsgi_temp_path $dir/nginx-tmp/uwsgi;
	scgi_temp_path $dir/nginx-tmp/scgi;
	ssl_certificate $dir/server.crt;
	ssl_certificate_key $dir/server.key;
	ssl_client_certificate $dir/client-ca.crt;
	ssl_session_cache shared:tls:1m;
	server {
		listen 127.0.0.1:$opt_port ssl http2;
		ssl_verify_client optional;
		location / { return 204; }
	}
	server {
		listen 127.0.0.1:$req_port ssl http2;
		ssl_verify_client on;
		location / { return 204; }
	}
}
EOF
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
	IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $opt_port, Proto => 'tcp') ? 1 : 0 }, 30),
	'nginx serves https on loopback')
  or diag(slurp_file("$dir/nginx.out") . slurp_file("$dir/nginx-error.log"));

my $node = grelout_node('mtls',
	"log_statement = 'none'",
	"grelout.retry_base = '50ms'",
	"grelout.retry_max = '200ms'");

my %pem = map { my $f = $_; $f => slurp_file("$dir/$f") }
  qw(server-ca.crt other-ca.crt alice.crt alice.key bob.crt bob.key old.crt old.key
  brief.crt brief.key);

# A handler row through psql variables, so that no PEM is typed into a
# statement here; returns psql's (ret, stdout, stderr).
sub handler
{
	my ($sql, %vars) = @_;
	my @args;
	for my $v (sort keys %vars)
	{
		my $f = "$dir/var-$v";
		write_file($f, $vars{$v});
		push @args, "\\set $v `cat $f`";
	}
	my ($out, $err) = ('', '');
	my $ret = $node->psql('app', join("\n", @args, $sql), stdout => \$out, stderr => \$err);
	return ($ret, $out, $err);
}

# the key lines of a PEM private key (its base64 body)
sub key_lines
{
	my ($pem) = @_;
	return grep { !/-----/ && length($_) > 20 } split /\n/, $pem;
}

# 1. refused when written
my $insert = "INSERT INTO grelout.handlers (name, topic, url, tls_client_cert, tls_client_key, tls_ca)"
  . " VALUES ('bad', 'bad', 'https://127.0.0.1:$opt_port/bad', :'cert', :'key', :'ca')";
# (the failing statements carry old.key, a key no handler keeps: PostgreSQL
# logs the text of a failing statement, which a client keeps keys out of
# by binding them as parameters)
my ($ret, $out, $err) = handler($insert, cert => $pem{'alice.crt'}, key => $pem{'old.key'},
	ca => $pem{'server-ca.crt'});
isnt($ret, 0, 'a certificate with the key of another is refused');
like($err, qr/invalid handler tls_client_cert.*\n.*does not belong to the certificate/,
	'... saying the key does not belong to the certificate');
my @alice_key = key_lines($pem{'alice.key'});
my @bob_key = key_lines($pem{'bob.key'});
my @old_key = key_lines($pem{'old.key'});
ok(!grep({ index($err, $_) >= 0 } @old_key), '... and the error quotes no key');

($ret, $out, $err) = handler($insert, cert => $pem{'old.crt'}, key => $pem{'old.key'},
	ca => $pem{'server-ca.crt'});
isnt($ret, 0, 'an expired certificate is refused');
like($err, qr/the certificate has expired/i, '... saying it has expired');

($ret, $out, $err) = handler("INSERT INTO grelout.handlers (name, topic, url, tls_client_cert)"
	  . " VALUES ('bad', 'bad', 'https://127.0.0.1:$opt_port/bad', :'cert')",
	cert => $pem{'alice.crt'});
isnt($ret, 0, 'a certificate without its key is refused');
like($err, qr/must be set together/, '... saying both are needed');

($ret, $out, $err) = handler($insert, cert => $pem{'old.crt'}, key => $pem{'old.key'},
	ca => $pem{'old.key'});
isnt($ret, 0, 'a key as tls_ca is refused');
like($err, qr/invalid handler tls_ca/, '... as an invalid tls_ca');
ok(!grep({ index($err, $_) >= 0 } @old_key), '... without quoting it');

($ret, $out, $err) = handler("INSERT INTO grelout.handlers (name, topic, url, enabled, tls_client_cert, tls_client_key)"
	  . " VALUES ('brief', 'brief', 'https://127.0.0.1:$opt_port/brief', false, :'cert', :'key')",
	cert => $pem{'brief.crt'}, key => $pem{'brief.key'});
is($ret, 0, 'a certificate valid for 20 s more is taken') or diag($err);

# 2. three handlers to one origin, each request with its own certificate
for my $h (['alice', 'alice'], ['bob', 'bob'], ['nobody', undef])
{
	my ($name, $who) = @$h;
	my %vars = (ca => $pem{'server-ca.crt'});
	my $cols = 'tls_ca';
	my $vals = ":'ca'";
	if ($who)
	{
		%vars = (%vars, cert => $pem{"$who.crt"}, key => $pem{"$who.key"});
		$cols .= ', tls_client_cert, tls_client_key';
		$vals .= ", :'cert', :'key'";
	}
	($ret, $out, $err) = handler("INSERT INTO grelout.handlers (name, topic, url, $cols)"
		  . " VALUES ('$name', 'mix', 'https://127.0.0.1:$opt_port/$name', $vals)", %vars);
	is($ret, 0, "handler $name is written") or diag($err);
}
$node->safe_psql('app',
	"SELECT outbox_publish('mix', jsonb_build_object('n', i)) FROM generate_series(1, 40) AS i");

# lines(): nginx's log lines
sub lines
{
	return () unless -f "$dir/access.log";
	return split /\n/, slurp_file("$dir/access.log");
}

# of(PATH): the log lines of a path
sub of
{
	my ($path) = @_;
	return grep { /^\d+ \Q$path\E / } lines();
}
ok(wait_until(sub { of('/alice') + of('/bob') + of('/nobody') >= 120 }, 60),
	'the 40 messages reached each of the three handlers')
  or diag(join("\n", lines()));
# (HTTP/2 with libcurl 7.88 may send a request twice: at least once each)
my @alice = of('/alice');
my @bob = of('/bob');
my @nobody = of('/nobody');
is(scalar(grep { /^\d+ \/alice 204 HTTP\/2\.0 verify=SUCCESS dn=CN=alice$/ } @alice), scalar(@alice),
	"every request of alice's handler carried alice's certificate, over HTTP/2")
  or diag(join("\n", @alice));
is(scalar(grep { /^\d+ \/bob 204 HTTP\/2\.0 verify=SUCCESS dn=CN=bob$/ } @bob), scalar(@bob),
	"every request of bob's handler carried bob's")
  or diag(join("\n", @bob));
is(scalar(grep { /^\d+ \/nobody 204 HTTP\/2\.0 verify=NONE dn=-?$/ } @nobody), scalar(@nobody),
	'no request of the handler without a certificate carried one')
  or diag(join("\n", @nobody));
ok(wait_until(sub { $node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE topic = 'mix'") eq '0' }, 60),
	'all 40 messages are delivered to the three handlers (and gone)');

# 3. an endpoint that requires a certificate
$node->safe_psql('app', "UPDATE grelout.handlers SET topic = 'req', max_attempts = 1,"
	  . " url = replace(url, ':$opt_port/', ':$req_port/') WHERE name IN ('alice', 'nobody')");
$node->safe_psql('app', "SELECT outbox_publish('req', '{}')");
# (a delivered fan-out row is gone: alice's delivery is seen in nginx's log)
ok(wait_until(sub { grep { /^$req_port \/alice 204 / } lines() }, 60),
	'with the certificate: delivered to the endpoint that requires one')
  or diag(join("\n", lines()));
ok(!grep({ /^$req_port \/alice / && !/verify=SUCCESS dn=CN=alice$/ } lines()),
	'... every request of it with alice\'s certificate');
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT state || ':' || last_status FROM grelout.deliveries WHERE handler = 'nobody'"
		  . " AND message_id = (SELECT id FROM grelout.outbox WHERE topic = 'req')") eq 'dead:400' }, 60),
	'without a certificate: nginx answered 400, and the delivery is dead');

# 4. a server that ends the handshake without a certificate: a TLS failure
my $s_port = free_port();
my $s_server = start(['openssl', 's_server', '-accept', "127.0.0.1:$s_port",
	'-cert', "$dir/server.crt", '-key', "$dir/server.key", '-CAfile', "$dir/client-ca.crt",
	'-Verify', '1', '-www', '-quiet'], '<', \undef, '>', "$dir/s_server.out", '2>&1');
ok(wait_until(sub {
	IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $s_port, Proto => 'tcp') ? 1 : 0 }, 30),
	'openssl s_server listens');
($ret, $out, $err) = handler("INSERT INTO grelout.handlers (name, topic, url, tls_ca, max_attempts)"
	  . " VALUES ('strict', 'strict', 'https://127.0.0.1:$s_port/strict', :'ca', 2)",
	ca => $pem{'server-ca.crt'});
$node->safe_psql('app', "SELECT outbox_publish('strict', '{}')");
my $state;
ok(wait_until(sub {
	$state = $node->safe_psql('app', "SELECT state || ':' || attempts || ':' || coalesce(last_status::text, '-') || ':' || last_error"
		  . " FROM grelout.deliveries WHERE handler = 'strict'");
	$state =~ /^dead:/ }, 60), 'refused at the handshake: dead after its attempts');
like($state, qr/^dead:2:-:/, '... two attempts, each without an HTTP status (a transport failure, retried)');
like($state, qr/TLS|SSL|certificate|alert/i, '... its error a TLS one');
$s_server->kill_kill;

# 5. tls_ca replaces grelout.ca_file
$node->append_conf('postgresql.conf', "grelout.ca_file = '$dir/server-ca.crt'\n");
$node->reload;
($ret, $out, $err) = handler("INSERT INTO grelout.handlers (name, topic, url, tls_ca, max_attempts)"
	  . " VALUES ('other', 'other', 'https://127.0.0.1:$opt_port/other', :'ca', 1)",
	ca => $pem{'other-ca.crt'});
$node->safe_psql('app', "INSERT INTO grelout.handlers (name, topic, url, max_attempts)"
	  . " VALUES ('plain', 'plain', 'https://127.0.0.1:$opt_port/plain', 5)");
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT outbox_publish('plain', '{}')");
	of('/plain') > 0 }, 60), 'with grelout.ca_file the handler without tls_ca is delivered');
$node->safe_psql('app', "SELECT outbox_publish('other', '{}')");
ok(wait_until(sub {
	$state = $node->safe_psql('app', "SELECT state || ':' || coalesce(last_error, '') FROM grelout.deliveries WHERE handler = 'other'");
	$state =~ /^dead:/ }, 60), 'the handler whose tls_ca is another CA is dead');
like($state, qr/^dead:TLS failure/, '... of a TLS failure: its tls_ca replaced grelout.ca_file');
is(scalar(of('/other')), 0, '... and nginx never got its request');

# 6. a stored certificate that expired: the row can still be changed
sleep(1) while time() <= $brief_expires + 1;
is($node->psql('app', "UPDATE grelout.handlers SET enabled = true, max_attempts = 3 WHERE name = 'brief'"), 0,
	'once its certificate expired, the handler can still be updated (enabled, max_attempts)');
is($node->psql('app', "SELECT grelout.set_secret('brief', 'whsec_' || encode(decode(repeat('ab', 32), 'hex'), 'base64'))"), 0,
	'... given a secret by set_secret');
is($node->psql('app', "UPDATE grelout.handlers SET enabled = false WHERE name = 'brief' AND enabled"), 0,
	'... and disabled, as the relay disables it');
($ret, $out, $err) = handler("UPDATE grelout.handlers SET tls_client_cert = :'cert' || E'\\n' WHERE name = 'brief'",
	cert => $pem{'brief.crt'});
like($err, qr/has expired/i, 'but the expired certificate written anew is refused');
my $copy = $node->safe_psql('app', "COPY (SELECT * FROM grelout.handlers WHERE name = 'brief') TO STDOUT");
$node->safe_psql('app', "DELETE FROM grelout.handlers WHERE name = 'brief'");
($ret, $out, $err) = ('', '', '');
write_file("$dir/brief.copy", "$copy\n");
$ret = $node->psql('app', "\\copy grelout.handlers FROM '$dir/brief.copy'", stderr => \$err);
is($ret, 0, 'a COPY of the row, as pg_dump writes it, restores with its expired certificate') or diag($err);

# 7. what an operator sees, and what the log holds
is($node->safe_psql('app', "SELECT string_agg(name || ':' || has_tls_client_cert || ':' || has_tls_ca, ',' ORDER BY name)"
	  . " FROM grelout.handlers_masked WHERE name IN ('alice', 'nobody', 'plain')"),
	'alice:true:true,nobody:false:true,plain:false:false',
	'handlers_masked says which handlers have a certificate and a CA');
my $masked = $node->safe_psql('app', "SELECT row_to_json(m)::text FROM grelout.handlers_masked m");
ok(!grep({ index($masked, $_) >= 0 } @alice_key), '... and shows no key');
my $log = slurp_file($node->logfile);
ok(!grep({ index($log, $_) >= 0 } @alice_key, @bob_key), 'the server log holds no line of a key');

$node->stop;
kill 'TERM', $nginx;
waitpid($nginx, 0);
$nginx = 0;
done_testing();
