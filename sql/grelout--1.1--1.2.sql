/* grelout--1.1--1.2.sql: from grelout 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION grelout UPDATE TO '1.2'" to load this file. \quit

-- A fresh 1.2 install runs grelout--1.0.sql, grelout--1.0--1.1.sql and then
-- this script, so an upgraded database and a new one have the same schema.
-- As in the earlier scripts, nothing is created with IF NOT EXISTS, and
-- OR REPLACE only where replacing the extension's own object (keeping its
-- grants) is the point.
