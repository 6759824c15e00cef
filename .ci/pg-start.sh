#!/usr/bin/env bash
# Start a throwaway PostgreSQL on 127.0.0.1 for the ledger tests and print ONE line on stdout:
#   export SPLICE_TEST_POSTGRES_URL=postgresql+psycopg://...
# Idempotent: a server already running from an earlier call is reused. Installs Debian's postgresql package if
# it is missing and we are root with apt-get. On any failure it prints nothing on stdout and exits 0, so CI can
# `eval "$(bash .ci/pg-start.sh)"` and fall back to skipping the postgres-marked tests.
# Knobs: SPLICE_PG_DIR (default ${TMPDIR:-/tmp}/splice-pg), SPLICE_PG_PORT (54329), SPLICE_PG_DB (splice_test).
set -u

PG_DIR="${SPLICE_PG_DIR:-${TMPDIR:-/tmp}/splice-pg}"
PG_PORT="${SPLICE_PG_PORT:-54329}"
PG_DB="${SPLICE_PG_DB:-splice_test}"

log() { echo "pg-start: $*" >&2; }
give_up() { log "$*; PostgreSQL tests will be skipped"; exit 0; }

find_bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"; return 0
    fi
    return 1
}

BIN="$(find_bindir)"
if [ -z "$BIN" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing postgresql with apt-get"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2 \
            || give_up "apt-get install postgresql failed"
        BIN="$(find_bindir)" || true
    fi
fi
[ -n "$BIN" ] || give_up "no initdb/pg_ctl found"

# initdb refuses to run as root: run the server as the 'postgres' system user then.
if [ "$(id -u)" = 0 ]; then
    PG_USER=postgres
    id "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home "$PG_USER" >&2 2>/dev/null \
        || give_up "no 'postgres' user to run the server"
    as_pg() { runuser -u "$PG_USER" -- "$@"; }
else
    PG_USER="$(id -un)"
    as_pg() { "$@"; }
fi

DATA="$PG_DIR/data"
SOCK="$PG_DIR/sock"
mkdir -p "$PG_DIR" "$SOCK" || give_up "cannot create $PG_DIR"
[ "$(id -u)" = 0 ] && chown -R "$PG_USER" "$PG_DIR"
chmod 700 "$PG_DIR"

if [ ! -s "$DATA/PG_VERSION" ]; then
    log "initdb in $DATA"
    as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --no-locale >&2 \
        || give_up "initdb failed"
fi

if ! as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "starting server on 127.0.0.1:$PG_PORT"
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$PG_DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$SOCK -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >&2 || give_up "pg_ctl start failed (see $PG_DIR/server.log)"
fi

PSQL=("$BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt)
for _ in $(seq 1 30); do
    "${PSQL[@]}" -c "select 1" >/dev/null 2>&1 && break
    sleep 0.5
done
"${PSQL[@]}" -c "select 1" >/dev/null 2>&1 || give_up "server does not answer on 127.0.0.1:$PG_PORT"
if [ "$("${PSQL[@]}" -c "select 1 from pg_database where datname = '$PG_DB'")" != "1" ]; then
    "${PSQL[@]}" -c "create database \"$PG_DB\"" >&2 || give_up "cannot create database $PG_DB"
fi

echo "export SPLICE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/$PG_DB"
