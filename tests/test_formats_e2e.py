"""One docs folder mixing Markdown, reStructuredText, a notebook, HTML and plain text:
indexed in one go, answered with citations whose lines hold the quoted text, verified
exact, and restricted files kept from users outside their groups."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import rag
from rag.indexer.embedding import FakeEmbedder
from rag.reader.formats import file_lines

FIXTURES = Path(__file__).parent / "fixtures" / "formats"


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda *_a, **_k: FakeEmbedder())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(FIXTURES, docs)
    (docs / "README.md").write_text("# Station handbook\n\nThe handbook covers the sensor "
                                    "station and its data.\n", encoding="utf-8")
    return docs


CASES = [  # question, file, a line the cited lines must include, words of the answer
    ("Which port does the server listen on by default?", "guide.rst", 16, "8080"),
    ("After how many seconds does the proxy close idle connections?", "page.html", 12, "30"),
    ("How do I drop the rows without answers before counting?", "demo.ipynb", 37, "dropna"),
    ("How often should the batteries be replaced?", "notes.txt", 15, "six months"),
]


def test_every_format_indexes_in_one_run(mixed: Path, tmp_path: Path) -> None:
    report = rag.index(mixed, tmp_path / "index")
    assert sorted(report.added) == ["README.md", "demo.ipynb", "guide.rst", "notes.txt",
                                    "page.html"]
    assert report.formats == {"markdown": 1, "rst": 1, "notebook": 1, "html": 1, "text": 1}
    assert "formats: " in report.summary()


@pytest.mark.parametrize(("question", "rel", "line", "words"), CASES)
def test_answers_cite_the_exact_lines_of_each_format(
    mixed: Path, tmp_path: Path, question: str, rel: str, line: int, words: str,
) -> None:
    rag.index(mixed, tmp_path / "index")
    answer = rag.ask(question, index=tmp_path / "index")
    assert not answer.insufficient_evidence and words in answer.answer
    lines = file_lines((mixed / rel).read_text(encoding="utf-8"), rel)
    first = answer.statements[0]
    cited = first.citations[0]
    assert cited.source_path == rel and cited.start_line <= line <= cited.end_line
    held = " ".join(lines[cited.start_line - 1:cited.end_line])
    assert words in held  # the cited lines of the file hold what the answer says
    checks = rag.verify(answer, docs=mixed, index=tmp_path / "index")
    assert checks and {c.status for c in checks} == {"exact"}


def test_a_changed_notebook_cell_no_longer_verifies(mixed: Path, tmp_path: Path) -> None:
    rag.index(mixed, tmp_path / "index")
    answer = rag.ask(CASES[2][0], index=tmp_path / "index")
    path = mixed / "demo.ipynb"
    path.write_text(path.read_text(encoding="utf-8").replace("dropna", "drop_na"),
                    encoding="utf-8")
    assert "exact" not in {c.status for c in rag.verify(answer, docs=mixed,
                                                        index=tmp_path / "index")}


def test_visibility_applies_to_every_format(mixed: Path, tmp_path: Path) -> None:
    staff = mixed / "staff"
    staff.mkdir()
    (staff / "secret.html").write_text("<html><body><h1>Vault</h1><p>The vault code is "
                                       "kept in the orange binder.</p></body></html>\n",
                                       encoding="utf-8")
    (mixed / "oncall.rst").write_text("On call\n=======\n\n:visibility: ops\n\nThe pager "
                                      "rota lives in the blue folder.\n", encoding="utf-8")
    (mixed / "unclear.txt").write_text(":visibility: ops, [x]\n\nRota text.\n",
                                       encoding="utf-8")
    settings = rag.settings()
    settings.visibility.groups_by_path = {"staff/**": ["staff"]}
    report = rag.index(mixed, tmp_path / "index", settings=settings)
    assert any("unclear.txt" in w for w in report.warnings) and "unclear.txt" not in \
        report.added  # unclear visibility: left out, never public
    for query, rel, group in (("vault code orange binder", "staff/secret.html", "staff"),
                              ("pager rota blue folder", "oncall.rst", "ops")):
        public = rag.search(query, index=tmp_path / "index", k=20)
        allowed = rag.search(query, index=tmp_path / "index", k=20, groups=[group])
        assert all(h.chunk.source_path != rel for h in public)
        assert any(h.chunk.source_path == rel for h in allowed)


def test_notebook_citations_name_the_cell_and_its_lines(mixed: Path, tmp_path: Path) -> None:
    from rag.interfaces.render import render_answer

    rag.index(mixed, tmp_path / "index")
    answer = rag.ask(CASES[2][0], index=tmp_path / "index")
    shown = render_answer(answer, mixed)
    assert "demo.ipynb:37-37 [cell 3, line 3]" in shown
