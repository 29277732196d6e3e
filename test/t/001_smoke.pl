# A message published in a committed transaction reaches its webhook with
# the contract's headers; one from a rolled-back transaction never does.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('smoke');
my $url = $recv->url('/smoke');
$node->safe_psql('app', "INSERT INTO grelout.handlers (topic, url) VALUES ('smoke', '$url')");

$node->safe_psql('app', "BEGIN; SELECT outbox_publish('smoke', '{\"n\": 0}'); ROLLBACK;");
my $id = $node->safe_psql('app', "SELECT outbox_publish('smoke', '{\"n\": 1}', key => 'k')");
ok(wait_until(sub { $recv->count('/smoke') >= 1 }, 30), 'committed message delivered');
my $reqs = $recv->requests('/smoke');
is(scalar @$reqs, 1, 'exactly one request: the rolled-back message was not sent');
is($reqs->[0]{headers}{'webhook-id'}, $id, 'webhook-id is the message id');
is($reqs->[0]{body}, '{"n": 1}', 'body is the payload');
ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM grelout.outbox') eq '0' }, 10),
	'delivered row deleted');
$node->stop;
done_testing();
