"""Chunk-level statistics of a docs folder, with the real tokenizer and no embedding.

    python scripts/chunk_stats.py /path/to/docs [/path/to/more/docs ...]

Prints, per folder: files, files that give no chunk, chunks, chunks without a heading,
chunks made only of link reference definitions, chunks whose text is over 256
word-pieces (what all-MiniLM-L6-v2 reads), and chunks whose embedded text (heading
included, plus the two special tokens) is over 256, i.e. is cut before the encoder sees
all of it. Nothing is embedded.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rag.core.config import Settings
from rag.indexer.embedding import _TokenCounter, default_model_path
from rag.indexer.indexing import embed_text, walk_docs
from rag.reader.chunking import chunk_document

ENCODER_TOKENS = 256
# Written out here rather than imported, so the script measures older code the same way.
LINK_DEFINITION = re.compile(r" {0,3}\[(?!\^)[^\]]+\]:[ \t]*\S+.*")  # footnotes are text


def stats(root: Path, settings: Settings, count: _TokenCounter) -> dict[str, int]:
    files, _ = walk_docs(root, settings.docs.extensions)
    row = dict.fromkeys(("files", "files without chunks", "chunks", "no heading",
                         "only link defs", "text > 256", "embedded > 256"), 0)
    for rel, path in files:
        text = path.read_bytes().decode("utf-8-sig")
        chunks = chunk_document(text, rel, max_tokens=settings.chunking.max_tokens,
                                min_tokens=settings.chunking.min_tokens, count_tokens=count)
        row["files"] += 1
        row["files without chunks"] += not chunks
        row["chunks"] += len(chunks)
        for c in chunks:
            row["no heading"] += not c.heading
            lines = [line for line in c.text.split("\n") if line.strip()]
            row["only link defs"] += all(LINK_DEFINITION.fullmatch(line) for line in lines)
            row["text > 256"] += count(c.text) > ENCODER_TOKENS
            row["embedded > 256"] += count(embed_text(c)) + 2 > ENCODER_TOKENS
    return row


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    settings = Settings()
    count = _TokenCounter(Path(default_model_path()) / "tokenizer.json")
    rows = {arg: stats(Path(arg), settings, count) for arg in argv}
    columns = list(next(iter(rows.values())))
    print("| docs | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, row in rows.items():
        cells = " | ".join(str(v) for v in row.values())
        print(f"| {Path(name).name} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
