#!/usr/bin/perl
# test/tap-count.pl: run TAP test files with TAP::Harness and print one line
# "TAPCOUNT <passed> <failed>" counting individual assertions, so that the
# suite runner can add them up.  A file that dies or plans more tests than
# it ran counts as one failure more.
#
#   tap-count.pl [--psql DB] [--lib DIR]... FILE...
use strict;
use warnings;
use Getopt::Long;
use TAP::Harness;

my ($psql_db, @libs);
GetOptions('psql=s' => \$psql_db, 'lib=s' => \@libs) or die "usage\n";
my %args = (verbosity => 0, lib => \@libs, color => 0, timer => 1);
if (defined $psql_db)
{
	$args{exec} = [ 'psql', '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1',
		'-d', $psql_db, '-f' ];
}
my $agg = TAP::Harness->new(\%args)->runtests(@ARGV);
my $passed = scalar($agg->passed);
my $failed = scalar($agg->failed);
for my $file ($agg->descriptions)
{
	my ($parser) = $agg->parsers($file);
	$failed++ if $parser->has_problems && !$parser->failed;
}
print "TAPCOUNT $passed $failed\n";
exit($agg->all_passed ? 0 : 1);
