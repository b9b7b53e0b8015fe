-- A least-privilege role for Debezium's PostgreSQL connector and `inlet writer load`, instead of a
-- superuser. Run it as a superuser (or the tables' owner with CREATEROLE), connected to the source
-- database, with psql:
--
--   psql "postgresql://admin@db:5432/app" -v ON_ERROR_STOP=1 \
--        -v password="$REPLICATION_PASSWORD" -f deploy/sql/replication-role.sql
--
-- Variables (psql -v NAME=VALUE), all optional:
--   role         the role to create or update           (default inlet_replication)
--   password     its password; none: set it yourself    (ALTER ROLE ... PASSWORD, or \password)
--   schema       the schema whose tables replicate       (default public)
--   publication  the connector's publication.name       (default inlet_app)
-- Running it again is harmless (the role and the publication are kept, the grants repeated).
--
-- What the role gets, and why (Debezium's PostgreSQL connector documentation, "Setting up
-- permissions"; PostgreSQL's logical replication "Security" section):
--   LOGIN REPLICATION          connect, create the replication slot and stream from it (no SUPERUSER)
--   USAGE on the schema and SELECT on its tables (and on tables created in it later by the role
--                              that runs this script): the snapshot, and `inlet writer load`'s COPY
--   SELECT, INSERT, UPDATE on inlet.debezium_heartbeat: the connector's heartbeat.action.query, so an
--                              idle source still advances the slot (the table is in the publication)
--   SELECT, INSERT, DELETE on inlet.debezium_signal: the incremental snapshots of `inlet backfill`
--                              (the connector writes their watermarks; in the publication too)
-- The publication is made here, by the administrator, so the role needs neither CREATE on the
-- database nor ownership of the tables: configure the connector with
-- publication.autocreate.mode=disabled. Tables created later in the schema join it by themselves
-- (FOR TABLES IN SCHEMA, PostgreSQL 15 or later); grant SELECT on them if another role creates them.
-- A partitioned table's changes are published under its root's name (publish_via_partition_root),
-- so it replicates as one table, partitions created or attached later included.
-- pg_hba.conf must admit the role from the connector's and the writer's hosts (a `host` line; logical
-- replication connections match the database name, not the `replication` keyword).

\if :{?role}
\else
\set role inlet_replication
\endif
\if :{?schema}
\else
\set schema public
\endif
\if :{?publication}
\else
\set publication inlet_app
\endif

SELECT NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') AS inlet_create_role \gset
\if :inlet_create_role
CREATE ROLE :"role" WITH LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;
\else
ALTER ROLE :"role" WITH LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE;
\endif
\if :{?password}
ALTER ROLE :"role" WITH PASSWORD :'password';
\endif

GRANT USAGE ON SCHEMA :"schema" TO :"role";
GRANT SELECT ON ALL TABLES IN SCHEMA :"schema" TO :"role";
ALTER DEFAULT PRIVILEGES IN SCHEMA :"schema" GRANT SELECT ON TABLES TO :"role";

-- Debezium's heartbeat table (heartbeat.action.query in deploy/connect/postgres-connector.json)
CREATE SCHEMA IF NOT EXISTS inlet;
CREATE TABLE IF NOT EXISTS inlet.debezium_heartbeat (
    id integer PRIMARY KEY,
    ts timestamptz NOT NULL DEFAULT now()
);
GRANT USAGE ON SCHEMA inlet TO :"role";
GRANT SELECT, INSERT, UPDATE ON inlet.debezium_heartbeat TO :"role";
-- Debezium's signal table (signal.data.collection): `inlet backfill` inserts its signals there, and
-- the connector writes each incremental-snapshot chunk's watermarks (insert and delete).
CREATE TABLE IF NOT EXISTS inlet.debezium_signal (
    id   varchar(64) PRIMARY KEY,
    type varchar(32) NOT NULL,
    data text
);
GRANT SELECT, INSERT, DELETE ON inlet.debezium_signal TO :"role";

SELECT NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = :'publication') AS inlet_create_publication \gset
\if :inlet_create_publication
CREATE PUBLICATION :"publication" FOR TABLES IN SCHEMA :"schema", TABLE inlet.debezium_heartbeat, inlet.debezium_signal
    WITH (publish_via_partition_root = true);
\endif
