-- Runs once, when the postgres container initialises an empty data directory (as POSTGRES_USER,
-- connected to POSTGRES_DB = app). Server settings for logical decoding (wal_level=logical, ...)
-- are passed on the server's command line in docker-compose.yml.

-- The commit coordinator's state (instants, locks, heartbeats, outbox): its own database.
-- `inlet coordinator serve` creates its tables on start (migrations), so only the database is made here.
CREATE DATABASE inlet;

-- The Hive Metastore's catalog (docker-compose.yml's hive-metastore: the image's entrypoint creates
-- or upgrades Hive's schema in it with Hive's schema tool at every start).
CREATE DATABASE metastore;

-- The source database `app`: what Debezium captures (schema public).
\connect app

-- Debezium's heartbeat.action.query writes here, so the replication slot advances even when the
-- captured tables are idle (otherwise the server keeps WAL for the slot). Not in schema public,
-- so it is not captured itself.
CREATE SCHEMA IF NOT EXISTS inlet;
CREATE TABLE IF NOT EXISTS inlet.debezium_heartbeat (
    id integer PRIMARY KEY,
    ts timestamptz NOT NULL DEFAULT now()
);

-- Debezium's signal table (signal.data.collection): `inlet backfill` inserts execute-snapshot signals
-- here, and the connector writes each incremental-snapshot chunk's watermarks. Debezium adds it to
-- the tables it captures (and so to its filtered publication); the CDC consumer drops its events.
CREATE TABLE IF NOT EXISTS inlet.debezium_signal (
    id   varchar(64) PRIMARY KEY,
    type varchar(32) NOT NULL,
    data text
);

-- The connector's publication (deploy/connect/postgres-connector.json uses it as it is:
-- publication.autocreate.mode=disabled): every table of schema public, tables created later too,
-- the heartbeat table -- without it an idle source never advances the slot and the server keeps
-- WAL for it until max_slot_wal_keep_size drops the slot -- and the signal table, whose
-- incremental-snapshot watermarks the connector must see in the stream. A partitioned table's changes
-- are published under its root's name, so it replicates as one table (publish_via_partition_root).
CREATE PUBLICATION inlet_app FOR TABLES IN SCHEMA public, TABLE inlet.debezium_heartbeat, inlet.debezium_signal
    WITH (publish_via_partition_root = true);

-- A sample table, so a fresh stack has something to replicate
-- (it lands as the Hudi table s3://lake/tables/app/public/customers).
CREATE TABLE IF NOT EXISTS public.customers (
    id         bigint PRIMARY KEY,
    name       text NOT NULL,
    email      text,
    city       text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO public.customers (id, name, email, city) VALUES
    (1, 'Ada Lovelace', 'ada@example.com', 'London'),
    (2, 'Grace Hopper', 'grace@example.com', 'New York'),
    (3, 'Edsger Dijkstra', 'edsger@example.com', 'Amsterdam')
ON CONFLICT (id) DO NOTHING;
