#!/bin/sh
# Runs once, after 01-inlet.sql, when the postgres container initialises an empty data directory:
# the least-privilege role that Debezium (Kafka Connect) and the CDC consumer connect as, and the
# publication the connector uses (deploy/sql/replication-role.sql, mounted at /inlet-sql).
psql -v ON_ERROR_STOP=1 -X -q --username "$POSTGRES_USER" --dbname app \
    -v role=inlet_replication -v schema=public -v publication=inlet_app \
    -v password="$REPLICATION_PASSWORD" -f /inlet-sql/replication-role.sql
