#!/usr/bin/env python3
"""Answer eval, same as `rag eval`: python scripts/eval_answers.py EVAL_FILE --docs DIR [...]."""

import sys

from rag.interfaces.cli.main import app

if __name__ == "__main__":
    sys.exit(app(["eval", *sys.argv[1:]]))
