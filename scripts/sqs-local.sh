# shellcheck shell=bash
# A local SQS-compatible server for tests: moto's server (PyPI, pinned in
# scripts/moto-requirements.txt, installed once into its own venv), started on a free loopback
# port, stopped. Source this file, then call sqs_start (exports LAMBDA_IDEMPOTENCY_SQS_URL)
# and sqs_stop.

SQS_VENV="${LAMBDA_IDEMPOTENCY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lambda-idempotency}/moto-venv"

sqs_install() {
  local requirements
  requirements="$(dirname "${BASH_SOURCE[0]}")/moto-requirements.txt"
  if [ -x "$SQS_VENV/bin/moto_server" ] && cmp -s "$requirements" "$SQS_VENV/requirements.txt"; then
    return 0
  fi
  echo "Installing moto's server into $SQS_VENV (once)" >&2
  python3 -m venv "$SQS_VENV" >&2 || return 1
  "$SQS_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2 || return 1
  cp "$requirements" "$SQS_VENV/requirements.txt"
}

sqs_start() {
  sqs_install || return 1
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  SQS_LOG="$(mktemp -t lambda-idempotency-moto.XXXXXX.log)"
  "$SQS_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$SQS_LOG" 2>&1 &
  SQS_PID=$!
  export LAMBDA_IDEMPOTENCY_SQS_URL="http://127.0.0.1:$port"
  local i
  for i in $(seq 1 100); do
    if curl -s -o /dev/null "$LAMBDA_IDEMPOTENCY_SQS_URL/moto-api/"; then
      echo "moto's SQS server is up at $LAMBDA_IDEMPOTENCY_SQS_URL (pid $SQS_PID)" >&2
      return 0
    fi
    if ! kill -0 "$SQS_PID" 2>/dev/null; then
      echo "moto_server exited; its log:" >&2; cat "$SQS_LOG" >&2; return 1
    fi
    sleep 0.1
  done
  echo "moto_server did not answer within 10 s" >&2
  return 1
}

sqs_stop() {
  if [ -n "${SQS_PID:-}" ] && kill -0 "$SQS_PID" 2>/dev/null; then
    kill "$SQS_PID" 2>/dev/null || true
    wait "$SQS_PID" 2>/dev/null || true
  fi
  SQS_PID=
  [ -n "${SQS_LOG:-}" ] && rm -f "$SQS_LOG"
  return 0
}
