"""A first quote that stops only because its hit ended reads on into its section's next
chunk: where a chunk ends is the indexer's choice, not the page's."""

from __future__ import annotations

from rag.core.config import ChunkingSettings, Settings
from rag.core.records import Chunk, Evidence, SearchHit
from rag.generator.extractive import ExtractiveGenerator
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.pipeline import Pipeline
from rag.retriever.retrieval import Retriever
from rag.stores import folder as store

PAGE = [
    "# Proxies",  # 1
    "",
    "## HTTPS through a proxy",  # 3
    "",
    "Requests to HTTPS sites through the proxy time out while plain HTTP works.",  # 5
    "It is likely that the proxy does not support connecting via HTTPS.",  # 6
    "",
    "Change the scheme of the HTTPS proxy to http instead of https.",  # 8
    "Requests then connect through the proxy as plain HTTP first.",  # 9
    "",
    "## Timeouts",  # 11
    "",
    "Every request times out after five seconds unless told otherwise.",  # 13
]


def _evidence(first: int, last: int, label: str = "E1") -> Evidence:
    chunk = Chunk(chunk_id=f"chunk-{label}", source_id="proxies.md", source_path="proxies.md",
                  text="\n".join(PAGE[first - 1:last]), start_line=first, end_line=last,
                  heading="Proxies > HTTPS through a proxy")
    return Evidence(label, SearchHit(chunk, 1.0, int(label[1:])))


QUESTION = "Why do HTTPS requests through the proxy time out while plain HTTP works?"


def test_a_first_quote_ending_with_its_hit_reads_on_into_the_next_chunk() -> None:
    short, longer = _evidence(3, 6), _evidence(3, 9)
    asked: list[str] = []

    def read_on(ev: Evidence) -> Evidence | None:
        asked.append(ev.label)
        return longer

    alone = ExtractiveGenerator(FakeEmbedder()).generate(QUESTION, [short])
    assert alone.quotes == ((5, 6),) and alone.evidence is None  # the chunk's last line
    result = ExtractiveGenerator(FakeEmbedder()).generate(QUESTION, [short], read_on=read_on)
    assert asked == ["E1"]
    assert result.quotes == ((5, 9),)
    text = result.answer.statements[0].text
    assert text.startswith(alone.answer.statements[0].text)  # what was chosen stays first
    assert "Change the scheme of the HTTPS proxy" in text
    assert result.evidence == (longer,)  # what the verifier checks the quote against


def test_a_quote_that_ends_inside_its_hit_does_not_read_on() -> None:
    asked: list[str] = []

    def read_on(ev: Evidence) -> Evidence | None:
        asked.append(ev.label)
        return None

    result = ExtractiveGenerator(FakeEmbedder()).generate(QUESTION, [_evidence(3, 13)],
                                                         read_on=read_on)
    assert result.quotes == ((5, 9),) and asked == []  # its section ends inside its hit
    result = ExtractiveGenerator(FakeEmbedder()).generate(QUESTION, [_evidence(3, 6)],
                                                         read_on=lambda ev: None)
    assert result.quotes == ((5, 6),) and result.evidence is None


def test_an_asked_pipeline_cites_the_lines_it_read_on_into(tmp_path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "proxies.md").write_text("\n".join(PAGE) + "\n")
    settings = Settings(chunking=ChunkingSettings(max_tokens=30, min_tokens=0))
    settings.retrieval.section_chunks = 1
    settings.verification.abstention = "off"
    embedder = FakeEmbedder()
    build_index(docs, tmp_path / "index", settings, embedder)
    version = store.load(tmp_path / "index")
    assert [(c.start_line, c.end_line) for c in version.chunks
            if c.heading == "Proxies > HTTPS through a proxy"] == [(3, 6), (8, 9)]  # the fixture the test relies on
    retriever = Retriever(version, embedder, settings.retrieval)
    with Pipeline(tmp_path / "index", settings, generator="extractive",
                  retriever=retriever) as pipeline:
        answer = pipeline.ask(QUESTION, mode="lexical")
    assert "Change the scheme of the HTTPS proxy" in answer.answer
    cited = answer.citations[0]
    assert (cited.start_line, cited.end_line) == (5, 9)
    shown = {e.label: e.chunk for e in answer.evidence}[cited.label]
    assert shown.start_line <= cited.start_line <= cited.end_line <= shown.end_line


FAQ = [
    "# FAQ",  # 1
    "",
    "Why is the file watcher missing changes?",  # 3
    ": The watcher may miss changes on network drives and inside WSL partitions.",  # 4
    "",
    "  In these cases poll the project files instead with the poll flag.",  # 6
    "",
    "Why is my page store missing a value?",  # 8
    ": Stored values are set while the page renders, after the parent template ran.",  # 9
]


def test_reading_on_stops_where_the_next_definition_list_entry_starts() -> None:
    def faq(first: int, last: int) -> Evidence:
        chunk = Chunk(chunk_id=f"faq-{last}", source_id="faq.md", source_path="faq.md",
                      text="\n".join(FAQ[first - 1:last]), start_line=first, end_line=last,
                      heading="FAQ")
        return Evidence("E1", SearchHit(chunk, 1.0, 1))

    question = "Why does the watcher miss changes on network drives?"
    result = ExtractiveGenerator(FakeEmbedder()).generate(question, [faq(3, 4)],
                                                          read_on=lambda ev: faq(3, 9))
    text = result.answer.statements[0].text
    assert "network drives" in text and "poll the project files" in text
    assert "store missing" not in text and "Stored values" not in text  # the next entry
    assert result.quotes[0][1] == 6
