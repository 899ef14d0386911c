# shellcheck shell=bash
# Redis for tests: install if missing (Debian's redis-server), start on a free loopback port
# with its data in a temporary directory and nothing persisted, stop. Source this file, then
# call redis_start (exports LAMBDA_IDEMPOTENCY_REDIS_URL) and redis_stop.

# shellcheck source=scripts/debian-package.sh
source "$(dirname "${BASH_SOURCE[0]}")/debian-package.sh"

redis_install() {
  command -v redis-server >/dev/null && return 0
  debian_package_install redis-server redis-server
}

redis_start() {
  redis_install || return 1
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  REDIS_DIR="$(mktemp -d -t lambda-idempotency-redis.XXXXXX)"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$REDIS_DIR" --save '' --appendonly no \
    --daemonize no --logfile "$REDIS_DIR/redis.log" &
  REDIS_PID=$!
  export LAMBDA_IDEMPOTENCY_REDIS_URL="redis://127.0.0.1:$port/"
  local i
  for i in $(seq 1 100); do
    if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
      echo "Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') is up at $LAMBDA_IDEMPOTENCY_REDIS_URL (pid $REDIS_PID)" >&2
      return 0
    fi
    if ! kill -0 "$REDIS_PID" 2>/dev/null; then
      echo "redis-server exited; its log:" >&2; cat "$REDIS_DIR/redis.log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "redis-server did not answer within 10 s" >&2
  return 1
}

redis_stop() {
  if [ -n "${REDIS_PID:-}" ] && kill -0 "$REDIS_PID" 2>/dev/null; then
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
  fi
  REDIS_PID=
  [ -n "${REDIS_DIR:-}" ] && rm -rf "$REDIS_DIR"
  return 0
}

# A Redis Cluster of three primaries (no replicas) on free loopback ports, each with its
# cluster bus on port + 10000, data in a temporary directory. Exports
# LAMBDA_IDEMPOTENCY_REDIS_CLUSTER_URLS (comma-separated node URLs).
redis_cluster_start() {
  redis_install || return 1
  REDIS_CLUSTER_DIR="$(mktemp -d -t lambda-idempotency-redis-cluster.XXXXXX)"
  local ports
  ports="$(python3 - <<'PY'
import random, socket
def free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()
chosen = []
# Client ports below 30000, so their cluster bus ports (+10000) never meet another node's.
while len(chosen) < 3:
    port = random.randint(20000, 29999)
    if port not in chosen and free(port) and free(port + 10000):
        chosen.append(port)
print(" ".join(map(str, chosen)))
PY
)" || return 1
  REDIS_CLUSTER_PIDS=()
  local port nodes=() urls=()
  for port in $ports; do
    mkdir -p "$REDIS_CLUSTER_DIR/$port"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$REDIS_CLUSTER_DIR/$port" --save '' \
      --appendonly no --cluster-enabled yes --cluster-config-file nodes.conf \
      --daemonize no --logfile "$REDIS_CLUSTER_DIR/$port/redis.log" &
    REDIS_CLUSTER_PIDS+=("$!")
    nodes+=("127.0.0.1:$port")
    urls+=("redis://127.0.0.1:$port/")
  done
  local i
  for port in $ports; do
    for i in $(seq 1 100); do
      redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG && break
      sleep 0.1
    done
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$REDIS_CLUSTER_DIR/create.log" 2>&1 || {
    echo "redis-cli --cluster create failed:" >&2; cat "$REDIS_CLUSTER_DIR/create.log" >&2
    for port in $ports; do echo "== node $port:" >&2; cat "$REDIS_CLUSTER_DIR/$port/redis.log" >&2; done
    return 1
  }
  local first="${ports%% *}"
  for i in $(seq 1 100); do
    if redis-cli -h 127.0.0.1 -p "$first" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
      export LAMBDA_IDEMPOTENCY_REDIS_CLUSTER_URLS
      LAMBDA_IDEMPOTENCY_REDIS_CLUSTER_URLS="$(IFS=,; echo "${urls[*]}")"
      echo "Redis Cluster of three primaries is up at $LAMBDA_IDEMPOTENCY_REDIS_CLUSTER_URLS" >&2
      return 0
    fi
    sleep 0.1
  done
  echo "the Redis Cluster did not reach cluster_state:ok within 10 s" >&2
  return 1
}

redis_cluster_stop() {
  local pid
  for pid in "${REDIS_CLUSTER_PIDS[@]:-}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for pid in "${REDIS_CLUSTER_PIDS[@]:-}"; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  done
  REDIS_CLUSTER_PIDS=()
  [ -n "${REDIS_CLUSTER_DIR:-}" ] && rm -rf "$REDIS_CLUSTER_DIR"
  return 0
}
