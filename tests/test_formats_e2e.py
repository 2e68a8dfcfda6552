"""One docs folder mixing Markdown, reStructuredText, a notebook, HTML and plain text:
indexed in one go, answered with citations whose lines hold the quoted text, verified
exact, and restricted files kept from users outside their groups."""

from __future__ import annotations

import json
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


def cell_source_line(notebook: Path, cell: int, line: int) -> str:
    """Line ``line`` of cell ``cell`` (both from 1) as Jupyter shows the notebook."""
    import warnings

    import nbformat

    with warnings.catch_warnings():  # the fixture's cells have no ids (nbformat < 4.5)
        warnings.simplefilter("ignore")
        cells = nbformat.read(notebook, as_version=4).cells
    return str(cells[cell - 1].source.split("\n")[line - 1])


def test_json_answers_carry_a_notebook_citations_cell(mixed: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rag.interfaces.cli.main import app

    index = str(tmp_path / "index")
    assert CliRunner().invoke(app, ["index", str(mixed), "--index", index]).exit_code == 0

    def ask(question: str) -> dict:
        result = CliRunner().invoke(app, ["ask", question, "--index", index, "--json"])
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    data = ask(CASES[2][0])
    cited = data["citations"][0]
    assert cited["source_path"] == "demo.ipynb" and cited["start_line"] == 37
    assert (cited["cell"], cited["cell_lines"]) == (3, [3, 3]) and "end_cell" not in cited
    # The cell and line name the notebook's own text, as Jupyter shows it.
    assert cell_source_line(mixed / "demo.ipynb", 3, 3) == cited["text"]
    assert data["statements"][0]["citations"][0]["cell"] == 3
    other = ask(CASES[0][0])["citations"][0]
    assert other["source_path"] == "guide.rst" and not {"cell", "cell_lines"} & set(other)
    (tmp_path / "answer.json").write_text(json.dumps(data), encoding="utf-8")
    checked = CliRunner().invoke(app, ["verify", str(tmp_path / "answer.json"), "--docs",
                                       str(mixed), "--index", index])
    assert checked.exit_code == 0 and "exact" in checked.stdout


def test_http_answers_carry_a_notebook_citations_cell(mixed: Path, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from rag.indexer.indexing import build_index
    from rag.interfaces.http.server import create_app

    settings, embedder = rag.settings(), FakeEmbedder()
    build_index(mixed, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=mixed,
                     generator="extractive", embedder=embedder)
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        notebook = client.post("/ask", json={"question": CASES[2][0]}).json()["citations"][0]
        other = client.post("/ask", json={"question": CASES[0][0]}).json()["citations"][0]
        schema = client.get("/openapi.json").json()["components"]["schemas"]["CitationOut"]
    assert notebook["source_path"] == "demo.ipynb"
    assert (notebook["cell"], notebook["cell_lines"], notebook["end_cell"]) == (3, [3, 3], None)
    assert cell_source_line(mixed / "demo.ipynb", 3, 3) == notebook["lines"][0]["text"]
    assert other["source_path"] == "guide.rst" and other["cell"] is other["cell_lines"] is None
    assert {"cell", "cell_lines", "end_cell"} <= set(schema["properties"])
