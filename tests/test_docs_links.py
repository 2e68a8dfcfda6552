"""The README and docs/ point at things that exist: links, anchors, files and tests.

A newcomer follows these pointers; one that leads nowhere is a broken promise. The README
stays short enough to read in five minutes, and docs/config.md names every setting.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from rag.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "evals" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A path of the repository, in prose or a code span: rag/answer/extractive.py, `scripts/`.
# A path with a placeholder (`reports/eval-<generator>.json`) stands for many: not checked.
REPO_PATH = re.compile(
    r"(?<![\w./<-])(?:rag|scripts|tests|configs|corpus|evals|docs|reports)/[\w./-]*+(?![<*{])")
# Files the tools write when run, named in the docs but not kept in the repository.
WRITTEN_WHEN_RUN = ("reports/eval.png", "reports/sets/")
# A dotted name of the package in a code span: `rag.core.text.index_terms`.
DOTTED = re.compile(r"^rag(?:\.\w+)+$")
NOT_PYTHON = ("rag.groups",)  # a PostgreSQL setting the server sets per request
TEST_REF = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?|(?<![\w/])::(\w+)")


def prose_lines(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if match:
            found.add(slug(match.group(1)))
    return found


def links(path: Path) -> list[str]:
    return [m.group(1) for line in prose_lines(path) for m in LINK.finditer(line)]


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            name = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{name} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{name} (no heading #{anchor})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_repository_path_named_in_the_docs_exists() -> None:
    missing = []
    for page in PAGES:
        if page.parent.name == "evals":
            continue  # its paths are relative to evals/
        for line in prose_lines(page):
            for found in REPO_PATH.findall(line):
                path = found.rstrip(".,:;")
                if path not in WRITTEN_WHEN_RUN and not (ROOT / path).exists():
                    missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def resolves(dotted: str) -> bool:
    """Whether ``rag.a.b.name`` is a module of the package or a name in one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_dotted_name_in_the_docs_exists() -> None:
    missing = [f"{page.relative_to(ROOT)}: {span}" for page in PAGES
               for line in prose_lines(page) for span in CODE_SPAN.findall(line)
               if DOTTED.match(span) and span not in NOT_PYTHON and not resolves(span)]
    assert not missing, "names that do not exist:\n" + "\n".join(missing)


def test_every_test_named_beside_a_guarantee_exists() -> None:
    missing = []
    for page in PAGES:
        current = None
        for line in prose_lines(page):
            for match in TEST_REF.finditer(line):
                file, name, bare = match.groups()
                if file:
                    current = file
                    if not (ROOT / file).exists():
                        missing.append(f"{page.relative_to(ROOT)}: {file}")
                        continue
                name = name or bare
                if name and current and (ROOT / current).exists():
                    source = (ROOT / current).read_text(encoding="utf-8")
                    if not re.search(rf"^\s*(async\s+)?def {name}\(", source, re.MULTILINE):
                        missing.append(f"{page.relative_to(ROOT)}: {current}::{name}")
    assert not missing, "tests that do not exist:\n" + "\n".join(missing)


def test_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def test_config_page_names_every_setting() -> None:
    page = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    fields = [f"{section}.{name}" for section, field in Settings.model_fields.items()
              for name in field.annotation.model_fields]  # type: ignore[union-attr]
    absent = [f for f in fields if f"`{f}`" not in page]
    assert not absent, f"docs/config.md lacks {absent}: run python scripts/config_doc.py"


def test_the_checks_catch_a_broken_link_and_a_missing_test(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [x](missing.md), [y](#title) and [z](#nowhere).\n"
                    "```\n[in code](ignored.md)\n```\n", encoding="utf-8")
    assert links(page) == ["missing.md", "#title", "#nowhere"]
    assert anchors(page) == {"title"}
    assert slug("`rag serve-model`") == "rag-serve-model"
    assert slug("`--docs`: the freshness check") == "--docs-the-freshness-check"
    assert REPO_PATH.findall("see rag/answer/extractive.py, `python scripts/bench.py --quick`"
                             " and ../shared/docs/x.md, reports/eval-<generator>.json") == [
        "rag/answer/extractive.py", "scripts/bench.py"]
    assert resolves("rag.core.text.index_terms") and not resolves("rag.core.text.nope")
    refs = [m.groups() for m in TEST_REF.finditer("`tests/test_a.py::test_b`, `::test_c`")]
    assert refs == [("tests/test_a.py", "test_b", None), (None, None, "test_c")]
