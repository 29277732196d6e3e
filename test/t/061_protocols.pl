# Only http and https: the handlers table refuses any other scheme, and
# rows that got past the table anyway (trigger disabled by a superuser) are
# refused by libcurl itself: no file is read, no connection is made, and
# last_error says the protocol is not allowed.
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('protocols', "grelout.max_attempts = 1");

# a file only the server can read, with a marker that must never come back
my $dir = PostgreSQL::Test::Utils::tempdir();
my $marker = 'grelout-file-marker-' . int(rand(1e9));
open(my $fh, '>', "$dir/secret.txt") or die;
print $fh "$marker\n";
close $fh;
chmod 0644, "$dir/secret.txt";
open($fh, '<', '/etc/passwd') or die;
my $passwd = <$fh>;
close $fh;
chomp $passwd;

# a bare TCP listener: any connection to it, in any protocol, is caught
my $trap = IO::Socket::INET->new(Listen => 16, LocalAddr => '127.0.0.1', LocalPort => 0,
	Proto => 'tcp', ReuseAddr => 1) or die "listen: $!";
my $tport = $trap->sockport;
my $rport = $recv->port;

# 1. the table refuses other schemes, in INSERT and UPDATE
my @refused = (
	'file:///etc/passwd', "file://$dir/secret.txt", 'FILE:///etc/passwd',
	"gopher://127.0.0.1:$tport/_POST", "dict://127.0.0.1:$tport/info",
	"ftp://127.0.0.1:$tport/", "ftps://127.0.0.1:$tport/", "ldap://127.0.0.1:$tport/",
	"telnet://127.0.0.1:$tport", "tftp://127.0.0.1:$tport/x", "smb://127.0.0.1:$tport/x",
	"imap://127.0.0.1:$tport/", "smtp://127.0.0.1:$tport/", "scp://127.0.0.1:$tport/x",
	"ws://127.0.0.1:$tport/", 'javascript:alert(1)', "http:/127.0.0.1:$tport/",
	"httpx://127.0.0.1:$tport/", "//127.0.0.1:$tport/");
for my $url (@refused)
{
	my ($ret, $out, $err) = $node->psql('app',
		"INSERT INTO grelout.handlers (topic, url) VALUES ('t', '$url')");
	ok($ret != 0 && $err =~ /handler url must start with http:\/\/ or https:\/\//,
		"handler url $url is refused at INSERT");
}
is($node->safe_psql('app', 'SELECT count(*) FROM grelout.handlers'), '0', 'no refused row was stored');

$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('good', '" . $recv->url('/good') . "')");
my ($ret, $out, $err) = $node->psql('app', "UPDATE grelout.handlers SET url = 'file:///etc/passwd' WHERE topic = 'good'");
ok($ret != 0 && $err =~ /must start with http/, 'an UPDATE to file:// is refused');
is($node->safe_psql('app', "SELECT url FROM grelout.handlers WHERE topic = 'good'"), $recv->url('/good'),
	'the handler kept its http URL');

# 2. rows written around the check, by a superuser with the trigger disabled
my %bypass = (
	file => 'file:///etc/passwd',
	file_marker => "file://$dir/secret.txt",
	file_upper => "FILE://$dir/secret.txt",
	gopher => "gopher://127.0.0.1:$tport/_POST%20/x",
	dict => "dict://127.0.0.1:$tport/info",
	ftp => "ftp://127.0.0.1:$tport/",
	telnet => "telnet://127.0.0.1:$tport",
	gopher_recv => "gopher://127.0.0.1:$rport/_POST%20/gopher%20HTTP/1.1",
	ldap => "ldap://127.0.0.1:$tport/",
	smtp => "smtp://127.0.0.1:$tport/",
);
$node->safe_psql('app', join("\n",
	'ALTER TABLE grelout.handlers DISABLE TRIGGER handlers_validate;',
	# the validation trigger also names a handler by its topic: name it here
	(map { "INSERT INTO grelout.handlers (name, topic, url) VALUES ('$_', '$_', '$bypass{$_}');" } sort keys %bypass),
	'ALTER TABLE grelout.handlers ENABLE TRIGGER handlers_validate;'));
is($node->safe_psql('app', 'SELECT count(*) FROM grelout.handlers'), scalar(keys %bypass) + 1,
	'bypass rows are in the table');

$node->safe_psql('app', "SELECT outbox_publish('$_', '{\"proto\": \"$_\"}')") for sort keys %bypass;
my $n = scalar keys %bypass;
ok(wait_until(sub {
	$node->safe_psql('app', "SELECT count(*) FROM grelout.outbox WHERE state = 'dead'") eq $n }, 60),
	'every message to another scheme went dead (max_attempts 1)');

my %errors = split /\|/, join('|', split /\n/,
	$node->safe_psql('app', 'SELECT topic, last_error FROM grelout.outbox ORDER BY topic'));
for my $t (sort keys %bypass)
{
	like($errors{$t} // '', qr/protocol not allowed|unsupported protocol|not supported/i,
		"$bypass{$t}: last_error says the protocol is not allowed");
}

# nothing was reached: no connection to the trap, no request to the receiver
my $sel = IO::Select->new($trap);
ok(!$sel->can_read(0.5), 'no connection was made to the TCP trap (gopher, dict, ftp, telnet, ldap, smtp)');
is($recv->count, 0, 'the HTTP receiver got nothing from the gopher:// row');

# the files' contents never appear anywhere
my $relay_err = $node->safe_psql('app', 'SELECT string_agg(coalesce(last_error, \'\'), \' \') FROM grelout.relays');
my $all_errors = $node->safe_psql('app', 'SELECT string_agg(last_error, \' \') FROM grelout.outbox');
my $log = slurp_file($node->logfile);
for my $where ([ 'outbox.last_error', $all_errors ], [ 'relays.last_error', $relay_err ], [ 'server log', $log ])
{
	ok(index($where->[1], $marker) < 0, "the marker file's content is not in $where->[0]");
	ok(index($where->[1], $passwd) < 0, "/etc/passwd's content is not in $where->[0]");
}

# the relay is fine and still delivers over http
$node->safe_psql('app', "SELECT outbox_publish('good', '{\"ok\": true}')");
ok(wait_until(sub { $recv->count('/good') == 1 }, 30), 'an http handler still delivers');

$node->stop;
done_testing();
