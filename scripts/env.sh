# Sourced by the other scripts: makes sure the project's environment exists and is in sync with
# uv.lock, using nothing but the machine's python3 (3.11+). Idempotent and quick when up to date.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
UV_VERSION="0.13.9"
TOOLS="$ROOT/.tools"
if [ ! -x "$TOOLS/bin/uv" ] || [ "$("$TOOLS/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
UV="$TOOLS/bin/uv"
export UV_PROJECT_ENVIRONMENT="$ROOT/.venv"
"$UV" sync --frozen --quiet --project "$ROOT"
VENV="$ROOT/.venv"
# Bytecode for the environment's packages, made once per lockfile, and for the project's own
# code: uv does not compile what it installs, and where PYTHONDONTWRITEBYTECODE is set (as on
# this project's CI machines) no import caches it either, so every process the suites and the
# benchmarks start (gateways, simulated engines, the CLI) would compile all it imports again:
# importing the gateway took 3.9 s of CPU so, 1.3 s from bytecode. (uv's own --compile-bytecode
# would compile the whole environment at every sync, and every script syncs.) compileall skips
# what is current. Some packages ship files not meant to compile (templates, other Pythons'
# code): those are passed over.
bytecode_stamp="$VENV/.bytecode"
lock_digest="$(sha256sum "$ROOT/uv.lock" | cut -d' ' -f1)"
if [ "$(cat "$bytecode_stamp" 2>/dev/null || true)" != "$lock_digest" ]; then
  "$VENV/bin/python" -m compileall -q -j 0 "$VENV/lib" > /dev/null 2>&1 || true
  echo "$lock_digest" > "$bytecode_stamp"
fi
"$VENV/bin/python" -m compileall -q "$ROOT/src" "$ROOT/bench" > /dev/null
