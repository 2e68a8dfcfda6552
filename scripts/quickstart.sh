#!/usr/bin/env bash
# Install what the application needs, index the sample docs in corpus/, and answer a question.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh app
export HF_HUB_OFFLINE=1
.venv/bin/rag index corpus
# Exit 1 means "insufficient evidence": an answer too, so only errors (2 and up) fail here.
.venv/bin/rag ask "${1:-How do I re-index after editing the docs?}" || [ $? -eq 1 ]
