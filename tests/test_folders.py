"""`rag ask/search --docs DIR`: one command, a cache index per folder, kept up to date."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.core.config import Settings
from rag.indexer import embedding
from rag.indexer.folders import cache_index_for
from rag.interfaces.cli.main import app
from rag.stores import folder as store

QUESTION = "Which port does the HTTP API listen on by default?"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[embedding.FakeEmbedder]:
    """Every embedder the commands build is a fake one; the cache lives under tmp_path."""
    made: list[embedding.FakeEmbedder] = []

    def make(*_args: object, **_kwargs: object) -> embedding.FakeEmbedder:
        made.append(embedding.FakeEmbedder())
        return made[-1]

    monkeypatch.setattr(embedding, "make_embedder", make)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return made


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def embedded(made: list[embedding.FakeEmbedder]) -> int:
    return sum(e.calls for e in made)


def test_ask_with_docs_indexes_once_then_only_checks(docs: Path, fake, tmp_path: Path):
    code, out, err = run("ask", QUESTION, "--docs", str(docs), "--generator", "extractive",
                         "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["citations"] and answer["docs_root"] == str(docs.resolve())
    assert "indexed" in err and embedded(fake) > 0
    index = cache_index_for(docs, Settings())
    assert index.is_relative_to(tmp_path / "cache" / "rag" / "indexes")
    live = (index / store.CURRENT).read_text()

    fake.clear()
    code, out, err = run("ask", QUESTION, "--docs", str(docs), "--generator", "extractive")
    assert code == 0 and "Citations:" in out and "server-ports.md:" in out
    assert err == ""  # nothing re-indexed, nothing said
    assert embedded(fake) == 1  # the question only
    assert (index / store.CURRENT).read_text() == live  # no new version written


def test_a_cache_from_an_older_version_is_rebuilt_not_refused(docs: Path, fake, monkeypatch):
    """After an upgrade that changes the word index's files, a `--docs` command rebuilds the
    folder's cache index instead of asking for `rag index`, which its user never ran."""
    assert run("search", "port", "--docs", str(docs), "--mode", "lexical")[0] == 0
    from rag.stores import lexical

    monkeypatch.setattr(lexical, "LAYOUT", lexical.LAYOUT + 1)  # the upgrade
    code, out, err = run("search", "port", "--docs", str(docs), "--mode", "lexical")
    assert code == 0 and "server-ports.md" in out, err
    assert "indexed" in err


def test_a_change_reaches_the_next_search(docs: Path, fake):
    code, out, _ = run("search", "quokka", "--docs", str(docs), "--json", "--mode", "lexical")
    assert code == 0 and out == ""
    (docs / "faq.md").write_text("# FAQ\n\nThe quokka mascot is called Quinn.\n",
                                 encoding="utf-8")
    code, out, err = run("search", "quokka", "--docs", str(docs), "--json", "--mode", "lexical")
    assert code == 0 and "1 changed" in err
    hits = [json.loads(line) for line in out.splitlines()]
    assert hits[0]["source_path"] == "faq.md" and "Quinn" in hits[0]["text"]


def test_visibility_config_change_reindexes_unchanged_files(docs: Path, fake, tmp_path: Path):
    config = tmp_path / "c.toml"
    config.write_text("", encoding="utf-8")
    args = ("search", "default ports", "--docs", str(docs), "--json", "-k", "50",
            "--config", str(config))
    code, out, _ = run(*args)
    assert code == 0 and any('"server-ports.md"' in line for line in out.splitlines())
    config.write_text('[visibility.groups_by_path]\n"server-ports.md" = ["ops"]\n',
                      encoding="utf-8")
    code, out, _ = run(*args)
    assert code == 0 and not any('"server-ports.md"' in line for line in out.splitlines())


def test_index_records_its_docs_and_ask_quotes_from_them(docs: Path, fake, tmp_path: Path):
    index = tmp_path / "idx"
    assert run("index", str(docs), "--index", str(index))[0] == 0
    code, out, _ = run("ask", QUESTION, "--index", str(index), "--generator", "extractive",
                       "--json")
    assert code == 0 and json.loads(out)["docs_root"] == str(docs.resolve())


def test_docs_folder_missing_is_one_line(fake, tmp_path: Path):
    code, _, err = run("ask", "x", "--docs", str(tmp_path / "nope"))
    assert code == 5 and "does not exist" in err and err.count("\n") == 1


def test_ask_k_limits_the_hits_before_evidence(docs: Path, fake):
    code, out, _ = run("ask", QUESTION, "--docs", str(docs), "--generator", "extractive",
                       "--json", "-k", "1")
    assert code == 0
    answer = json.loads(out)
    assert len(answer["evidence"]) == 1 and len(answer["citations"]) == 1
    code, _, err = run("ask", QUESTION, "--docs", str(docs), "-k", "0")
    assert code == 2 and "Traceback" not in err


def test_version_is_printed():
    code, out, _ = run("--version")
    assert code == 0 and out.startswith("rag ")


def test_eval_with_an_index_reads_the_docs_it_was_built_from(docs: Path, fake, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    index = tmp_path / "idx"
    assert run("index", str(docs), "--index", str(index))[0] == 0
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"id": "p", "question": QUESTION,
                                     "expected_sources": ["server-ports.md"]}) + "\n",
                         encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # docs.root (corpus/) does not exist here
    out = tmp_path / "report.json"
    code, _, err = run("eval", str(eval_file), "--index", str(index), "--generator",
                       "extractive", "--out", str(out))
    assert code == 0, err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["docs"] == str(docs.resolve()) and not report["missing_sources"]


# --- the cache holds the docs' text: only its owner may read it -----------------------------


def modes_under(root: Path) -> dict[str, int]:
    """The permission bits of ``root`` and of everything below it, by relative path."""
    return {str(p.relative_to(root)): p.stat().st_mode & 0o777
            for p in [root, *root.rglob("*")]}


@pytest.fixture
def umask_022():
    """The usual umask, under which new files are 0644 and new folders 0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_cache_index_is_readable_by_its_owner_only(docs: Path, fake, tmp_path: Path, umask_022):
    code, _, err = run("search", "port", "--docs", str(docs), "--json")
    assert code == 0, err
    index = cache_index_for(docs, Settings())
    for folder in (tmp_path / "cache", tmp_path / "cache" / "rag", index.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder  # ~/.cache too, made by us
    modes = modes_under(index)
    assert "CURRENT" in modes and any(name.endswith("vectors.faiss") for name in modes)
    assert {mode for name, mode in modes.items() if (index / name).is_dir()} == {0o700}
    assert {mode for name, mode in modes.items() if (index / name).is_file()} == {0o600}


def test_cache_left_open_by_an_older_version_is_closed(docs: Path, fake, tmp_path: Path,
                                                       umask_022):
    index = cache_index_for(docs, Settings())
    index.mkdir(parents=True)  # 0755 all the way, as before
    code, _, err = run("search", "port", "--docs", str(docs), "--json")
    assert code == 0, err
    for folder in (tmp_path / "cache" / "rag", index.parent, index):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_an_index_placed_elsewhere_keeps_the_users_permissions(docs: Path, fake, tmp_path: Path,
                                                               umask_022):
    index = tmp_path / "shared" / "idx"
    code, _, err = run("search", "port", "--docs", str(docs), "--index", str(index), "--json")
    assert code == 0, err
    modes = modes_under(index)
    assert {mode for name, mode in modes.items() if (index / name).is_dir()} == {0o755}
    assert {mode for name, mode in modes.items() if (index / name).is_file()} == {0o644}
    assert not (tmp_path / "cache").exists()  # nothing written to the cache either


def test_configs_that_restrict_differently_never_share_a_cache_index(docs: Path, fake,
                                                                      tmp_path: Path):
    """Two configs used side by side (one open, one restricting a file) each search an
    index of their own, so neither can see what the other's re-index wrote."""
    open_settings = Settings()
    closed = Settings.model_validate(
        {"visibility": {"groups_by_path": {"server-ports.md": ["ops"]}}})
    deny = Settings.model_validate({"visibility": {"default_groups": ["staff"]}})
    folders = {cache_index_for(docs, s) for s in (open_settings, closed, deny)}
    assert len(folders) == 3
    config = tmp_path / "closed.toml"
    config.write_text('[visibility.groups_by_path]\n"server-ports.md" = ["ops"]\n',
                      encoding="utf-8")
    for _ in range(2):  # interleaved: the open config's index never serves the closed one
        code, out, _ = run("search", "default ports", "--docs", str(docs), "--json", "-k", "50")
        assert code == 0 and '"server-ports.md"' in out
        code, out, _ = run("search", "default ports", "--docs", str(docs), "--json", "-k", "50",
                           "--config", str(config))
        assert code == 0 and '"server-ports.md"' not in out
