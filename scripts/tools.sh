# shellcheck shell=bash
# Installs the Python-packaged tools into one venv under the cache directory, by set, each
# pinned by its requirements file: `cargo-lambda` (scripts/tools-cargo-lambda.txt:
# cargo-lambda and zig) and `sam` (scripts/tools-sam.txt: the AWS SAM CLI and cfn-lint).
# Source this file and call `tools_install SET...`: it installs the sets that are missing or
# changed, then puts the venv first on PATH, so `python3` there can import zig (cargo-lambda's
# cross-compiler) and `cargo lambda`, `sam` and `cfn-lint` resolve.

TOOLS_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_HOME="${LAMBDA_IDEMPOTENCY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lambda-idempotency}/tools-venv"

tools_install() {
  local set requirements
  for set in "$@"; do
    requirements="$TOOLS_SCRIPTS/tools-$set.txt"
    [ -f "$requirements" ] || { echo "tools_install: no tool set '$set'" >&2; return 1; }
    if [ ! -x "$TOOLS_HOME/bin/python3" ]; then
      python3 -m venv "$TOOLS_HOME" >&2 || return 1
    fi
    if ! cmp -s "$requirements" "$TOOLS_HOME/installed-$set.txt"; then
      echo "Installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $TOOLS_HOME (once)" >&2
      "$TOOLS_HOME/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2 || return 1
      cp "$requirements" "$TOOLS_HOME/installed-$set.txt"
    fi
  done
  export PATH="$TOOLS_HOME/bin:$PATH"
  export SAM_CLI_TELEMETRY=0
}

# Powertools for AWS Lambda (Python) and boto3, pinned in scripts/bench-requirements.txt, in
# their own venv: the benchmarks' baseline and the interoperability test's other side. Sets
# POWERTOOLS_PYTHON to its interpreter.
POWERTOOLS_VENV="${LAMBDA_IDEMPOTENCY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lambda-idempotency}/bench-venv"

powertools_install() {
  local requirements="$TOOLS_SCRIPTS/bench-requirements.txt"
  if [ ! -x "$POWERTOOLS_VENV/bin/python3" ] || ! cmp -s "$requirements" "$POWERTOOLS_VENV/requirements.txt"; then
    echo "Installing Powertools for AWS Lambda (Python) into $POWERTOOLS_VENV (once)" >&2
    python3 -m venv "$POWERTOOLS_VENV" >&2 || return 1
    "$POWERTOOLS_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2 || return 1
    cp "$requirements" "$POWERTOOLS_VENV/requirements.txt"
  fi
  export POWERTOOLS_PYTHON="$POWERTOOLS_VENV/bin/python3"
}
