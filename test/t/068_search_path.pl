# search_path (issue 29): the relay's own statements, the capture triggers
# and the handler triggers resolve no operator or function through a
# search_path that a non-superuser set.  The owner of database "app", not a
# superuser, plants in a schema of its own operators and functions that
# log current_user (and return the real result), and puts that schema
# first, before pg_catalog, for the whole database (ALTER DATABASE ... SET
# search_path, which the relays' sessions read too) and, by an
# administrator, for the role that edits the handlers (ALTER ROLE).  Then
# messages are published, captured, routed (inline, fan-out, ordered),
# claimed, delivered, failed, retried, dead-lettered, redriven and purged;
# a breaker opens and the relay disables its handler; delivered messages
# are purged by the relay's retention; the editor updates, disables,
# enables, deletes and truncates handlers.  The log stays empty.  (The
# statements of the test itself name pg_catalog's operators explicitly,
# or run under a search_path of their own.)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use GreloutTest;

my $recv = start_receiver();
my $node = grelout_node('search_path',
	"grelout.workers = 1",
	"grelout.poll_interval = '200ms'",
	"grelout.retry_base = '100ms'",
	"grelout.retry_max = '1s'",
	"grelout.retry_jitter = 0",
	"grelout.breaker_threshold = 5",
	"grelout.breaker_cooldown = '1s'",
	"grelout.disable_after = '2s'",
	"grelout.keep_delivered = '2s'");

# sq(SQL): as the superuser, under a path of the test's own
sub sq
{
	return $node->safe_psql('app', "SET search_path = pg_catalog, public;\n$_[0]");
}

# as(ROLE, SQL): SQL as ROLE, under the path its role or database sets
sub as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('app', $sql, extra_params => [ '-U', $role ]);
}

sub calls { return sq('SELECT count(*) FROM evil.calls'); }

sq(q{
	CREATE ROLE app_owner LOGIN;
	CREATE ROLE editor LOGIN;
	ALTER DATABASE app OWNER TO app_owner;
	GRANT USAGE ON SCHEMA grelout TO app_owner, editor;
	GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON grelout.handlers TO editor;
	GRANT EXECUTE ON FUNCTION outbox_publish(text, jsonb, text, jsonb, interval, text),
		outbox_message_status(uuid), outbox_redrive(text, text, uuid),
		outbox_purge(interval, text, boolean, uuid),
		grelout.capture(regclass, text, text[], text[]), grelout.uncapture(regclass)
		TO app_owner;
});

# the database owner's schema: a log, and look-alikes that write to it
as('app_owner', q{
	CREATE SCHEMA evil;
	GRANT USAGE ON SCHEMA evil TO PUBLIC;
	CREATE TABLE evil.calls (who name, what text, at timestamptz DEFAULT pg_catalog.now());
	GRANT INSERT ON evil.calls TO PUBLIC;
	CREATE FUNCTION evil.hit(what text) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO evil.calls (who, what) VALUES (current_user, what);
	END $$;
	DO $plant$
	DECLARE
		o record;
	BEGIN
		FOR o IN SELECT * FROM (VALUES
			('=', 'text', 'text', 'texteq', 'boolean'),
			('<>', 'text', 'text', 'textne', 'boolean'),
			('||', 'text', 'text', 'textcat', 'text'),
			('=', 'uuid', 'uuid', 'uuid_eq', 'boolean'),
			('<>', 'uuid', 'uuid', 'uuid_ne', 'boolean'),
			('=', 'oid', 'oid', 'oideq', 'boolean'),
			('<>', 'oid', 'oid', 'oidne', 'boolean'),
			('=', 'integer', 'integer', 'int4eq', 'boolean'),
			('<>', 'integer', 'integer', 'int4ne', 'boolean'),
			('<', 'integer', 'integer', 'int4lt', 'boolean'),
			('>', 'integer', 'integer', 'int4gt', 'boolean'),
			('>=', 'integer', 'integer', 'int4ge', 'boolean'),
			('=', 'bigint', 'bigint', 'int8eq', 'boolean'),
			('<>', 'bigint', 'bigint', 'int8ne', 'boolean'),
			('<', 'bigint', 'bigint', 'int8lt', 'boolean'),
			('>', 'bigint', 'bigint', 'int8gt', 'boolean'),
			('+', 'bigint', 'bigint', 'int8pl', 'bigint'),
			('=', 'timestamptz', 'timestamptz', 'timestamptz_eq', 'boolean'),
			('<>', 'timestamptz', 'timestamptz', 'timestamptz_ne', 'boolean'),
			('<', 'timestamptz', 'timestamptz', 'timestamptz_lt', 'boolean'),
			('<=', 'timestamptz', 'timestamptz', 'timestamptz_le', 'boolean'),
			('>', 'timestamptz', 'timestamptz', 'timestamptz_gt', 'boolean'),
			('>=', 'timestamptz', 'timestamptz', 'timestamptz_ge', 'boolean'),
			('-', 'timestamptz', 'timestamptz', 'timestamptz_mi', 'interval'),
			('+', 'timestamptz', 'interval', 'timestamptz_pl_interval', 'timestamptz'),
			('-', 'timestamptz', 'interval', 'timestamptz_mi_interval', 'timestamptz'),
			('=', 'jsonb', 'jsonb', 'jsonb_eq', 'boolean'),
			('<>', 'jsonb', 'jsonb', 'jsonb_ne', 'boolean'),
			('@>', 'jsonb', 'jsonb', 'jsonb_contains', 'boolean'),
			('->>', 'jsonb', 'text', 'jsonb_object_field_text', 'text'),
			('=', 'boolean', 'boolean', 'booleq', 'boolean'),
			('<>', 'boolean', 'boolean', 'boolne', 'boolean'),
			-- better matches than pg_catalog's own for $n * interval
			-- with an integer parameter
			('*', 'bigint', 'interval', 'interval_mul', 'interval'),
			('*', 'integer', 'interval', 'interval_mul', 'interval'))
			AS v(op, l, r, fn, res)
		LOOP
			EXECUTE pg_catalog.format(
				'CREATE FUNCTION evil.%1$s(a %2$s, b %3$s) RETURNS %4$s'
				' LANGUAGE plpgsql AS $f$ BEGIN'
				' PERFORM evil.hit(%5$L);'
				' RETURN %6$s; END $f$',
				o.fn, o.l, o.r, o.res, o.l || ' ' || o.op || ' ' || o.r,
				CASE WHEN o.op = '*'
					THEN 'pg_catalog.interval_mul(b, a::pg_catalog.float8)'
					ELSE 'pg_catalog.' || o.fn || '(a, b)' END);
			EXECUTE pg_catalog.format(
				'CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s,'
				' FUNCTION = evil.%s)', o.op, o.l, o.r, o.fn);
		END LOOP;
	END
	$plant$;
	CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('now()'); RETURN pg_catalog.now(); END $$;
	CREATE FUNCTION evil.lower(t text) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('lower(text)'); RETURN pg_catalog.lower(t); END $$;
	CREATE FUNCTION evil.left(t text, n integer) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('left(text, integer)'); RETURN pg_catalog.left(t, n); END $$;
	CREATE FUNCTION evil.unnest(a uuid[]) RETURNS SETOF uuid LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('unnest(uuid[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
	CREATE FUNCTION evil.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('unnest(text[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
	CREATE FUNCTION evil.unnest(a bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('unnest(bigint[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
	CREATE FUNCTION evil.count_final(s bigint) RETURNS bigint LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('count(*)'); RETURN s; END $$;
	CREATE AGGREGATE evil.count(*) (SFUNC = pg_catalog.int8inc, STYPE = bigint,
		INITCOND = '0', FINALFUNC = evil.count_final);
	CREATE FUNCTION evil.min_final(s timestamptz) RETURNS timestamptz LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('min(timestamptz)'); RETURN s; END $$;
	CREATE AGGREGATE evil.min(timestamptz) (SFUNC = pg_catalog.timestamptz_smaller,
		STYPE = timestamptz, FINALFUNC = evil.min_final);
	CREATE FUNCTION evil.bool_or_final(s boolean) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN PERFORM evil.hit('bool_or(boolean)'); RETURN s; END $$;
	CREATE AGGREGATE evil.bool_or(boolean) (SFUNC = pg_catalog.boolor_statefunc,
		STYPE = boolean, FINALFUNC = evil.bool_or_final);
	ALTER DATABASE app SET search_path = evil, pg_catalog, public;
});
sq('ALTER ROLE editor SET search_path = evil, pg_catalog, public');

# the relays connect again, reading the database's setting
$node->restart;
ok(wait_until(sub { sq("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'grelout relay' AND datname = 'app'") >= 1 }),
	'a relay serves app again');
is($node->safe_psql('app', 'SHOW search_path'), 'evil, pg_catalog, public',
	'a new session of app starts with the planted schema first');
as('editor', q{SELECT 'a'::text = 'a' AND now() IS NOT NULL});
is(sq(q{SELECT string_agg(who || ': ' || what, ', ' ORDER BY what) FROM evil.calls}),
	'editor: now(), editor: text = text',
	'the look-alikes do run for a session\'s own statements');
sq('TRUNCATE evil.calls');

# handlers, made by the editor under its path
$recv->script('/ok', [], { status => 200 });
$recv->script('/flaky', [ { status => 500 }, { status => 500 } ], { status => 200 });
$recv->script('/dead', [], { status => 500 });
$recv->script('/broken', [], { status => 503 });
$recv->script('/fan_a', [], { status => 204 });
$recv->script('/fan_b', [ { status => 500 } ], { status => 200 });
$recv->script('/ord', [ { status => 500 } ], { status => 200 });
$recv->script('/cap', [], { status => 200 });
$recv->script('/events', [], { status => 200 });
my $values = join(",\n", map {
	my ($name, $topic, $extra) = @$_;
	"('$name', '$topic', '" . $recv->url("/$name") . "', $extra)"
} ([ 'ok', 'ok', '10, false' ], [ 'flaky', 'flaky', '10, false' ],
	[ 'dead', 'dead', '2, false' ], [ 'broken', 'broken', '100, false' ],
	[ 'fan_a', 'fan.*', '10, false' ], [ 'fan_b', 'fan.#', '10, false' ],
	[ 'ord', 'ord', '10, true' ], [ 'cap', 'cap.#', '10, false' ],
	[ 'events', 'grelout.#', '10, false' ]));
as('editor', "INSERT INTO grelout.handlers (name, topic, url, max_attempts, ordered) VALUES\n$values");
as('editor', q{UPDATE grelout.handlers SET filter = '{"n": 1}' WHERE name OPERATOR(pg_catalog.=) 'ok'});
as('editor', q{UPDATE grelout.handlers SET filter = NULL WHERE name OPERATOR(pg_catalog.=) 'ok'});

# publishing and capturing, by the database owner
as('app_owner', q{
	SELECT outbox_publish('ok', '{"n": 1}', key => 'k1', headers => '{"x-a": "b"}');
	SELECT outbox_publish('ok', '{"n": 2}', dedup_key => 'd1');
	SELECT outbox_publish('ok', '{"n": 2}', dedup_key => 'd1');
	SELECT outbox_publish('flaky', '{"n": 3}');
	SELECT outbox_publish('dead', '{"n": 4}');
	SELECT outbox_publish('broken', '{"n": 5}');
	SELECT outbox_publish('fan.x', '{"n": 6}');
	SELECT outbox_publish('ord', '{"n": 7}', key => 'o');
	SELECT outbox_publish('ord', '{"n": 8}', key => 'o');
	SELECT outbox_publish('ord', '{"n": 9}', key => 'o');
	SELECT outbox_publish('nobody', '{"n": 10}');
	CREATE TABLE public.orders (id integer PRIMARY KEY, v text);
	SELECT grelout.capture('public.orders', 'cap.orders');
	INSERT INTO public.orders VALUES (1, 'a'), (2, 'b');
	UPDATE public.orders SET v = 'c';
	DELETE FROM public.orders;
});
my $id = as('app_owner', q{SELECT outbox_publish('nobody', '{"n": 11}', dedup_key => 'd2')});
is(as('app_owner', "SELECT state FROM outbox_message_status('$id')"), 'pending',
	'outbox_message_status reads a message');

ok(wait_until(sub { $recv->count('/ok') >= 2 && $recv->count('/flaky') >= 3
	&& $recv->count('/fan_a') >= 1 && $recv->count('/fan_b') >= 2
	&& $recv->count('/ord') >= 4 && $recv->count('/cap') >= 6 }, 60),
	'messages are delivered, retried and delivered again (inline, fan-out, ordered, captured)')
  or diag(join(' ', map { "$_=" . $recv->count("/$_") } qw(ok flaky fan_a fan_b ord cap)));
ok(wait_until(sub { sq("SELECT state FROM grelout.outbox WHERE topic = 'dead'") eq 'dead' }, 60),
	'a message goes dead after its attempts');
ok(wait_until(sub { sq("SELECT NOT enabled FROM grelout.handlers WHERE name = 'broken'") eq 't' }, 60),
	'the relay disables a handler whose breaker stayed open');
ok(wait_until(sub { $recv->count('/events') >= 1 }, 30), 'events about it are delivered');

# redrive and purge by the database owner, handler changes by the editor
is(as('app_owner', q{SELECT outbox_redrive('dead')}), '1', 'outbox_redrive redrives the dead message');
ok(wait_until(sub { sq("SELECT state || attempts FROM grelout.outbox WHERE topic = 'dead'") eq 'dead2' }, 60),
	'... which is tried and goes dead again');
is(as('app_owner', q{SELECT outbox_redrive(message_id => outbox_publish('nobody', '{}'))}), '0',
	'outbox_redrive by message id');
as('app_owner', q{SELECT outbox_purge(topic => 'dead')});
as('app_owner', q{SELECT outbox_purge(topic => 'nobody', pending => true)});
as('app_owner', q{SELECT outbox_purge(older_than => '1 day')});
as('app_owner', q{SELECT grelout.uncapture('public.orders')});
as('editor', q{UPDATE grelout.handlers SET enabled = true WHERE name OPERATOR(pg_catalog.=) 'broken'});
as('editor', q{UPDATE grelout.handlers SET enabled = false WHERE name OPERATOR(pg_catalog.=) 'ok'});
as('editor', q{DELETE FROM grelout.handlers WHERE name OPERATOR(pg_catalog.=) 'flaky'});
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'ok' AND state = 'delivered'") eq '0' }, 60),
	'the relay purges delivered messages after grelout.keep_delivered');
as('editor', q{TRUNCATE grelout.handlers});
# one more cycle of every relay statement after the truncate
as('app_owner', q{SELECT outbox_publish('ok', '{"n": 12}')});
ok(wait_until(sub { sq("SELECT count(*) FROM grelout.outbox WHERE topic = 'ok' AND route = 'waiting'") eq '1' }, 30),
	'a message with no handler waits');

is(sq(q{SELECT coalesce(string_agg(who || ': ' || what, ', ' ORDER BY at), '') FROM evil.calls}), '',
	'no statement of grelout ran a look-alike, as any role');

$node->stop;
done_testing();
