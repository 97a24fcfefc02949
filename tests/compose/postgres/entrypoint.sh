#!/bin/sh
# Initialise the cluster once (an empty volume), then run the server in the foreground as the
# postgres user, listening on every address with password authentication.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  chown postgres "$pwfile"
  as_postgres "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
    --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_postgres "$bin/postgres" --single -D "$PGDATA" postgres >/dev/null <<SQL
CREATE DATABASE "${POSTGRES_DB:-$POSTGRES_USER}" OWNER "$POSTGRES_USER";
SQL
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$PGDATA" \
  -c listen_addresses='*' "$@"
