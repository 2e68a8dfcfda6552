"""Paths: nothing is read or written outside the roots the user chose (see rag/core/paths.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.core.config import Settings
from rag.core.errors import AccessError
from rag.core.paths import (
    check_index_path,
    check_inside,
    check_relative,
    follow_link,
    real_relative,
)
from rag.eval.evaluation import load_cases
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index, walk_docs
from rag.interfaces.cli.main import app
from rag.stores import folder as store

OUTSIDE_MARKER = "zebracorn"  # a word that only the files outside the docs root contain


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and "Traceback" not in message


# --- check_inside / check_relative / check_index_path ---------------------------------


def test_check_inside_accepts_a_file_below_the_root(tmp_path):
    inner = write(tmp_path / "docs" / "a" / "b.md", "x")
    assert check_inside(inner, tmp_path / "docs", "cited file") == inner.resolve()


@pytest.mark.parametrize("rel", ["../secret.md", "a/../../secret.md", "/etc/passwd"])
def test_check_inside_rejects_a_path_that_leaves_the_root(tmp_path, rel):
    docs = tmp_path / "docs"
    docs.mkdir()
    with pytest.raises(AccessError) as err:
        check_inside(docs / rel, docs, "cited file")
    assert one_line(str(err.value)) and "cited file" in str(err.value)
    assert "outside" in str(err.value)


def test_check_inside_sees_through_a_symlink(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    write(tmp_path / "secret.md", "x")
    (docs / "innocent.md").symlink_to(tmp_path / "secret.md")
    with pytest.raises(AccessError, match="outside"):
        check_inside(docs / "innocent.md", docs, "cited file")


@pytest.mark.parametrize("rel", ["../../etc/passwd", "/etc/passwd", "a/../../b.md", "", " a.md",
                                 "a\x00.md", "a\nb.md"])
def test_check_relative_rejects_escapes(rel):
    with pytest.raises(AccessError) as err:
        check_relative(rel, "expected source")
    assert one_line(str(err.value)) and "outside the docs folder" in str(err.value)


def test_check_inside_turns_an_unresolvable_path_into_an_access_error(tmp_path):
    with pytest.raises(AccessError) as err:
        check_inside(tmp_path / "a\x00.md", tmp_path, "cited file")
    assert one_line(str(err.value))


def test_check_relative_keeps_ordinary_paths():
    assert check_relative("guide/ports.md") == "guide/ports.md"
    assert check_relative("guide\\ports.md") == "guide/ports.md"  # written on Windows


@pytest.mark.parametrize(
    "path", ["indexes/../../tmp/x", "../x", "indexes/..", "/tmp/../etc/x", "indexes/../indexes/x"]
)
def test_index_path_with_dotdot_is_rejected(path):
    with pytest.raises(AccessError) as err:
        check_index_path(Path(path))
    message = str(err.value)
    assert one_line(message) and path in message and "'..'" in message


@pytest.mark.parametrize("path", ["indexes/default", "/tmp/rag-index", "my..index/x"])
def test_index_path_without_dotdot_is_kept(path):
    assert check_index_path(Path(path)) == Path(path)


# --- eval files ------------------------------------------------------------------------


def eval_file(tmp_path: Path, second: dict) -> Path:
    good = {"id": "ok", "question": "Which port?", "expected_sources": ["server-ports.md"]}
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(second) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "case",
    [
        {"expected_sources": ["../../etc/passwd"]},
        {"expected_sources": ["/etc/passwd"]},
        {"expected_sources": ["server-ports.md"], "expected_lines": {"../x.md": [[1, 2]]}},
    ],
)
def test_eval_case_pointing_outside_the_docs_is_rejected(tmp_path, case):
    path = eval_file(tmp_path, {"id": "bad", "question": "q?", **case})
    with pytest.raises(AccessError) as err:
        load_cases(path)
    message = str(err.value)
    assert one_line(message)
    assert message.startswith(f"{path}:2: ") and "outside the docs folder" in message


def test_cli_eval_rejects_an_escaping_source_with_one_line(tmp_path, docs, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written here either
    path = eval_file(tmp_path, {"id": "bad", "question": "q?",
                                "expected_sources": ["../../etc/passwd"]})
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(app, ["eval", str(path), "--docs", str(docs),
                                      "--generator", "extractive"])
    assert result.exit_code == 9
    err = result.stderr.strip()
    assert one_line(err) and err.startswith("error: ") and f"{path}:2:" in err
    assert "../../etc/passwd" in err
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no index, no report


# --- symlinks in the docs folder -------------------------------------------------------


@pytest.fixture
def linked_docs(tmp_path: Path) -> Path:
    """docs/ with a public page, a restricted folder, and links that leave the root."""
    docs = tmp_path / "docs"
    write(docs / "public" / "page.md", "# Page\n\nPorts are listed in the server guide.\n")
    write(docs / "internal" / "vault.md", "# Vault\n\nThe vault opens with the blue key.\n")
    outside = tmp_path / "outside"
    write(outside / "secret.md", f"# Secret\n\nThe {OUTSIDE_MARKER} lives outside the docs.\n")
    (docs / "leak.md").symlink_to(outside / "secret.md")
    (docs / "public" / "elsewhere").symlink_to(outside, target_is_directory=True)
    (docs / "public" / "dangling.md").symlink_to(tmp_path / "missing.md")
    return docs


def build(docs: Path, tmp_path: Path, settings: Settings | None = None):
    index = tmp_path / "index"
    report = build_index(docs, index, settings or Settings(), FakeEmbedder())
    return report, store.load(index)


def test_symlinks_leaving_the_docs_root_are_skipped_with_a_warning(linked_docs, tmp_path):
    report, version = build(linked_docs, tmp_path)
    joined = "\n".join(report.warnings)
    assert "skipped leak.md: symlink points outside the docs folder" in joined
    assert "skipped public/elsewhere: symlink points outside the docs folder" in joined
    assert "skipped public/dangling.md: broken symlink" in joined
    assert all(one_line(w) for w in report.warnings)
    paths = {c.source_path for c in version.chunks}
    assert paths == {"public/page.md", "internal/vault.md"}
    assert all(OUTSIDE_MARKER not in c.text for c in version.chunks)


def test_follow_link_says_why_a_link_is_not_followed(linked_docs):
    root = linked_docs.resolve()
    with pytest.raises(AccessError, match=r"^leak\.md: symlink points outside"):
        follow_link(linked_docs / "leak.md", root, "leak.md")
    with pytest.raises(AccessError, match="broken symlink"):
        follow_link(linked_docs / "public" / "dangling.md", root)
    (linked_docs / "alias.md").symlink_to(linked_docs / "public" / "page.md")
    target = follow_link(linked_docs / "alias.md", root)
    assert real_relative(target, root) == "public/page.md"


def test_a_link_to_a_folder_inside_the_root_is_followed_once(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "guide" / "ports.md", "# Ports\n\nThe server listens on port 8080.\n")
    write(docs / ".drafts" / "draft.md", "# Draft\n\nA draft reached only through a link.\n")
    (docs / "drafts").symlink_to(docs / ".drafts", target_is_directory=True)
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    files, warnings = walk_docs(docs, [".md"])
    texts = [p.read_text(encoding="utf-8") for _, p in files]
    assert sum("port 8080" in t for t in texts) == 1  # the loop adds nothing
    assert sum("reached only through a link" in t for t in texts) == 1
    assert any(w.startswith("skipped loop:") for w in warnings)


# The rule (rag/core/paths.py): a file is a Source once, under its real path.


def test_a_file_reachable_twice_is_indexed_once_under_its_real_path(linked_docs, tmp_path):
    (linked_docs / "public" / "page-alias.md").symlink_to(linked_docs / "public" / "page.md")
    (linked_docs / "aaa-internal").symlink_to(linked_docs / "internal", target_is_directory=True)
    _, version = build(linked_docs, tmp_path)
    assert sorted({c.source_path for c in version.chunks}) == ["internal/vault.md",
                                                             "public/page.md"]
    texts = [c.text for c in version.chunks]
    assert len(texts) == len(set(texts))


def test_a_public_link_cannot_unlock_a_restricted_file(linked_docs, tmp_path):
    settings = Settings.model_validate(
        {"visibility": {"groups_by_path": {"internal/*": ["staff"]}}}
    )
    (linked_docs / "public" / "vault-copy.md").symlink_to(linked_docs / "internal" / "vault.md")
    (linked_docs / "aaa-internal").symlink_to(linked_docs / "internal", target_is_directory=True)
    _, version = build(linked_docs, tmp_path, settings)
    vault = [c for c in version.chunks if "blue key" in c.text]
    assert vault and all(c.visibility == ("staff",) for c in vault)
