# shellcheck shell=bash
# Installs the Python-packaged tools (cargo-lambda with zig, AWS SAM CLI, cfn-lint) into one
# venv under the cache directory, pinned by scripts/tools-requirements.txt. Source this file
# and call tools_install: it puts the venv first on PATH, so `python3` there can import zig
# (cargo-lambda's cross-compiler) and `cargo lambda`, `sam` and `cfn-lint` resolve.

TOOLS_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_HOME="${LAMBDA_IDEMPOTENCY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lambda-idempotency}/tools-venv"

tools_install() {
  local requirements="$TOOLS_SCRIPTS/tools-requirements.txt"
  if [ ! -x "$TOOLS_HOME/bin/python3" ] || ! cmp -s "$requirements" "$TOOLS_HOME/requirements.txt"; then
    echo "Installing cargo-lambda, zig, AWS SAM CLI and cfn-lint into $TOOLS_HOME (once)" >&2
    python3 -m venv "$TOOLS_HOME" >&2 || return 1
    "$TOOLS_HOME/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2 || return 1
    cp "$requirements" "$TOOLS_HOME/requirements.txt"
  fi
  export PATH="$TOOLS_HOME/bin:$PATH"
  export SAM_CLI_TELEMETRY=0
}
