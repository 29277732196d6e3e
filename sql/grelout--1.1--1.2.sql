/* grelout--1.1--1.2.sql: from grelout 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION grelout UPDATE TO '1.2'" to load this file. \quit

-- A fresh 1.2 install runs grelout--1.0.sql, grelout--1.0--1.1.sql and then
-- this script, so an upgraded database and a new one have the same schema.
-- As in the earlier scripts, nothing is created with IF NOT EXISTS, and
-- OR REPLACE only where replacing the extension's own object (keeping its
-- grants) is the point.

-- issue 29 (parts 3, 4, 5b): names a publisher may not use, what it can learn
--
-- grelout.set_secret sets a handler's signing secret (or, with previous,
-- its previous_secret; NULL clears it) after checking it, and never quotes
-- it in an error.  Called with the secret as a bind parameter, the secret
-- is in no statement's text, so the server log line PostgreSQL writes for
-- a failing statement cannot carry it (an INSERT or UPDATE with the secret
-- as a literal can).  Administrators only: not executable by PUBLIC, and it
-- runs as its caller, who must be able to UPDATE grelout.handlers.
-- Everything else of these parts is in the library: reserved topics and
-- header names, the settings shown to administrators only, the outcome
-- class in outbox_message_status, relay errors per database, the blocked
-- address ranges.
CREATE FUNCTION grelout.set_secret(handler text, secret text,
	previous boolean DEFAULT false)
	RETURNS void
	AS 'MODULE_PATHNAME', 'grelout_set_secret_1_2'
	LANGUAGE C VOLATILE SECURITY INVOKER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION grelout.set_secret(text, text, boolean)
	IS 'set a handler''s signing secret (previous => true: its previous_secret) without the secret in the statement''s text';
REVOKE ALL ON FUNCTION grelout.set_secret(text, text, boolean) FROM PUBLIC;
