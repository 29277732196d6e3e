-- allowed_networks: grelout.allowed_networks is parsed once, by its check
-- hook, into the list the relays use.  A value that is not a list of at
-- most 64 CIDRs is refused at ALTER SYSTEM, naming the bad entry, and
-- nothing is written to postgresql.auto.conf.  SET is refused for it as for
-- every setting applied at reload.
SELECT current_setting('grelout.allowed_networks') AS value_before,
	(SELECT count(*) FROM pg_file_settings WHERE name = 'grelout.allowed_networks'
	 AND sourcefile LIKE '%postgresql.auto.conf') AS auto_conf_before \gset
ALTER SYSTEM SET grelout.allowed_networks = '10.0.0.0/8, not-a-network';
ALTER SYSTEM SET grelout.allowed_networks = '10.0.0.0/8 192.168.1.1/33';
ALTER SYSTEM SET grelout.allowed_networks = '::1/129';
ALTER SYSTEM SET grelout.allowed_networks = '10.0.0.0/8;fd00::/8';
SELECT string_agg('10.0.' || i || '.0/24', ', ') AS sixty_five
FROM generate_series(1, 65) AS i \gset
ALTER SYSTEM SET grelout.allowed_networks = :'sixty_five';
SET grelout.allowed_networks = 'not-a-network';
SELECT current_setting('grelout.allowed_networks') = :'value_before' AS value_unchanged,
	(SELECT count(*) FROM pg_file_settings WHERE name = 'grelout.allowed_networks'
	 AND sourcefile LIKE '%postgresql.auto.conf') = :auto_conf_before AS auto_conf_unchanged;
