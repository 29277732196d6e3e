# Metrics where operators look (issue 33, part 2): grelout.metrics() and
# contrib/prometheus/queries.yaml through Debian's prometheus-postgres-exporter.
#
# 1. Three handlers against a live receiver: "ok" answers 204 to its 10
#    messages; "bad" answers 503 (no Retry-After) to its 3 messages, each
#    tried twice (max_attempts 2: a retry, then dead); "slow" answers 429
#    with Retry-After once, then 204, to its one message (a pause).
#    grelout.metrics() counts exactly that per handler: attempts,
#    delivered, retried, dead, pauses; a latency histogram of the
#    deliveries, cumulative, as many as delivered, its sum within what the
#    test waited; the relays' counters add up to the same, and they
#    counted their cycles (none failed) and the time in them; a cycle
#    that waits out its lock_timeout on a locked outbox counts as failed.
#    A fourth handler's breaker (threshold 2) opens: counted once, state 1,
#    each attempt retried or held.  The relays time the settles and the
#    claims of their cycles.
# 1b. (before the breaker) Backlog gauges: two disabled handlers, one taking 4 messages (fanned
#    out), the other those 4 and 3 more (inline): grelout_handler_pending
#    is 4 and 7, grelout_handler_oldest_pending_seconds at least the time
#    waited since the publish; a handler answering 429 with Retry-After 30
#    is paused (grelout_handler_paused 1), its message pending (delayed).
# 2. Who may call it: a role in pg_monitor may, another role may not
#    (both with USAGE on the schema grelout).
# 3. The exporter, run with the queries file as that pg_monitor role,
#    serves the grelout_* series with these values and the histogram's
#    le buckets, _sum and _count, and the backlog gauges; once the
#    disabled handlers are enabled and deliver their backlog, pending is 0
#    in grelout.metrics() and on the exporter; every series the dashboard
#    (contrib/grafana/grelout.json) names is among them.
# 4. If Debian's prometheus is installed: it scrapes the exporter, a
#    recording rule computes the delivery rate per handler, and its query
#    API returns that rule's series for each handler.
use strict;
use warnings;
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Utils;
use FindBin;
use Test::More;
use Time::HiRes qw(time usleep);
use GreloutTest;

my $src = $ENV{GRELOUT_SRC} // "$FindBin::RealBin/../..";


my $recv = start_receiver();
my $node = grelout_node('metrics',
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '200ms'",
	"grelout.retry_max = '1s'",
	"grelout.retry_jitter = 0",
	"grelout.breaker_threshold = 0",
	"grelout.keep_delivered = on");

sub sq { return $node->safe_psql('app', $_[0]); }

sub handler
{
	my ($name, $path, $extra) = @_;
	my $url = $recv->url($path);
	sq("INSERT INTO grelout.handlers (name, topic, url, max_attempts) VALUES ('$name', '$name.t', '$url', "
		  . ($extra // 'NULL') . ")");
}

# metric(NAME, HANDLER[, LE]): the value grelout.metrics() gives
sub metric
{
	my ($name, $handler, $le) = @_;
	my $where = defined $le ? "le = '$le'" : 'le IS NULL';
	return sq("SELECT value FROM grelout.metrics() WHERE database = 'app' AND handler = '$handler'"
		  . " AND metric = '$name' AND $where");
}

ok(wait_until(sub { sq('SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL') ge '1' }, 60),
	'a relay runs');
is(sq("SELECT count(*) FROM grelout.metrics() WHERE handler IS NOT NULL"), '0',
	'no handler has metrics before its first request');

# ---- 1. a known number of deliveries, some failing
$recv->script('/bad', [], { status => 503, body => 'unavailable' });
$recv->script('/slow', [ { status => 429, headers => { 'Retry-After' => '1' } } ], { status => 204 });
handler('ok', '/ok');
handler('bad', '/bad', 2);
handler('slow', '/slow');
my $t0 = time();
sq("SELECT count(outbox_publish('ok.t', jsonb_build_object('n', g))) FROM generate_series(1, 10) g");
sq("SELECT count(outbox_publish('bad.t', jsonb_build_object('n', g))) FROM generate_series(1, 3) g");
sq("SELECT outbox_publish('slow.t', '{}')");
ok(wait_until(sub {
	sq("SELECT count(*) FILTER (WHERE state = 'delivered') = 11 AND count(*) FILTER (WHERE state = 'dead') = 3"
		  . " FROM grelout.outbox") eq 't'
}, 60), 'ten + one delivered, three dead');
my $waited = time() - $t0;
is($recv->count('/ok'), 10, 'the receiver got ten requests for ok');
is($recv->count('/bad'), 6, 'and six for bad (two attempts each)');

# the relay counts an outcome as it decides it; the slot's at the commit
ok(wait_until(sub {
	sq("SELECT sum(value) FROM grelout.metrics() WHERE metric = 'grelout_relay_dead_total'") eq '3'
}, 30), 'the relays counted the three dead deliveries once settled');

my %want = (
	ok => { attempts => 10, delivered => 10, retried => 0, dead => 0, pauses => 0 },
	bad => { attempts => 6, delivered => 0, retried => 3, dead => 3, pauses => 0 },
	slow => { attempts => 2, delivered => 1, retried => 1, dead => 0, pauses => 1 });
for my $h (sort keys %want)
{
	for my $c (sort keys %{ $want{$h} })
	{
		is(metric("grelout_handler_${c}_total", $h), $want{$h}{$c}, "metrics(): $h $c = $want{$h}{$c}");
	}
	is(metric('grelout_handler_in_flight', $h), '0', "metrics(): $h has nothing in flight");
	is(metric('grelout_handler_breaker_state', $h), '0', "metrics(): $h breaker closed (0)");
	is(metric('grelout_delivery_latency_seconds_count', $h), $want{$h}{delivered},
		"metrics(): $h latency count = its deliveries");
	is(metric('grelout_delivery_latency_seconds_bucket', $h, '+Inf'), $want{$h}{delivered},
		"metrics(): $h +Inf bucket = its deliveries");
}

my @buckets = split /\n/, sq("SELECT le || '|' || value FROM grelout.metrics()"
	  . " WHERE handler = 'ok' AND metric = 'grelout_delivery_latency_seconds_bucket'"
	  . " ORDER BY le::float8");
is(scalar @buckets, 13, 'thirteen latency buckets, +Inf included');
my ($prev, $monotone) = (0, 1);
for (@buckets)
{
	my (undef, $v) = split /\|/;
	$monotone = 0 if $v < $prev;
	$prev = $v;
}
ok($monotone, 'the buckets are cumulative (never decreasing)');
is((split /\|/, $buckets[0])[0], '0.005', 'the first bound is 5 ms, in seconds');
my $sum = metric('grelout_delivery_latency_seconds_sum', 'ok');
ok($sum > 0 && $sum <= 10 * ($waited + 1),
	"latency sum of ok ($sum s) is positive and within what the test waited ($waited s a delivery)");
my $slow_sum = metric('grelout_delivery_latency_seconds_sum', 'slow');
ok($slow_sum >= 0.9, "slow's delivery waited for its Retry-After: latency $slow_sum s");
is(metric('grelout_delivery_latency_seconds_bucket', 'slow', '0.5'), '0',
	"slow's delivery is not in the 0.5 s bucket");

is(sq("SELECT sum(value) FROM grelout.metrics() WHERE metric = 'grelout_relay_delivered_total'"), '11',
	'the relays delivered eleven');
is(sq("SELECT sum(value) FROM grelout.metrics() WHERE metric = 'grelout_relay_retried_total'"), '4',
	'and retried four');
is(sq("SELECT bool_and(value > 0) FROM grelout.metrics() WHERE metric IN"
	  . " ('grelout_relay_cycles_total', 'grelout_relay_cycle_seconds_total')"), 't',
	'the relays counted their cycles and the time they took');
is(sq("SELECT sum(value) FILTER (WHERE metric = 'grelout_relay_settle_seconds_total') > 0"
	  . " AND sum(value) FILTER (WHERE metric = 'grelout_relay_claim_seconds_total') > 0"
	  . " AND sum(value) FILTER (WHERE metric IN ('grelout_relay_settle_seconds_total',"
	  . "   'grelout_relay_claim_seconds_total'))"
	  . "  <= sum(value) FILTER (WHERE metric = 'grelout_relay_cycle_seconds_total')"
	  . " FROM grelout.metrics()"), 't',
	'and of that time, the settles\' and the claims\' (positive, within the cycles\')');
is(sq("SELECT sum(value) FROM grelout.metrics() WHERE metric = 'grelout_relay_cycle_errors_total'"), '0',
	'and none of them failed');
is(sq("SELECT count(*) FROM grelout.metrics() WHERE metric = 'grelout_relay_up' AND value = 1"),
	sq("SELECT count(*) FROM grelout.relays WHERE pid IS NOT NULL"), 'one grelout_relay_up a running relay');

# ---- 1b. the backlog gauges
# held (held.t) and held2 (held.#), both disabled: 4 messages to held.t fan
# out to both, 3 to held.x go inline to held2
is(metric('grelout_handler_pending', 'ok'), '0', 'metrics(): ok has nothing pending');
is(metric('grelout_handler_oldest_pending_seconds', 'ok'), '0', 'metrics(): so no oldest pending age');
sq("INSERT INTO grelout.handlers (name, topic, url, enabled) VALUES"
	  . " ('held', 'held.t', '" . $recv->url('/held') . "', false),"
	  . " ('held2', 'held.#', '" . $recv->url('/held2') . "', false)");
my $tb0 = time();
sq("SELECT count(outbox_publish('held.t', jsonb_build_object('n', g))) FROM generate_series(1, 4) g");
sq("SELECT count(outbox_publish('held.x', jsonb_build_object('n', g))) FROM generate_series(1, 3) g");
my $tb1 = time();
usleep(2_000_000);
ok(wait_until(sub {
	metric('grelout_handler_pending', 'held') eq '4' && metric('grelout_handler_pending', 'held2') eq '7'
}, 30), 'metrics(): pending 4 for held (fanned out), 7 for held2 (fanned out and inline)')
  or diag(sq("SELECT handler, metric, value FROM grelout.metrics() WHERE metric LIKE '%pending%'"));
for my $h (qw(held held2))
{
	my $before = time();
	my $age = metric('grelout_handler_oldest_pending_seconds', $h);
	my $after = time();
	ok($age >= $before - $tb1 - 0.05 && $age <= $after - $tb0 + 0.05,
		sprintf('metrics(): %s oldest pending %.3f s, as long as since its publish (%.3f to %.3f s)',
			$h, $age, $before - $tb1, $after - $tb0));
}
is($recv->count('/held') + $recv->count('/held2'), 0, 'the disabled handlers got nothing');

# a handler paused by Retry-After (retry_max allows it): paused, its
# message pending, delayed for the retry
GreloutTest::set_conf($node, 'grelout.retry_max' => '60s');
$recv->script('/pause', [], { status => 429, headers => { 'Retry-After' => '30' } });
handler('pause', '/pause');
sq("SELECT outbox_publish('pause.t', '{}')");
ok(wait_until(sub {
	metric('grelout_handler_paused', 'pause') eq '1' && metric('grelout_handler_pending', 'pause') eq '1'
}, 30), 'metrics(): a handler answering 429 with Retry-After is paused, its message pending');
is(metric('grelout_handler_paused', 'ok'), '0', 'metrics(): ok is not paused');
is(metric('grelout_handler_pauses_total', 'pause'), '1', 'metrics(): the pause is counted');
# (the pause runs its 30 s; later retries are capped at 1 s again)
GreloutTest::set_conf($node, 'grelout.retry_max' => '1s');

# a breaker: threshold 2, an endpoint that answers 500: the second failure
# opens it (counted, state 1), the requests then in flight are held
GreloutTest::set_conf($node, 'grelout.breaker_threshold' => 2, 'grelout.breaker_cooldown' => '60s');
$recv->script('/brk', [], { status => 500, delay => 0.3 });
handler('brk', '/brk');
sq("SELECT count(outbox_publish('brk.t', jsonb_build_object('n', g))) FROM generate_series(1, 4) g");
ok(wait_until(sub { metric('grelout_handler_breaker_state', 'brk') eq '1' }, 30),
	'metrics(): brk breaker_state 1 (open) after its failures');
is(metric('grelout_handler_breaker_openings_total', 'brk'), '1', 'metrics(): brk breaker opened once');
# (an attempt is counted just after its request leaves in_flight: poll)
my %brk;
ok(wait_until(sub {
	%brk = map { $_ => metric("grelout_handler_$_", 'brk') } qw(in_flight attempts_total retried_total held_total);
	$brk{in_flight} == 0 && $brk{attempts_total} == $brk{retried_total} + $brk{held_total}
	  && $brk{attempts_total} == $recv->count('/brk');
}, 30), 'metrics(): then nothing of brk in flight, each attempt retried or held, as many as the receiver got')
  or diag(explain \%brk);
ok($brk{retried_total} >= 2, "metrics(): the failures that opened it were retried ($brk{retried_total})");

# a cycle that cannot lock the outbox (lock_timeout) is rolled back: counted
my $locker = $node->background_psql('app');
$locker->query_safe('BEGIN; LOCK TABLE grelout.outbox IN ACCESS EXCLUSIVE MODE');
ok(wait_until(sub {
	sq("SELECT sum(value) FROM grelout.metrics() WHERE metric = 'grelout_relay_cycle_errors_total'") > 0
}, 30), 'a cycle that waited out its lock_timeout counts in grelout_relay_cycle_errors_total');
$locker->query_safe('ROLLBACK');
$locker->quit;

# drain_held: enable held and held2; their backlog is delivered, and their
# pending gauges go to 0 (at most a second or a poll interval later)
my $drained = 0;
sub drain_held
{
	return if $drained++;
	sq("UPDATE grelout.handlers SET enabled = true WHERE name IN ('held', 'held2')");
	ok(wait_until(sub { $recv->count('/held') == 4 && $recv->count('/held2') == 7 }, 60),
		'enabled, held and held2 deliver their backlog');
	ok(wait_until(sub {
		metric('grelout_handler_pending', 'held') eq '0' && metric('grelout_handler_pending', 'held2') eq '0'
	}, 30), 'metrics(): then nothing pending for held and held2');
	is(metric('grelout_handler_oldest_pending_seconds', 'held2'), '0', 'metrics(): no oldest pending age');
}

# ---- 2. who may call it
# (as README says: a role in pg_monitor, given USAGE on the schema)
sq("CREATE ROLE watcher LOGIN IN ROLE pg_monitor");
sq("CREATE ROLE nobody LOGIN");
sq("GRANT USAGE ON SCHEMA grelout TO watcher, nobody");
is($node->safe_psql('app', "SELECT count(*) > 0 FROM grelout.metrics()", extra_params => [ '-U', 'watcher' ]),
	't', 'a role in pg_monitor may call grelout.metrics()');
my ($ret, $out, $err) = $node->psql('app', "SELECT count(*) FROM grelout.metrics()",
	extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for function metrics/, 'a role not in pg_monitor may not');

# ---- 3. prometheus-postgres-exporter with contrib/prometheus/queries.yaml
my $exporter = '/usr/bin/prometheus-postgres-exporter';
my %series;

# parse_scrape(BODY): name{labels} value: every sample of a scrape, into %series
sub parse_scrape
{
	for my $line (split /\n/, $_[0])
	{
		next if $line =~ /^#/ || $line !~ /^(\w+)(?:\{(.*)\})?\s+(\S+)$/;
		my ($name, $labels, $value) = ($1, $2 // '', $3);
		my %l = $labels =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
		push @{ $series{$name} }, { labels => \%l, value => $value };
	}
}
SKIP:
{
	skip 'prometheus-postgres-exporter is not installed (scripts/deps)', 1 unless -x $exporter;

	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my ($eout, $eerr) = ('', '');
	local $ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d dbname=app user=watcher sslmode=disable',
		$node->host, $node->port);
	my $h = IPC::Run::start([ $exporter, "--extend.query-path=$src/contrib/prometheus/queries.yaml",
			'--disable-default-metrics', '--disable-settings-metrics',
			'--no-collector.database', '--no-collector.bgwriter',
			"--web.listen-address=127.0.0.1:$port" ], '>', \$eout, '2>', \$eerr);
	my $http = HTTP::Tiny->new(timeout => 10);
	my $body;
	ok(wait_until(sub {
		my $r = $http->get("http://127.0.0.1:$port/metrics");
		$body = $r->{content} if $r->{success};
		defined $body && $body =~ /^grelout_handler_delivered_total/m;
	}, 30), 'the exporter serves grelout_* series') or diag("exporter: $eerr");
	$body //= '';

	parse_scrape($body);
	# sample(NAME, LABEL => VALUE...): the value of the one matching sample
	my $sample = sub {
		my ($name, %match) = @_;
		my @m = grep {
			my $s = $_;
			!grep { ($s->{labels}{$_} // '') ne $match{$_} } keys %match
		} @{ $series{$name} // [] };
		return @m == 1 ? $m[0]{value} : scalar(@m) . ' samples';
	};
	like($body, qr/^pg_exporter_last_scrape_error 0$/m, 'the scrape ran every query without error')
	  or diag($eerr);
	for my $h (sort keys %want)
	{
		for my $c (sort keys %{ $want{$h} })
		{
			is($sample->("grelout_handler_${c}_total", database => 'app', handler => $h), $want{$h}{$c},
				"exporter: grelout_handler_${c}_total{handler=\"$h\"} = $want{$h}{$c}");
		}
		is($sample->('grelout_delivery_latency_seconds_count', handler => $h), $want{$h}{delivered},
			"exporter: grelout_delivery_latency_seconds_count{handler=\"$h\"}");
		is($sample->('grelout_delivery_latency_seconds_bucket', handler => $h, le => '+Inf'),
			$want{$h}{delivered}, "exporter: grelout_delivery_latency_seconds_bucket{le=\"+Inf\",handler=\"$h\"}");
		is($sample->('grelout_handler_breaker_state', handler => $h), 0,
			"exporter: grelout_handler_breaker_state{handler=\"$h\"} = 0");
	}
	is(scalar(grep { $_->{labels}{handler} eq 'ok' } @{ $series{grelout_delivery_latency_seconds_bucket} // [] }),
		13, 'exporter: thirteen le buckets for ok');
	is($sample->('grelout_delivery_latency_seconds_bucket', handler => 'ok', le => '0.005'),
		metric('grelout_delivery_latency_seconds_bucket', 'ok', '0.005'),
		'exporter: the 5 ms bucket as metrics() has it');
	like($body, qr/^# TYPE grelout_delivery_latency_seconds histogram$/m, 'exporter: typed histogram');
	like($body, qr/^# TYPE grelout_handler_delivered_total counter$/m, 'exporter: counters typed counter');
	my $relays = 0;
	$relays += $_->{value} for @{ $series{grelout_relay_delivered_total} // [] };
	is($relays, 11, 'exporter: grelout_relay_delivered_total adds up to eleven');
	is($sample->('grelout_handler_breaker_state', handler => 'brk'), 1,
		'exporter: grelout_handler_breaker_state{handler="brk"} = 1 (open)');
	is($sample->('grelout_handler_breaker_openings_total', handler => 'brk'), 1,
		'exporter: grelout_handler_breaker_openings_total{handler="brk"} = 1');
	ok(@{ $series{grelout_relay_cycles_total} // [] } && !grep({ $_->{value} <= 0 } @{ $series{grelout_relay_cycles_total} }),
		'exporter: grelout_relay_cycles_total, positive for every relay');
	ok(@{ $series{grelout_relay_claim_seconds_total} // [] } && @{ $series{grelout_relay_settle_seconds_total} // [] },
		'exporter: grelout_relay_claim_seconds_total and grelout_relay_settle_seconds_total');

	# the backlog gauges, then their drain
	is($sample->('grelout_handler_pending', handler => 'held'), 4, 'exporter: grelout_handler_pending{handler="held"} = 4');
	is($sample->('grelout_handler_pending', handler => 'held2'), 7, 'exporter: grelout_handler_pending{handler="held2"} = 7');
	is($sample->('grelout_handler_pending', handler => 'ok'), 0, 'exporter: grelout_handler_pending{handler="ok"} = 0');
	my $eage = $sample->('grelout_handler_oldest_pending_seconds', handler => 'held2');
	ok($eage =~ /^[0-9.e+-]+$/ && $eage >= 2 - 0.05,
		"exporter: grelout_handler_oldest_pending_seconds{handler=\"held2\"} = $eage, past the 2 s waited");
	is($sample->('grelout_handler_paused', handler => 'pause'), 1, 'exporter: grelout_handler_paused{handler="pause"} = 1');
	like($body, qr/^# TYPE grelout_handler_pending gauge$/m, 'exporter: pending typed gauge');
	drain_held();
	ok(wait_until(sub {
		my $r = $http->get("http://127.0.0.1:$port/metrics");
		return 0 unless $r->{success};
		%series = ();
		parse_scrape($r->{content});
		$sample->('grelout_handler_pending', handler => 'held') eq '0'
		  && $sample->('grelout_handler_pending', handler => 'held2') eq '0';
	}, 30), 'exporter: then grelout_handler_pending is 0 for held and held2');

	# every series the dashboard names is served
	my $dash = decode_json(slurp_file("$src/contrib/grafana/grelout.json"));
	my @exprs;
	my $walk;
	$walk = sub {
		my ($x) = @_;
		if (ref $x eq 'HASH')
		{
			push @exprs, $x->{expr} if defined $x->{expr} && !ref $x->{expr};
			$walk->($_) for values %$x;
		}
		elsif (ref $x eq 'ARRAY') { $walk->($_) for @$x }
	};
	$walk->($dash);
	ok(@exprs >= 5, scalar(@exprs) . ' expressions in the dashboard');
	my @missing;
	for my $e (@exprs)
	{
		my @names = $e =~ /\b(grelout_\w+)/g;
		push @missing, "$e (names no grelout series)" unless @names;
		push @missing, grep { !$series{$_} } @names;
	}
	is(join(', ', @missing), '', 'every series the dashboard names is served by the exporter');

	# ---- 4. prometheus: scrape, recording rule, query API
	SKIP:
	{
		my $prom = '/usr/bin/prometheus';
		skip 'prometheus is not installed (scripts/deps)', 2 unless -x $prom;
		my $dir = PostgreSQL::Test::Utils::tempdir();
		my $pport = PostgreSQL::Test::Cluster::get_free_port();
		open(my $fh, '>', "$dir/rules.yml") or die;
		print $fh <<'EOF';
groups:
  - name: grelout
    interval: 1s
    rules:
      - record: handler:grelout_handler_delivered:rate1m
        expr: sum by (database, handler) (rate(grelout_handler_delivered_total[1m]))
EOF
		close $fh;
		open($fh, '>', "$dir/prometheus.yml") or die;
		print $fh <<"EOF";
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $dir/rules.yml
scrape_configs:
  - job_name: grelout
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
		close $fh;
		my ($pout, $perr) = ('', '');
		my $p = IPC::Run::start([ $prom, "--config.file=$dir/prometheus.yml",
				"--storage.tsdb.path=$dir/data", "--web.listen-address=127.0.0.1:$pport" ],
			'>', \$pout, '2>', \$perr);
		# deliver more while prometheus watches, so the rate is not zero
		my $more = sub { sq("SELECT count(outbox_publish('ok.t', '{}')) FROM generate_series(1, 5)") };
		my $result;
		ok(wait_until(sub {
			$more->();
			my $r = $http->get("http://127.0.0.1:$pport/api/v1/query?query=handler:grelout_handler_delivered:rate1m");
			return 0 unless $r->{success};
			my $j = eval { decode_json($r->{content}) } or return 0;
			$result = $j->{data}{result};
			my ($ok) = grep { $_->{metric}{handler} eq 'ok' } @{ $result // [] };
			return $ok && $ok->{value}[1] > 0;
		}, 90), 'prometheus: the recording rule gives a positive delivery rate for ok')
		  or diag("prometheus: $perr");
		is(join(',', sort map { $_->{metric}{handler} } @{ $result // [] }), 'bad,brk,held,held2,ok,pause,slow',
			'prometheus: one rate series a handler');
		$p->signal('TERM');
		$p->finish;
	}

	$h->signal('TERM');
	$h->finish;
}

# without the exporter, the drain is still checked
drain_held();

$node->stop;
$recv->stop;
done_testing();
