
# GreloutTest: helpers shared by grelout's Perl TAP tests (test/t/*.pl).
#
# A cluster with the library preloaded and the extension created, a
# scriptable webhook receiver (test/receiver.py) on loopback, and polling
# with a deadline (deliveries happen after COMMIT, never in the test's own
# transaction).
package GreloutTest;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(grelout_node start_receiver wait_until psql_ok);

my $src = $ENV{GRELOUT_SRC} // dirname(__FILE__) . '/../..';

# grelout_node(NAME, CONF_LINES...): a started cluster whose database "app"
# has the extension; the relays serve "app".
sub grelout_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'grelout'",
		"grelout.database = 'app'",
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

# start_receiver(): a receiver object; see GreloutTest::Receiver below.
sub start_receiver
{
	return GreloutTest::Receiver->new(@_);
}

package GreloutTest::Receiver;

use strict;
use warnings;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep time);

sub new
{
	my ($class, %opts) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port_file = "$dir/port";
	my @cmd = ('/usr/bin/python3', "$src/test/receiver.py", '--port-file', $port_file);
	push @cmd, '--log', $opts{log} if $opts{log};
	push @cmd, '--port', $opts{port} if $opts{port};
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
	die "receiver did not start" unless -s $port_file;
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

# script(PATH, [RESPONSES], DEFAULT): answer PATH with these responses in
# order, then with DEFAULT (see test/receiver.py for the keys).
sub script
{
	my ($self, $path, $responses, $default) = @_;
	$self->_post('script', { path => $path, responses => $responses // [],
		default => $default });
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

sub DESTROY { $_[0]->stop }

1;
