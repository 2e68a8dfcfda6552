#!/usr/bin/env bash
# Install, index the sample docs in corpus/, and answer a question with the embedded local model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/rag index corpus
.venv/bin/rag ask "${1:-How do I re-index after editing the docs?}"
