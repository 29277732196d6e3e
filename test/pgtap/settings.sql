-- test/pgtap/settings.sql: every grelout.* setting of the contract exists
-- with its default, unit, type, context and range; the prefix is reserved;
-- sessions cannot change the reload/restart settings; keep_delivered takes
-- off, on or an interval and refuses anything else.  Values are checked
-- without changing the running cluster: ALTER SYSTEM validates a value (and
-- refuses a bad one without writing it); the accepted ones are reset at
-- once and the configuration is never reloaded.  ALTER SYSTEM cannot run
-- inside a function or transaction, so its outcome is read from psql's
-- SQLSTATE variable; psql prints those expected errors on stderr.
SELECT plan(200);

-- every setting of the contract: boot default, unit, type, context
SELECT is((SELECT format('%s|%s|%s|%s', boot_val, coalesce(unit, ''), vartype, context)
		   FROM pg_settings WHERE name = s.name),
	s.expected, format('%s: default %s, unit "%s", %s, context %s', s.name,
		coalesce(nullif(split_part(s.expected, '|', 1), ''), '(empty)'),
		split_part(s.expected, '|', 2), split_part(s.expected, '|', 3),
		split_part(s.expected, '|', 4)))
FROM (VALUES
	('grelout.database', 'postgres||string|sighup'),
	('grelout.role', '||string|postmaster'),
	('grelout.workers', '1||integer|sighup'),
	('grelout.max_relays', '16||integer|postmaster'),
	('grelout.relay', 'on||bool|sighup'),
	('grelout.poll_interval', '1500|ms|integer|sighup'),
	('grelout.batch_size', '100||integer|sighup'),
	('grelout.concurrency', '2000||integer|sighup'),
	('grelout.lease_duration', '30000|ms|integer|sighup'),
	('grelout.request_timeout', '10000|ms|integer|sighup'),
	('grelout.max_attempts', '10||integer|sighup'),
	('grelout.retry_base', '1000|ms|integer|sighup'),
	('grelout.retry_max', '300000|ms|integer|sighup'),
	('grelout.retry_jitter', '1||real|sighup'),
	('grelout.dead_letter', 'on||bool|sighup'),
	('grelout.keep_delivered', 'off||string|sighup'),
	('grelout.max_payload_size', '1048576|B|integer|superuser'),
	('grelout.ca_file', '||string|sighup'),
	('grelout.block_private_networks', 'off||bool|sighup'),
	('grelout.allowed_networks', '||string|sighup'),
	('grelout.max_in_flight', '0||integer|sighup'),
	('grelout.breaker_threshold', '5||integer|sighup'),
	('grelout.breaker_cooldown', '30000|ms|integer|sighup'),
	('grelout.disable_after', '432000|s|integer|sighup'),
	('grelout.traceparent', '||string|user'),
	('grelout.tracestate', '||string|user'),
	('grelout.log_attempts', 'failed||enum|sighup'),
	('grelout.attempt_body_max', '4096|B|integer|sighup'),
	('grelout.keep_attempts', '604800|s|integer|sighup'),
	('grelout.otlp_endpoint', '||string|sighup')) AS s(name, expected);

-- grelout.max_workers: its default is the number of processors online (at
-- most 64), so it is checked apart
SELECT is((SELECT format('%s|%s|%s|%s..%s', coalesce(unit, ''), vartype, context, min_val, max_val)
		   FROM pg_settings WHERE name = 'grelout.max_workers'),
	'|integer|sighup|1..64', 'grelout.max_workers: no unit, integer, context sighup, 1 to 64');
SELECT ok((SELECT boot_val::int BETWEEN 1 AND 64 FROM pg_settings WHERE name = 'grelout.max_workers'),
	'grelout.max_workers defaults to the processors online');
SELECT is(current_setting('grelout.max_workers'),
	(SELECT boot_val FROM pg_settings WHERE name = 'grelout.max_workers'),
	'grelout.max_workers runs with its default here');

-- the running values of the settings this cluster does not configure are
-- the defaults, shown in PostgreSQL's units
SELECT is(current_setting(s.name), s.shown, format('%s is %s', s.name, s.shown))
FROM (VALUES
	('grelout.role', ''), ('grelout.workers', '1'), ('grelout.relay', 'on'),
	('grelout.batch_size', '100'), ('grelout.concurrency', '2000'),
	('grelout.lease_duration', '30s'), ('grelout.request_timeout', '10s'),
	('grelout.max_attempts', '10'), ('grelout.retry_base', '1s'),
	('grelout.retry_max', '5min'), ('grelout.retry_jitter', '1'),
	('grelout.dead_letter', 'on'), ('grelout.keep_delivered', 'off'),
	('grelout.max_payload_size', '1MB'), ('grelout.ca_file', ''),
	('grelout.block_private_networks', 'off'), ('grelout.allowed_networks', ''),
	('grelout.max_in_flight', '0'), ('grelout.breaker_threshold', '5'),
	('grelout.breaker_cooldown', '30s'), ('grelout.disable_after', '5d'),
	('grelout.log_attempts', 'failed'), ('grelout.attempt_body_max', '4kB'),
	('grelout.keep_attempts', '7d'), ('grelout.otlp_endpoint', '')) AS s(name, shown);
-- the two this cluster configures (test/regress.conf)
SELECT is(current_setting('grelout.database'), 'grelout_regress', 'grelout.database comes from the configuration');
SELECT is(current_setting('grelout.poll_interval'), '200ms', 'grelout.poll_interval comes from the configuration');

-- only administrators can change any grelout setting but the caller's own
-- trace context (issue 33), which any role sets
SELECT is((SELECT count(*) FROM pg_settings WHERE name LIKE 'grelout.%'
	AND name NOT IN ('grelout.traceparent', 'grelout.tracestate')
	AND context NOT IN ('postmaster', 'sighup', 'superuser')), 0::bigint,
	'no grelout setting is user-settable but the trace context');
SELECT is((SELECT string_agg(name, ',' ORDER BY name) FROM pg_settings
	WHERE name LIKE 'grelout.%' AND context = 'user'),
	'grelout.traceparent,grelout.tracestate',
	'grelout.traceparent and grelout.tracestate are user-settable');
SELECT is((SELECT context FROM pg_settings WHERE name = 'grelout.' || s), 'postmaster',
	format('grelout.%s needs a restart', s))
FROM unnest(ARRAY['role', 'max_relays']) AS s;
SELECT is((SELECT context FROM pg_settings WHERE name = 'grelout.' || s), 'sighup',
	format('grelout.%s applies on reload (the launcher follows it)', s))
FROM unnest(ARRAY['database', 'workers', 'max_workers']) AS s;

-- ranges
SELECT is((SELECT format('%s..%s', min_val, max_val) FROM pg_settings WHERE name = 'grelout.retry_jitter'),
	'0..1', 'grelout.retry_jitter ranges from 0 to 1');
SELECT ok((SELECT min_val::numeric >= m AND max_val IS NOT NULL FROM pg_settings WHERE name = 'grelout.' || s),
	format('grelout.%s has a lower bound of at least %s and an upper bound', s, m))
FROM (VALUES ('workers', 0), ('max_relays', 1), ('poll_interval', 1), ('batch_size', 1), ('concurrency', 1),
	('lease_duration', 1), ('request_timeout', 1), ('max_attempts', 1), ('retry_base', 1),
	('retry_max', 1), ('max_payload_size', 1)) AS v(s, m);
SELECT ok((SELECT min_val::numeric <= boot_val::numeric AND boot_val::numeric <= max_val::numeric
		   FROM pg_settings WHERE name = s.name), s.name || ': the default is within the range')
FROM pg_settings AS s WHERE s.name LIKE 'grelout.%' AND s.vartype IN ('integer', 'real');

-- SET of a reload or restart setting fails, even for a superuser
SELECT throws_ok(format('SET %s = %L', name, reset_val), '55P02', NULL,
	format('SET %s is refused (%s)', name, context))
FROM pg_settings WHERE name LIKE 'grelout.%' AND context IN ('sighup', 'postmaster') ORDER BY name;
SELECT throws_ok($$SELECT set_config('grelout.batch_size', '5', false)$$, '55P02', NULL,
	'set_config of a reload setting is refused');
SELECT throws_ok($$ALTER ROLE CURRENT_USER SET grelout.poll_interval = '1s'$$, '55P02', NULL,
	'ALTER ROLE SET of a reload setting is refused');
SELECT throws_ok($$ALTER DATABASE grelout_regress SET grelout.database = 'x'$$, '55P02', NULL,
	'ALTER DATABASE SET of a reload setting is refused');

-- the superuser setting: a superuser may SET it, with units, and within range
SELECT lives_ok($$SET grelout.max_payload_size = '2MB'$$, 'a superuser may SET grelout.max_payload_size');
SELECT is((SELECT setting FROM pg_settings WHERE name = 'grelout.max_payload_size'), '2097152', '''2MB'' is 2097152 bytes');
SELECT lives_ok($$SET grelout.max_payload_size = '512kB'$$, 'max_payload_size takes kB');
SELECT is((SELECT setting FROM pg_settings WHERE name = 'grelout.max_payload_size'), '524288', '''512kB'' is 524288 bytes');
SELECT throws_ok($$SET grelout.max_payload_size = 0$$, '22023', NULL, 'max_payload_size 0 is out of range');
SELECT throws_ok($$SET grelout.max_payload_size = '1TB'$$, '22023', NULL, 'max_payload_size 1TB is out of range');
SELECT throws_ok($$SET grelout.max_payload_size = 'lots'$$, '22023', NULL, 'max_payload_size needs a number');
RESET grelout.max_payload_size;
SELECT is(current_setting('grelout.max_payload_size'), '1MB', 'RESET restores 1MB');

-- the prefix is reserved: an unknown grelout.* name is an error
SELECT throws_ok($$SET grelout.foo = 1$$, '42602', NULL, 'SET grelout.foo is refused');
SELECT throws_ok($$SET grelout.poll_intervall = '1s'$$, '42602', NULL, 'a misspelt setting is refused');
SELECT throws_ok($$SELECT set_config('grelout.foo', '1', false)$$, '42602', NULL, 'set_config(grelout.foo) is refused');
SELECT throws_ok($$ALTER ROLE CURRENT_USER SET grelout.foo = 1$$, '42602', NULL, 'ALTER ROLE SET grelout.foo is refused');
SELECT is((SELECT count(*) FROM pg_settings WHERE name = 'grelout.foo'), 0::bigint, 'no placeholder grelout.foo was made');

\set ON_ERROR_STOP 0
\set VERBOSITY sqlstate

-- keep_delivered: off, on (any boolean spelling) or a positive interval
ALTER SYSTEM SET grelout.keep_delivered = 'garbage';
SELECT is(:'SQLSTATE'::text, '22023', 'keep_delivered ''garbage'' is refused');
ALTER SYSTEM SET grelout.keep_delivered = '7 dayz';
SELECT is(:'SQLSTATE'::text, '22023', 'keep_delivered ''7 dayz'' is refused');
ALTER SYSTEM SET grelout.keep_delivered = '-1 day';
SELECT is(:'SQLSTATE'::text, '22023', 'keep_delivered ''-1 day'' is refused');
ALTER SYSTEM SET grelout.keep_delivered = '0 seconds';
SELECT is(:'SQLSTATE'::text, '22023', 'keep_delivered ''0 seconds'' is refused');
ALTER SYSTEM SET grelout.keep_delivered = '7 days';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered ''7 days'' is accepted');
SELECT is((SELECT format('%s|%s|%s', setting, applied, error) FROM pg_file_settings
	WHERE name = 'grelout.keep_delivered'), '7 days|t|', 'the file holds ''7 days'', valid');
ALTER SYSTEM SET grelout.keep_delivered = 'on';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered ''on'' is accepted');
ALTER SYSTEM SET grelout.keep_delivered = 'off';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered ''off'' is accepted');
ALTER SYSTEM SET grelout.keep_delivered = 'true';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered ''true'' is accepted');
ALTER SYSTEM SET grelout.keep_delivered = '36 hours';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered ''36 hours'' is accepted');
ALTER SYSTEM SET grelout.keep_delivered = 'P30D';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered ''P30D'' (ISO 8601) is accepted');
ALTER SYSTEM RESET grelout.keep_delivered;
SELECT is(:'SQLSTATE'::text, '00000', 'keep_delivered reset');

-- times take PostgreSQL's units
ALTER SYSTEM SET grelout.poll_interval = '1.5s';
SELECT is(:'SQLSTATE'::text, '00000', 'poll_interval ''1.5s'' is accepted');
ALTER SYSTEM SET grelout.poll_interval = '1500ms';
SELECT is(:'SQLSTATE'::text, '00000', 'poll_interval ''1500ms'' is accepted');
ALTER SYSTEM SET grelout.retry_max = '10min';
SELECT is(:'SQLSTATE'::text, '00000', 'retry_max ''10min'' is accepted');
ALTER SYSTEM SET grelout.lease_duration = '1h';
SELECT is(:'SQLSTATE'::text, '00000', 'lease_duration ''1h'' is accepted');
SELECT is((SELECT count(*) FROM pg_file_settings WHERE name LIKE 'grelout.%'
	AND sourcefile LIKE '%postgresql.auto.conf' AND (error IS NOT NULL OR NOT applied)),
	0::bigint, 'every value written by ALTER SYSTEM is valid');
ALTER SYSTEM RESET grelout.poll_interval;
ALTER SYSTEM RESET grelout.retry_max;
ALTER SYSTEM RESET grelout.lease_duration;
SELECT is(:'SQLSTATE'::text, '00000', 'reset');

-- range checks
ALTER SYSTEM SET grelout.max_workers = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'max_workers 0 is out of range');
ALTER SYSTEM SET grelout.max_workers = 65;
SELECT is(:'SQLSTATE'::text, '22023', 'max_workers 65 is out of range');
ALTER SYSTEM SET grelout.batch_size = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'batch_size 0 is out of range');
ALTER SYSTEM SET grelout.concurrency = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'concurrency 0 is out of range');
ALTER SYSTEM SET grelout.max_attempts = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'max_attempts 0 is out of range');
ALTER SYSTEM SET grelout.breaker_threshold = -1;
SELECT is(:'SQLSTATE'::text, '22023', 'breaker_threshold -1 is out of range');
ALTER SYSTEM SET grelout.breaker_cooldown = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'breaker_cooldown 0 is out of range');
ALTER SYSTEM SET grelout.max_in_flight = -1;
SELECT is(:'SQLSTATE'::text, '22023', 'max_in_flight -1 is out of range');
ALTER SYSTEM SET grelout.retry_jitter = 1.5;
SELECT is(:'SQLSTATE'::text, '22023', 'retry_jitter 1.5 is out of range');
ALTER SYSTEM SET grelout.retry_jitter = -0.1;
SELECT is(:'SQLSTATE'::text, '22023', 'retry_jitter -0.1 is out of range');
ALTER SYSTEM SET grelout.poll_interval = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'poll_interval 0 is out of range');
ALTER SYSTEM SET grelout.request_timeout = '-1s';
SELECT is(:'SQLSTATE'::text, '22023', 'request_timeout -1s is out of range');
ALTER SYSTEM SET grelout.workers = -1;
SELECT is(:'SQLSTATE'::text, '22023', 'workers -1 is out of range');
ALTER SYSTEM SET grelout.max_relays = 0;
SELECT is(:'SQLSTATE'::text, '22023', 'max_relays 0 is out of range');
ALTER SYSTEM SET grelout.database = ' ';
SELECT is(:'SQLSTATE'::text, '22023', 'database '' '' names no database');
ALTER SYSTEM SET grelout.database = 'app, *';
SELECT is(:'SQLSTATE'::text, '22023', 'database ''app, *'': * must stand alone');
ALTER SYSTEM SET grelout.database = 'app,,shop';
SELECT is(:'SQLSTATE'::text, '22023', 'database ''app,,shop'' has an empty name');
ALTER SYSTEM SET grelout.database = ' app , shop ';
SELECT is(:'SQLSTATE'::text, '00000', 'database '' app , shop '' (a list) is accepted');
ALTER SYSTEM SET grelout.database = '*';
SELECT is(:'SQLSTATE'::text, '00000', 'database ''*'' is accepted');
ALTER SYSTEM RESET grelout.database;
ALTER SYSTEM SET grelout.relay = 'maybe';
SELECT is(:'SQLSTATE'::text, '22023', 'relay ''maybe'' is not a boolean');
ALTER SYSTEM SET grelout.batch_size = 'ten';
SELECT is(:'SQLSTATE'::text, '22023', 'batch_size ''ten'' is not a number');
ALTER SYSTEM SET grelout.lease_duration = '30 parsecs';
SELECT is(:'SQLSTATE'::text, '22023', 'lease_duration ''30 parsecs'' has no valid unit');

-- issue 33: the attempt log's settings
SELECT is((SELECT enumvals FROM pg_settings WHERE name = 'grelout.log_attempts'),
	ARRAY['failed', 'all', 'off'], 'log_attempts takes failed, all or off');
SELECT is((SELECT format('%s..%s', min_val, max_val) FROM pg_settings WHERE name = 'grelout.attempt_body_max'),
	'0..65536', 'attempt_body_max ranges from 0 to the 64kB a relay reads of a body');
ALTER SYSTEM SET grelout.log_attempts = 'some';
SELECT is(:'SQLSTATE'::text, '22023', 'log_attempts ''some'' is refused');
ALTER SYSTEM SET grelout.log_attempts = 'all';
SELECT is(:'SQLSTATE'::text, '00000', 'log_attempts ''all'' is accepted');
ALTER SYSTEM SET grelout.log_attempts = 'off';
SELECT is(:'SQLSTATE'::text, '00000', 'log_attempts ''off'' is accepted');
ALTER SYSTEM RESET grelout.log_attempts;
ALTER SYSTEM SET grelout.attempt_body_max = '65kB';
SELECT is(:'SQLSTATE'::text, '22023', 'attempt_body_max 65kB is out of range');
ALTER SYSTEM SET grelout.attempt_body_max = -1;
SELECT is(:'SQLSTATE'::text, '22023', 'attempt_body_max -1 is out of range');
ALTER SYSTEM SET grelout.attempt_body_max = '1kB';
SELECT is(:'SQLSTATE'::text, '00000', 'attempt_body_max 1kB is accepted');
ALTER SYSTEM RESET grelout.attempt_body_max;
ALTER SYSTEM SET grelout.keep_attempts = '-1s';
SELECT is(:'SQLSTATE'::text, '22023', 'keep_attempts -1s is out of range');
ALTER SYSTEM SET grelout.keep_attempts = '30 days';
SELECT is(:'SQLSTATE'::text, '22023', 'keep_attempts ''30 days'' has no valid unit (30d does)');
ALTER SYSTEM SET grelout.keep_attempts = '30d';
SELECT is(:'SQLSTATE'::text, '00000', 'keep_attempts 30d is accepted');
ALTER SYSTEM SET grelout.keep_attempts = 0;
SELECT is(:'SQLSTATE'::text, '00000', 'keep_attempts 0 (never purged) is accepted');
ALTER SYSTEM RESET grelout.keep_attempts;
ALTER SYSTEM SET grelout.otlp_endpoint = 'grpc://127.0.0.1:4317';
SELECT is(:'SQLSTATE'::text, '22023', 'otlp_endpoint must be an http or https URL');
ALTER SYSTEM SET grelout.otlp_endpoint = 'http:///v1/traces';
SELECT is(:'SQLSTATE'::text, '22023', 'otlp_endpoint needs a host');
ALTER SYSTEM SET grelout.otlp_endpoint = 'http://127.0.0.1:4318/v1/traces';
SELECT is(:'SQLSTATE'::text, '00000', 'otlp_endpoint takes an OTLP/HTTP traces URL');
ALTER SYSTEM SET grelout.otlp_endpoint = '';
SELECT is(:'SQLSTATE'::text, '00000', 'otlp_endpoint '''' (no span export) is accepted');
ALTER SYSTEM RESET grelout.otlp_endpoint;
-- an unknown name: refused as unknown (42704) up to 16; from 17 on
-- ALTER SYSTEM accepts unknown custom names and refuses this one for its
-- reserved prefix (42602)
ALTER SYSTEM SET grelout.foo = 1;
SELECT is(:'SQLSTATE'::text,
	CASE WHEN current_setting('server_version_num')::int >= 170000 THEN '42602' ELSE '42704' END,
	'ALTER SYSTEM SET grelout.foo is refused');

\set VERBOSITY default
\set ON_ERROR_STOP 1

-- nothing was left in postgresql.auto.conf
SELECT is((SELECT count(*) FROM pg_file_settings WHERE name LIKE 'grelout.%'
	AND sourcefile LIKE '%postgresql.auto.conf'), 0::bigint, 'postgresql.auto.conf holds no grelout setting');

SELECT * FROM finish();
