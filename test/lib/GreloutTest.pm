
# GreloutTest: helpers shared by grelout's Perl TAP tests (test/t/*.pl).
#
# A cluster with the library preloaded and the extension created, a
# scriptable webhook receiver (test/receiver.py) on loopback, an OAuth2
# token server guarding such a receiver (test/oauth_server.py), and polling
# with a deadline (deliveries happen after COMMIT, never in the test's own
# transaction).
package GreloutTest;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use HTTP::Tiny;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(grelout_node start_receiver wait_until psql_ok);
# Imported on request only, so that they clash with nothing in other tests.
our @EXPORT_OK = qw(relay_pids set_conf log_offset log_since new_secret
  start_oauth_server);

my $src = $ENV{GRELOUT_SRC} // dirname(__FILE__) . '/../..';

# grelout_node(NAME, CONF_LINES...): a started cluster whose database "app"
# has the extension; the relays serve "app".  Its relays are the
# grelout.workers a test sets, whatever the machine's processors:
# grelout.max_workers is 1 unless the test sets it (a later line wins),
# so that a test that counts relays, or their shares, is not changed by
# extra relays added under its backlog (046 and 133 test those).
sub grelout_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'grelout'",
		"grelout.database = 'app'",
		"grelout.max_workers = 1",
		"max_prepared_transactions = 10",
		@conf) . "\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE DATABASE app');
	$node->safe_psql('app', 'CREATE EXTENSION grelout');
	return $node;
}

# wait_until(CODE, TIMEOUT_SECONDS): poll CODE every 50 ms until it returns
# true; returns its last value (false on timeout).
sub wait_until
{
	my ($code, $timeout) = @_;
	$timeout //= 30;
	my $deadline = time() + $timeout;
	while (1)
	{
		my $v = $code->();
		return $v if $v;
		return 0 if time() > $deadline;
		usleep(50_000);
	}
}

# relay_pids(NODE): the pids of the running relays (backend_type
# "grelout relay" in pg_stat_activity), sorted.
sub relay_pids
{
	my ($node) = @_;
	my $out = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'grelout relay' ORDER BY pid");
	return grep { $_ ne '' } split /\n/, $out;
}

# set_conf(NODE, NAME => VALUE, ...): ALTER SYSTEM SET each setting, then
# reload and wait until a new session sees every changed value (a setting
# set to the value it already had is waited for at most 3 s).
sub set_conf
{
	my ($node, %set) = @_;
	my %before;
	for my $name (sort keys %set)
	{
		$before{$name} = $node->safe_psql('postgres', "SELECT current_setting('$name')");
		$node->safe_psql('postgres', "ALTER SYSTEM SET $name = '$set{$name}'");
	}
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	for my $name (sort keys %set)
	{
		wait_until(sub {
			$node->safe_psql('postgres', "SELECT current_setting('$name')") ne $before{$name}
		}, 3);
	}
	# the relays take the SIGHUP on their next turn; give them a moment
	usleep(300_000);
	return;
}

# log_offset(NODE): the current size of the server log, for log_since.
sub log_offset
{
	my ($node) = @_;
	return -s $node->logfile // 0;
}

# log_since(NODE, OFFSET): the server log from OFFSET on.
sub log_since
{
	my ($node, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset // 0);
}

# new_secret(N): a webhook secret, "whsec_" + base64 of N random bytes.
sub new_secret
{
	my ($n) = @_;
	open(my $fh, '<:raw', '/dev/urandom') or die "/dev/urandom: $!";
	read($fh, my $raw, $n) == $n or die "short read of /dev/urandom";
	close $fh;
	return 'whsec_' . encode_base64($raw, '');
}

# start_receiver(): a receiver object; see GreloutTest::Receiver below.
sub start_receiver
{
	return GreloutTest::Receiver->new(@_);
}

# start_oauth_server(%opts): an OAuth2 token server whose other paths are
# a receiver that demands its Bearer tokens; see GreloutTest::OAuthServer.
sub start_oauth_server
{
	return GreloutTest::OAuthServer->new(@_);
}

package GreloutTest::Receiver;

use strict;
use warnings;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep time);

# new(%opts): start test/receiver.py (log => FILE, port => N); script =>
# another script of test/ that takes the same options, args => [its own].
sub new
{
	my ($class, %opts) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port_file = "$dir/port";
	my $script = $opts{script} // 'receiver.py';
	my @cmd = ('/usr/bin/python3', "$src/test/$script", '--port-file', $port_file);
	push @cmd, '--log', $opts{log} if $opts{log};
	push @cmd, '--port', $opts{port} if $opts{port};
	push @cmd, @{ $opts{args} } if $opts{args};
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>', "$dir/receiver.out");
		open(STDERR, '>&', \*STDOUT);
		exec(@cmd) or die "exec failed: $!";
	}
	my $deadline = time() + 20;
	usleep(20_000) while !-s $port_file && time() < $deadline;
	die "$script did not start (see $dir/receiver.out)" unless -s $port_file;
	open(my $fh, '<', $port_file) or die;
	my $port = <$fh>;
	close $fh;
	chomp $port;
	my $self = bless {
		pid => $pid,
		port => $port,
		http => HTTP::Tiny->new(timeout => 30),
	}, $class;
	return $self;
}

sub port { $_[0]{port} }

# url(PATH): the receiver's URL for a path.
sub url
{
	my ($self, $path) = @_;
	return "http://127.0.0.1:$self->{port}$path";
}

sub _get
{
	my ($self, $what) = @_;
	my $r = $self->{http}->get("http://127.0.0.1:$self->{port}/_control/$what");
	die "receiver control failed: $r->{status} $r->{content}" unless $r->{success};
	return decode_json($r->{content});
}

sub _post
{
	my ($self, $what, $obj) = @_;
	my $r = $self->{http}->post("http://127.0.0.1:$self->{port}/_control/$what",
		{ content => encode_json($obj // {}), headers => { 'content-type' => 'application/json' } });
	die "receiver control failed: $r->{status} $r->{content}" unless $r->{success};
	return decode_json($r->{content});
}

# requests([PATH]): every recorded request (hashes with method, path,
# headers (lower-case names), body, received_at), oldest first.
sub requests
{
	my ($self, $path) = @_;
	return $self->_get(defined $path ? "requests?path=$path" : 'requests');
}

# count([PATH]): how many requests were recorded.
sub count
{
	my ($self, $path) = @_;
	return $self->_get(defined $path ? "count?path=$path" : 'count')->{count};
}

# summary([PATH]): compact records (id, attempt, path, received_at,
# peer_port, body), oldest first: cheaper than requests() for thousands of
# messages.
sub summary
{
	my ($self, $path) = @_;
	return $self->_get(defined $path ? "summary?path=$path" : 'summary');
}

# stats([PATH]): {count, distinct_ids, duplicated_ids, max_in_flight}.
sub stats
{
	my ($self, $path) = @_;
	return $self->_get(defined $path ? "stats?path=$path" : 'stats');
}

# order(PATH): the per-key order check of the requests to PATH (see
# test/receiver.py, /_control/order).
sub order
{
	my ($self, $path) = @_;
	return $self->_get("order?path=$path");
}

# script(PATH, [RESPONSES], DEFAULT, [MATCHES]): answer PATH with these
# responses in order, then with DEFAULT; a request whose body contains a
# match's body_contains gets its response first (see test/receiver.py).
sub script
{
	my ($self, $path, $responses, $default, $match) = @_;
	$self->_post('script', { path => $path, responses => $responses // [],
		default => $default, match => $match // [] });
}

sub reset { $_[0]->_post('reset') }

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
}

# At the end of a test its exit status is in $?, which waitpid in stop would
# overwrite with the receiver's (killed by TERM: 15): keep the test's.
sub DESTROY
{
	local $?;
	$_[0]->stop;
}

package GreloutTest::OAuthServer;

# An OAuth2 client credentials token server (POST /token) in front of a
# receiver: every GreloutTest::Receiver method works on its webhook paths,
# whose requests must carry a Bearer token it issued and has neither expired
# nor revoked (others get 401 and are not recorded as requests; see
# unauthorized).  Options: client_id, client_secret (defaults below, the
# secret with bytes that form encoding changes), expires_in (seconds, 3600
# by default), log, port.

use strict;
use warnings;
use JSON::PP;

our @ISA = ('GreloutTest::Receiver');

sub new
{
	my ($class, %opts) = @_;
	my $id = $opts{client_id} // 'grelout-test';
	my $secret = $opts{client_secret} // 's3cret: with/+&= and space';
	my @args = ('--client-id', $id, '--client-secret', $secret);
	push @args, '--expires-in', $opts{expires_in} if defined $opts{expires_in};
	my $self = GreloutTest::Receiver::new($class,
		log => $opts{log}, port => $opts{port},
		script => 'oauth_server.py', args => \@args);
	$self->{client_id} = $id;
	$self->{client_secret} = $secret;
	return $self;
}

sub client_id { $_[0]{client_id} }
sub client_secret { $_[0]{client_secret} }

# token_url(): where the token endpoint is.
sub token_url { $_[0]->url('/token') }

# oauth_json(%extra): the text of a handler's oauth column for this server
# (token_url, client_id, client_secret), with extra members (scope,
# audience) or overrides (a wrong client_secret).
sub oauth_json
{
	my ($self, %extra) = @_;
	return JSON::PP->new->canonical->encode({
		token_url => $self->token_url,
		client_id => $self->{client_id},
		client_secret => $self->{client_secret},
		%extra });
}

sub _oauth
{
	my ($self, $method, $what, $obj) = @_;
	my $url = "http://127.0.0.1:$self->{port}/_oauth/$what";
	my $r = $method eq 'GET'
	  ? $self->{http}->get($url)
	  : $self->{http}->post($url, { content => encode_json($obj // {}),
			headers => { 'content-type' => 'application/json' } });
	die "oauth server control failed: $r->{status} $r->{content}" unless $r->{success};
	return decode_json($r->{content});
}

# oauth_stats(): {token_requests, tokens_issued, tokens_refused,
# webhooks_accepted, webhooks_unauthorized, live_tokens}.
sub oauth_stats { $_[0]->_oauth('GET', 'stats') }

# token_requests(): each token request, oldest first: {at, auth, client_id,
# grant_type, scope, audience, content_type, status, outcome}.
sub token_requests { $_[0]->_oauth('GET', 'token_requests') }

# unauthorized(): each webhook request answered 401: {at, path, reason,
# webhook_id}.
sub unauthorized { $_[0]->_oauth('GET', 'unauthorized') }

# token_config(%conf): how the next token requests are answered: expires_in
# (undef: none), expires_as_string, lifetime, token_type, status (e.g. 503),
# close, delay, body, responses => [{...}, ...] (one-shot, in order); see
# test/oauth_server.py.
sub token_config
{
	my ($self, %conf) = @_;
	return $self->_oauth('POST', 'config', \%conf);
}

# revoke(): revoke every token issued so far; returns how many were live.
sub revoke { $_[0]->_oauth('POST', 'revoke')->{revoked} }

# oauth_reset(): forget tokens, token requests and 401s; the configuration
# returns to the start's.  (reset() forgets the receiver's requests.)
sub oauth_reset { $_[0]->_oauth('POST', 'reset') }

1;
