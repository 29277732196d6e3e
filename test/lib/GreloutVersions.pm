
# GreloutVersions: what test/versions/*.pl share, the checks made on a
# cluster that received a grelout 1.1 database from PostgreSQL 15, by
# pg_dumpall and a restore (PostgreSQL 17, 18, 19) or by pg_upgrade (15):
# every delivery that was not delivered is delivered at least once, the
# ordered key in order once its dead head is redriven, and every handler
# still works (signed with its secrets, captures still publish).
#
# The backlog is described by the file source.pl writes (JSON): the
# receiver's port (the handlers' URLs name it), the handlers as text, the
# undelivered deliveries, the ids of the delayed message and of the
# ordered key's head, the publisher's role oid and the secrets.
package GreloutVersions;

use strict;
use warnings;

use Digest::SHA qw(hmac_sha256);
use Exporter 'import';
use JSON::PP;
use MIME::Base64 qw(decode_base64 encode_base64);
use Test::More;
use GreloutTest;

our @EXPORT = qw(read_backlog write_backlog handlers_sql undelivered_sql
  check_delivers signature_ok);

# The handlers, every column of 1.1 (those 1.2 adds, all NULL for these
# handlers, are left out: the same text before and after the update), in a
# stable order, as text.
sub handlers_sql
{
	return q{SELECT string_agg(ROW(h.topic, h.url, h.headers, h.secret, h.previous_secret,
		h.timeout, h.max_attempts, h.enabled, h.name, h.filter, h.max_in_flight,
		h.max_per_second, h.ordered, h.on_dead)::text, E'\n' ORDER BY name)
		FROM grelout.handlers h};
}

# Every delivery not yet delivered: message, handler, state, key, body.
sub undelivered_sql
{
	return q{SELECT coalesce(json_agg(json_build_object('id', d.message_id, 'handler', d.handler,
		'state', d.state, 'key', o.key, 'payload', o.payload) ORDER BY d.message_id, d.handler), '[]')
		FROM grelout.deliveries d JOIN grelout.outbox o ON o.id = d.message_id
		WHERE d.state <> 'delivered'};
}

# write_backlog(FILE, HASH) and read_backlog(FILE): the backlog's description.
sub write_backlog
{
	my ($file, $b) = @_;
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh JSON::PP->new->canonical->pretty->encode($b);
	close $fh;
	chmod 0644, $file;
}

sub read_backlog
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "$file: $!";
	local $/;
	my $b = decode_json(<$fh>);
	close $fh;
	return $b;
}

# signature_ok(REQUEST, SECRET): the request carries a Standard Webhooks
# signature made with SECRET ("whsec_" + base64 of the key).
sub signature_ok
{
	my ($req, $secret) = @_;
	my $h = $req->{headers};
	my $key = decode_base64(substr($secret, 6));
	my $want = 'v1,' . encode_base64(hmac_sha256(
		"$h->{'webhook-id'}.$h->{'webhook-timestamp'}.$req->{body}", $key), '');
	return scalar grep { $_ eq $want } split / /, $h->{'webhook-signature'} // '';
}

# check_delivers(NODE, RECEIVER, BACKLOG, LABEL, SAME_PUBLISHER): on a
# cluster that now holds the backlog (its receiver up on the port the
# handlers name), check that the handlers came back as they were, let every
# waiting delivery go (enable the paused handler, make the delayed message
# due, redrive the dead ones and the ordered key), and check that each was
# received at least once, the ordered key in order behind its head, and
# that new messages to every handler are delivered, signed, and a captured
# write published.  With SAME_PUBLISHER (pg_upgrade, or a dump of 1.2,
# which names roles), the publishing role's messages are still its own: a
# dedup key returns the restored message, and its new message of the
# ordered key waits behind the restored ones.  A dump of 1.1 stores role
# oids, which name other roles (or none) in another cluster (README,
# "Upgrading across PostgreSQL versions").
sub check_delivers
{
	my ($node, $recv, $b, $label, $same_publisher) = @_;
	my $last = $same_publisher ? 5 : 4;
	my $sq = sub { return $node->safe_psql('app', $_[0]) };

	is($sq->(handlers_sql()), $b->{handlers},
		"$label: the handlers, every column (urls, secrets, settings), as they were");
	# (the relays run: a delivery may be delivered, and kept, already)
	my %there = map { ($_ => 1) } split /\n/,
	  $sq->(q{SELECT message_id || ' ' || handler FROM grelout.deliveries});
	my @missing = grep { !$there{"$_->{id} $_->{handler}"} } @{ $b->{deliveries} };
	is(scalar(@missing), 0, "$label: every undelivered delivery is in the outbox (" .
		scalar(@{ $b->{deliveries} }) . ')')
	  or diag(explain(\@missing));
	is($sq->(qq{SELECT extract(epoch FROM available_at) FROM grelout.outbox WHERE id = '$b->{delayed}'}),
		$b->{delayed_at}, "$label: the delayed message keeps its due time");

	# the publisher is still the same role: its dedup keys and its ordered
	# key hold for the messages it published before
	if ($same_publisher)
	{
		is($sq->(q{SET ROLE app_pub; SELECT outbox_publish('orders', '{"again": true}', dedup_key => 'delayed')}),
			$b->{delayed}, "$label: the publisher's dedup key returns its restored message");
		$sq->(q{SET ROLE app_pub; SELECT outbox_publish('ord', '{"key": "k1", "n": 5}', key => 'k1')});
	}

	# what may go goes; the blocked key waits behind its dead head
	$sq->(q{SET ROLE app_pub; SELECT outbox_publish('orders', '{"new": true}')});
	my %due;
	my $running = sub {
		%due = map { ("$_->{id} /$_->{handler}" => 1) }
		  grep { $_->{handler} ne 'ord' && $_->{handler} ne 'paused' && $_->{state} ne 'dead'
			  && $_->{id} ne $b->{delayed} } @{ $b->{deliveries} };
		for my $r (@{ $recv->summary() })
		{
			delete $due{"$r->{id} $r->{path}"};
		}
		return !%due;
	};
	ok(wait_until($running, 150), "$label: every due delivery is received (leases held at the dump included)")
	  or diag(join("\n", 'not received:', sort(keys %due),
		$sq->(q{SELECT string_agg(d::text, E'\n' ORDER BY message_id, handler) FROM grelout.deliveries d}),
		$sq->(q{SELECT string_agg(r::text, E'\n') FROM grelout.relays r})));
	ok(wait_until(sub { $recv->count('/orders') >= 1 }, 60), "$label: a new message to the signed handler");
	is($recv->count('/ord'), 0, "$label: the ordered key still waits behind its dead head");

	# let the rest go
	$sq->(q{UPDATE grelout.handlers SET enabled = true WHERE name = 'paused'});
	$sq->(qq{UPDATE grelout.outbox SET available_at = now() WHERE id = '$b->{delayed}'});
	is($sq->(q{SELECT outbox_redrive('dead')}), '1', "$label: the dead message is redriven");
	is($sq->(q{SELECT outbox_redrive('ord')}), '1', "$label: the ordered key's dead head is redriven");
	my %want = map { ("$_->{id} /$_->{handler}" => 1) } @{ $b->{deliveries} };
	ok(wait_until(sub {
		my %w = %want;
		delete $w{"$_->{id} $_->{path}"} for @{ $recv->summary() };
		return !%w;
	}, 120), "$label: every message of the backlog is received at least once");
	ok(wait_until(sub { ($recv->order('/ord')->{delivered}{k1} // 0) == $last }, 60),
		"$label: the ordered key is delivered" . ($same_publisher ? ', the new message last' : ''));
	my $ord = $recv->order('/ord');
	is("$ord->{out_of_order} $ord->{overlaps}", '0 0', "$label: the ordered key arrived in order, one at a time")
	  or diag(explain($ord));

	# every handler still works: new messages, signed with both secrets
	$sq->(q{SET ROLE app_pub;
		SELECT outbox_publish(t, jsonb_build_object('after', t))
		FROM unnest(ARRAY['slow', 'dead', 'paused', 'fan.z']) AS t});
	$sq->(q{INSERT INTO items VALUES (100, 'after')});
	for my $path ('/slow', '/dead', '/paused', '/fan-a', '/fan-b', '/items')
	{
		ok(wait_until(sub { grep { $_->{body} =~ /"after"/ } @{ $recv->requests($path) } }, 60),
			"$label: a new message reaches $path");
	}
	my @orders = @{ $recv->requests('/orders') };
	ok(@orders > 1, "$label: orders received its messages");
	is(scalar(grep { signature_ok($_, $b->{secret}) && signature_ok($_, $b->{previous_secret}) } @orders),
		scalar(@orders), "$label: every request to orders is signed with both secrets");
	my ($item) = grep { $_->{body} =~ /"after"/ } @{ $recv->requests('/items') };
	like($item->{body} // '', qr/"id": ?100/, "$label: the capture trigger published the inserted row");
	return;
}

1;
