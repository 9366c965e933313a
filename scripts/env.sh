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
