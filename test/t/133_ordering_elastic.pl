# Per-key ordering with elastic relays (issue 32): test 130's whole scenario
# (8 publishing sessions, a relay killed with SIGKILL mid-run, then the head
# of line; the endpoint here healthy and 50 ms away, see 130) with one relay
# (grelout.workers) and up to four (grelout.max_workers) that the launcher
# adds under the backlog and retires once it is gone: every key's messages
# arrive in commit order, never two of a key at once, none lost.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;
# loaded here, at compile time: their INIT blocks (ports, log files) must run
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

our $elastic_relays = 1;
my $file = File::Spec->rel2abs(dirname(__FILE__) . '/130_ordering.pl');
my $done = do $file;
die "$file: $@" if $@;
die "$file: $!" unless defined $done;
