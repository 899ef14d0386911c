# shellcheck shell=bash
# PostgreSQL for tests: install if missing (Debian's postgresql), initialise a cluster in a
# temporary directory, start it on a free loopback port (trust authentication, loopback only,
# nothing fsynced), stop it and remove its data. Source this file, then call postgres_start
# (exports LAMBDA_IDEMPOTENCY_POSTGRES_URL) and postgres_stop. As root, the server runs as
# the `postgres` user the package creates (PostgreSQL refuses to run as root).

postgres_bindir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

# shellcheck source=scripts/debian-package.sh
source "$(dirname "${BASH_SOURCE[0]}")/debian-package.sh"

postgres_install() {
  postgres_bindir >/dev/null && return 0
  debian_package_install postgresql PostgreSQL
}

# Runs a command as the cluster's owner (the `postgres` user when we are root).
postgres_as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

postgres_start() {
  postgres_install || return 1
  local bin port
  bin="$(postgres_bindir)"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  POSTGRES_DIR="$(mktemp -d -t lambda-idempotency-postgres.XXXXXX)"
  [ "$(id -u)" = 0 ] && chown postgres "$POSTGRES_DIR"
  postgres_as_owner "$bin/initdb" -D "$POSTGRES_DIR/data" -U postgres --auth=trust \
    --no-sync -E UTF8 --locale=C >"$POSTGRES_DIR/initdb.log" 2>&1 \
    || { echo "initdb failed:" >&2; cat "$POSTGRES_DIR/initdb.log" >&2; return 1; }
  if ! postgres_as_owner "$bin/pg_ctl" -D "$POSTGRES_DIR/data" -l "$POSTGRES_DIR/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $POSTGRES_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null; then
    echo "PostgreSQL did not start; its log:" >&2; cat "$POSTGRES_DIR/server.log" >&2; return 1
  fi
  POSTGRES_BIN="$bin"
  export LAMBDA_IDEMPOTENCY_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') is up at $LAMBDA_IDEMPOTENCY_POSTGRES_URL" >&2
}

postgres_stop() {
  if [ -n "${POSTGRES_DIR:-}" ] && [ -f "$POSTGRES_DIR/data/postmaster.pid" ]; then
    postgres_as_owner "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  [ -n "${POSTGRES_DIR:-}" ] && rm -rf "$POSTGRES_DIR"
  POSTGRES_DIR=
  return 0
}
