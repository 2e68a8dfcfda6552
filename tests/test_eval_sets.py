"""The eval sets themselves: every answerable case points at lines that exist in its docs
folder and hold what the case says an answer must include.

A case whose `expected_lines` drift from the file (the docs were updated, a range was typed
wrong) would score a right answer as wrong; this catches it before a figure is reported.
Lines are the file's lines as stored (for a notebook, lines of its JSON), as citations are.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("eval_sets", REPO / "scripts" / "eval_sets.py")
assert _spec is not None and _spec.loader is not None
eval_sets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eval_sets)


def _cases(cases_file: Path) -> list[dict]:
    return [json.loads(line) for line in cases_file.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _problems(cases_file: Path, docs: Path, every_file: bool = True) -> list[str]:
    """One line per way a case's expected lines fail to back its must_include strings.
    With `every_file`, each expected file's lines must also hold one of them (the older
    sets name some files that answer only in other words)."""
    problems = []
    for case in _cases(cases_file):
        if not case.get("answerable", True):
            continue
        held = []
        for path, ranges in case.get("expected_lines", {}).items():
            if path not in case["expected_sources"]:
                problems.append(f"{case['id']}: {path} has lines but is not an expected source")
            file = docs / path
            if not file.is_file():
                problems.append(f"{case['id']}: {path} is not in {docs}")
                continue
            lines = file.read_text(encoding="utf-8").removesuffix("\n").split("\n")
            text = ""
            for start, end in ranges:
                if not 1 <= start <= end <= len(lines):
                    problems.append(f"{case['id']}: {path}:{start}-{end} is outside the file")
                text += "\n".join(lines[start - 1:end]).lower() + "\n"
            must = [m for m in case.get("must_include", []) if m.lower() in text]
            if every_file and case.get("must_include") and not must:
                problems.append(f"{case['id']}: {path} lines hold none of its must_include")
            held.append(text)
        for m in case.get("must_include", []):
            if not any(m.lower() in text for text in held):
                problems.append(f"{case['id']}: {m!r} is in none of its expected lines")
    return problems


@pytest.mark.parametrize("name", ["flask", "notebooks", "hugo", *eval_sets.LOCAL])
def test_expected_lines_hold_the_must_include_strings(name: str):
    cases_file, docs = eval_sets.SETS[name]
    if not docs.is_dir():
        pytest.skip(f"{docs} is not available")
    assert _problems(cases_file, docs, every_file=name in ("flask", "notebooks")) == []


def test_held_out_sets_are_sized_and_mixed_as_described():
    """The README's rows for these two sets give their sizes; about one case in five has no
    answer in the docs."""
    for name, answerable, unanswerable in (("flask", 32, 8), ("notebooks", 20, 5)):
        cases = _cases(eval_sets.SETS[name][0])
        assert len({c["id"] for c in cases}) == len(cases)
        assert sum(c.get("answerable", True) for c in cases) == answerable
        assert sum(not c.get("answerable", True) for c in cases) == unanswerable


def test_a_drifted_range_is_reported(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Title\n\nThe port is 8080.\n", encoding="utf-8")
    cases = tmp_path / "cases.jsonl"
    case = {"id": "c1", "question": "Which port?", "expected_sources": ["a.md"],
            "expected_lines": {"a.md": [[3, 3]]}, "must_include": ["8080"]}
    cases.write_text(json.dumps(case) + "\n", encoding="utf-8")
    assert _problems(cases, docs) == []
    case["expected_lines"] = {"a.md": [[1, 2]]}
    cases.write_text(json.dumps(case) + "\n", encoding="utf-8")
    assert _problems(cases, docs) == [
        "c1: a.md lines hold none of its must_include",
        "c1: '8080' is in none of its expected lines"]
    case["expected_lines"] = {"a.md": [[3, 9]]}
    cases.write_text(json.dumps(case) + "\n", encoding="utf-8")
    assert _problems(cases, docs) == ["c1: a.md:3-9 is outside the file"]
