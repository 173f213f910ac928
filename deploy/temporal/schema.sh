#!/bin/sh
# Create Temporal's two PostgreSQL databases and bring their schemas to this server
# version's, with the server's own temporal-sql-tool (the admin-tools image has it;
# deploy/build-temporal.sh builds it). Idempotent: run it again before every upgrade.
# Reads the same variables as the server (deploy/temporal/server.env): DB, DBNAME,
# VISIBILITY_DBNAME, POSTGRES_SEEDS, DB_PORT, POSTGRES_USER, POSTGRES_PWD.
set -eu
tool=${TEMPORAL_SQL_TOOL:-temporal-sql-tool}
for pair in "${DBNAME:-temporal}:temporal" "${VISIBILITY_DBNAME:-temporal_visibility}:visibility"
do
    db=${pair%%:*}
    schema=${pair##*:}
    set -- "$tool" --plugin "${DB:-postgres12}" --ep "$POSTGRES_SEEDS" -p "${DB_PORT:-5432}" \
        -u "$POSTGRES_USER" --pw "$POSTGRES_PWD" --db "$db"
    # A database that exists already is fine: this is how the script stays idempotent.
    "$@" create-database 2>/dev/null || echo "database $db exists"
    "$@" setup-schema -v 0.0
    "$@" update-schema --schema-name "postgresql/v12/$schema"
done
