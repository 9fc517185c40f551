#!/usr/bin/env bash
# Install and start a throwaway PostgreSQL server for the store tests (fresh Debian machine, run as root).
# Prints the export line the test suite reads; CI evaluates it: eval "$(.ci/postgres.sh | tail -n 1)".
set -euo pipefail

PASSWORD="${EXTRACT_TEST_POSTGRES_PASSWORD:-postgres}"
PORT="${EXTRACT_TEST_POSTGRES_PORT:-5432}"

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi

VERSION="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main"' | grep -q .; then
  pg_createcluster "$VERSION" main --port "$PORT" >&2
fi
if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
  pg_ctlcluster "$VERSION" main start >&2
fi

# Wait until the server accepts connections (the socket appears a moment after start).
for _ in $(seq 1 30); do
  if su postgres -c "pg_isready -q -h 127.0.0.1 -p $PORT"; then break; fi
  sleep 1
done
su postgres -c "psql -q -h /var/run/postgresql -p $PORT -c \"ALTER USER postgres PASSWORD '$PASSWORD'\"" >&2

echo "export EXTRACT_TEST_POSTGRES_URL=postgresql+psycopg://postgres:${PASSWORD}@127.0.0.1:${PORT}/postgres"
