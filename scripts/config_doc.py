"""Write docs/config.md: every setting of configs/default.toml with its default and meaning.

The meanings are the ``description`` of each field in rag/core/config.py, so the page says
what the code validates. Run it after adding or changing a setting:

    python scripts/config_doc.py            # rewrites docs/config.md
    python scripts/config_doc.py --check    # exit 1 when docs/config.md is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "docs" / "config.md"
HEAD = """# Settings

Every setting, its default and what it does. The defaults live in `configs/default.toml`;
`--config FILE` names another file, and `RAG_<SECTION>__<FIELD>` overrides any one value from
the environment (`RAG_RETRIEVAL__K=5`); a mistyped override is a config error, exit 4
([usage.md](usage.md#settings-and-overrides)). This page is written by
`python scripts/config_doc.py` from the descriptions in `rag/core/config.py`.
"""


def cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    """The page: one table per config section."""
    from rag.core.config import Settings

    parts = [HEAD]
    for section, field in Settings.model_fields.items():
        model = field.annotation
        parts.append(f"\n## `[{section}]`\n\n| setting | default | meaning |\n| --- | --- | --- |\n")
        for name, sub in model.model_fields.items():  # type: ignore[union-attr]
            default = json.dumps(sub.get_default(call_default_factory=True), ensure_ascii=False)
            parts.append(f"| `{section}.{name}` | `{cell(default)}` | {cell(sub.description or '')} |\n")
    return "".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check docs/config.md")
    text = render()
    if parser.parse_args().check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(REPO)} is out of date: run python scripts/config_doc.py")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
