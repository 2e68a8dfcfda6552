"""Per-Source visibility: a user never sees what their groups may not, anywhere in the output.

The randomised leak test writes small random corpora whose files are restricted through
front matter or through ``visibility.groups_by_path`` patterns, then asks many random
questions (some of them naming restricted content outright) as random users in every
search mode. Every restricted file carries a unique token in its path, its headings and
each paragraph; for a user without access that token must not appear in the hits, the
evidence, the prompt, the answer or the citations. Which files are restricted is known
from how the corpus was written (the oracle below), not from what the indexer recorded.
"""

from __future__ import annotations

import fnmatch
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.core.config import RetrievalSettings, Settings
from rag.core.errors import CitationError
from rag.core.records import Answer, Evidence, SearchHit
from rag.core.text import index_terms
from rag.generator.backends import build_prompt
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index, embed_text
from rag.interfaces.cli.main import app
from rag.pipeline import Pipeline
from rag.retriever.evidence import select_evidence, token_counter
from rag.retriever.retrieval import MODES, Retriever
from rag.stores import folder as store
from rag.verifier.verification import check_support, verify_citations

VOCAB = ("port", "server", "index", "token", "cache", "deploy", "vault", "backup", "config",
         "model", "query", "group", "release", "log", "restart", "alert", "metric", "disk")
GROUPS = ("staff", "hr", "ops")
FOLDERS = ("", "public", "internal", "team-a", "team-b/deep", "notes")
SEEDS = range(8)
QUERIES_PER_CORPUS = 135  # 8 corpora x 135 = 1,080 queries, a third in each mode
USERS: tuple[frozenset[str], ...] = (
    frozenset(), frozenset({"staff"}), frozenset({"hr"}), frozenset({"ops", "staff"}),
    frozenset({"guest"}), frozenset(GROUPS),
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@dataclass
class RandomCorpus:
    """A written corpus plus the truth about who may see each file."""

    root: Path
    settings: Settings
    allowed: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> groups
    token: dict[str, str] = field(default_factory=dict)  # path -> unique token

    def may_see(self, path: str, groups: frozenset[str]) -> bool:
        allowed = self.allowed[path]
        return not allowed or not groups.isdisjoint(allowed)

    def forbidden(self, groups: frozenset[str]) -> dict[str, str]:
        """token -> path of every file these groups may not see."""
        return {self.token[p]: p for p in self.allowed if not self.may_see(p, groups)}


def _front_matter(rng: random.Random, groups: list[str]) -> str:
    """Front matter in one of the shapes users write: YAML list, YAML string, TOML."""
    shape = rng.choice(("yaml-list", "yaml-str", "toml"))
    if shape == "yaml-list":
        return f"---\ntitle: Page\nvisibility: [{', '.join(groups)}]\n---\n"
    if shape == "yaml-str":
        return f"---\nvisibility: {', '.join(groups)}\nweight: 2\n---\n"
    listed = ", ".join(f'"{g}"' for g in groups)
    return f'+++\ntitle = "Page"\nvisibility = [{listed}]\n+++\n'


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def make_corpus(root: Path, seed: int) -> RandomCorpus:
    """5-9 files in random folders; front matter, path patterns or nothing restricts them."""
    rng = random.Random(seed)
    patterns: dict[str, list[str]] = {}
    for folder in rng.sample([f for f in FOLDERS if f], k=rng.randint(1, 3)):
        patterns[f"{folder}/*"] = rng.sample(GROUPS, k=rng.randint(1, 2))
    if rng.random() < 0.5:
        patterns["*-private.md"] = [rng.choice(GROUPS)]
    corpus = RandomCorpus(root, Settings.model_validate(
        {"visibility": {"groups_by_path": patterns}}))
    for i in range(rng.randint(5, 9)):
        token = f"zq{seed}x{i}k{rng.randrange(16**5):05x}"
        folder = rng.choice(FOLDERS)
        suffix = "-private" if rng.random() < 0.2 else ""
        rel = f"{folder}/{token}{suffix}.md" if folder else f"{token}{suffix}.md"
        roll = rng.random()
        front_groups = rng.sample(GROUPS, k=rng.randint(1, 2)) if roll < 0.35 else []
        head = _front_matter(rng, front_groups) if front_groups else ""
        if 0.35 <= roll < 0.45:
            head = "---\ntitle: Page without visibility\n---\n"
        sections = [f"# Guide {token}\n\n{_words(rng, 6)} {token} {_words(rng, 4)}.\n"]
        for s in range(rng.randint(0, 3)):
            paras = "\n\n".join(f"{_words(rng, rng.randint(5, 30))} {token} {_words(rng, 3)}."
                                for _ in range(rng.randint(1, 3)))
            sections.append(f"## Part {s} {token}\n\n{paras}\n")
        write(root / rel, head + "\n".join(sections))
        if front_groups:
            allowed = tuple(sorted(set(front_groups)))
        else:
            allowed = tuple(sorted({g for pat, gs in patterns.items()
                                    if fnmatch.fnmatchcase(rel, pat) for g in gs}))
        corpus.allowed[rel] = allowed
        corpus.token[rel] = token
    return corpus


def open_index(docs: Path, index: Path, settings: Settings) -> Retriever:
    embedder = FakeEmbedder()
    build_index(docs, index, settings, embedder)
    return Retriever(store.load(index), embedder, settings.retrieval, settings.index)


def _random_query(rng: random.Random, corpus: RandomCorpus) -> str:
    words = [rng.choice(VOCAB) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.7 or not words:  # name some file's token outright, often a secret one
        words.append(corpus.token[rng.choice(sorted(corpus.token))])
    if rng.random() < 0.2:
        words.append(rng.choice(["guide", "part", "internal", "private", "md"]))
    rng.shuffle(words)
    return " ".join(words)


def _expected_count(retriever: Retriever, query: str, mode: str, k: int,
                    corpus: RandomCorpus, groups: frozenset[str]) -> int:
    """Hits a correct filter-inside-search must return: k whenever that many qualify."""
    visible = [c for c in retriever.index.chunks if corpus.may_see(c.source_path, groups)]
    if mode == "lexical":  # BM25 returns only chunks that share a word with the query
        words = set(index_terms(query))
        visible = [c for c in visible if words & set(index_terms(embed_text(c)))]
    return min(k, len(visible))


def _output_text(hits: list[SearchHit], evidence: tuple[Evidence, ...], prompt: list[dict],
                 answer: Answer) -> str:
    """Everything the user or the model could read, as one string, minus the question.

    The question is echoed in the prompt and the Answer; a user who typed a secret token
    learns nothing from seeing it again, so only what the docs contributed is checked.
    """
    parts = [json.dumps([h.to_dict() for h in hits]), json.dumps(answer.to_dict()),
             json.dumps([e.to_dict() for e in evidence]), json.dumps(prompt),
             "\n".join(m["content"] for m in prompt), answer.answer,
             json.dumps([h.to_dict() for h in answer.hits])]
    return "\n".join(parts).replace(answer.question, "")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_corpora_never_leak_restricted_sources(tmp_path, seed):
    corpus = make_corpus(tmp_path / "docs", seed)
    retriever = open_index(corpus.root, tmp_path / "index", corpus.settings)
    for chunk in retriever.index.chunks:  # the indexer agrees with how the files were written
        assert chunk.visibility == corpus.allowed[chunk.source_path], chunk.source_path
    count = token_counter(corpus.settings.evidence.encoding)
    rng = random.Random(1000 + seed)
    probes = granted = 0
    with Pipeline(tmp_path / "index", corpus.settings, generator="extractive",
                  retriever=retriever) as pipeline:
        for n in range(QUERIES_PER_CORPUS):
            mode = MODES[n % len(MODES)]
            groups = rng.choice(USERS)
            query = _random_query(rng, corpus)
            k = rng.randint(1, 8)
            where = f"seed={seed} query={query!r} mode={mode} groups={sorted(groups)} k={k}"

            hits = retriever.search(query, k=k, mode=mode, groups=groups)
            assert len(hits) == _expected_count(retriever, query, mode, k, corpus, groups), where
            answer = pipeline.ask(query, mode=mode, groups=groups)
            prompt = build_prompt(query, answer.evidence)
            chunks = ([h.chunk for h in hits] + [h.chunk for h in answer.hits]
                      + [e.chunk for e in answer.evidence])
            assert all(corpus.may_see(c.source_path, groups) for c in chunks), where
            assert all(corpus.may_see(c.source_path, groups) for c in answer.citations), where

            forbidden = corpus.forbidden(groups)
            text = _output_text(hits, answer.evidence, prompt, answer)
            leaked = [path for token, path in forbidden.items() if token in text]
            assert not leaked, f"{where}: leaked {leaked}"
            probes += any(token in query for token in forbidden)
            granted += any(c.visibility for c in chunks)

            # Second line of defence: evidence selection drops what retrieval let through.
            everything = retriever.search(query, k=8, mode=mode, groups=GROUPS)
            selection = select_evidence(everything, budget_tokens=3000, max_per_source=2,
                                        count_tokens=count, allowed_groups=groups)
            assert all(corpus.may_see(e.chunk.source_path, groups)
                       for e in selection.evidence), where
    # The test is not vacuous: secrets were asked for, and members did get restricted text.
    assert probes >= 10 and granted >= 10


def test_leak_test_runs_at_least_a_thousand_queries():
    assert len(SEEDS) * QUERIES_PER_CORPUS >= 1000


# --- filter inside the search, not after the top k ------------------------------------


@pytest.fixture
def crowded(tmp_path: Path) -> tuple[Path, Settings]:
    """Ten staff-only pages that match 'heron' best, four public ones that match weakly."""
    docs = tmp_path / "docs"
    for i in range(10):
        write(docs / f"staff/heron-{i}.md", f"---\nvisibility: [staff]\n---\n# Heron\n\n"
                                            f"heron heron heron {i}\n")
    for i in range(4):
        write(docs / f"public/page-{i}.md", f"# Page {i}\n\nA heron was seen near the river "
                                            f"bank by walkers on trail number {i} today.\n")
    retrieval = RetrievalSettings(k=3, candidates=3)  # no slack for filtering afterwards
    return docs, Settings(retrieval=retrieval)


@pytest.mark.parametrize("mode", MODES)
def test_user_gets_k_visible_hits_when_the_top_k_are_restricted(tmp_path, crowded, mode):
    docs, settings = crowded
    retriever = open_index(docs, tmp_path / "index", settings)
    staff = retriever.search("heron", mode=mode, groups={"staff"})
    assert len(staff) == 3 and all(h.chunk.source_path.startswith("staff/") for h in staff)
    public = retriever.search("heron", mode=mode)
    assert len(public) == 3
    assert all(h.chunk.source_path.startswith("public/") for h in public)
    assert [h.rank for h in public] == [1, 2, 3]


# --- re-indexing changes visibility at once --------------------------------------------


def _visible_paths(retriever: Retriever, query: str, groups: frozenset[str]) -> set[str]:
    return {h.chunk.source_path for mode in MODES
            for h in retriever.search(query, k=10, mode=mode, groups=groups)}


def test_front_matter_edit_takes_effect_on_the_next_index(docs, tmp_path):
    page = docs / "notes.md"
    body = "# Release notes\n\nThe kestrel release ships on Friday.\n"
    write(page, body)
    settings = Settings()
    index = tmp_path / "index"
    assert "notes.md" in _visible_paths(open_index(docs, index, settings), "kestrel", frozenset())

    write(page, "---\nvisibility: [staff]\n---\n" + body)
    retriever = open_index(docs, index, settings)
    assert "notes.md" not in _visible_paths(retriever, "kestrel", frozenset())
    assert "notes.md" in _visible_paths(retriever, "kestrel", frozenset({"staff"}))
    with Pipeline(index, settings, generator="extractive", retriever=retriever) as pipeline:
        answer = pipeline.ask("When does the release ship?")
    shown = json.dumps(answer.to_dict()).lower()
    assert "kestrel" not in shown and "friday" not in shown and "notes.md" not in shown

    write(page, body)  # and back: public again
    assert "notes.md" in _visible_paths(open_index(docs, index, settings), "kestrel", frozenset())


def test_config_pattern_change_takes_effect_on_the_next_index(docs, tmp_path):
    write(docs / "ops" / "pager.md", "# Pager\n\nThe osprey pager rotation starts Monday.\n")
    index = tmp_path / "index"
    public = Settings()
    restricted = Settings.model_validate({"visibility": {"groups_by_path": {"ops/*": ["ops"]}}})
    assert "ops/pager.md" in _visible_paths(open_index(docs, index, public), "osprey",
                                            frozenset())

    embedder = FakeEmbedder()
    report = build_index(docs, index, restricted, embedder)
    assert "ops/pager.md" in report.unchanged and embedder.calls == 0  # no re-embedding
    retriever = Retriever(store.load(index), embedder, restricted.retrieval)
    assert "ops/pager.md" not in _visible_paths(retriever, "osprey", frozenset({"staff"}))
    assert "ops/pager.md" in _visible_paths(retriever, "osprey", frozenset({"ops"}))

    assert "ops/pager.md" in _visible_paths(open_index(docs, index, public), "osprey",
                                            frozenset())


def test_front_matter_wins_over_a_path_pattern(docs, tmp_path):
    write(docs / "ops" / "open.md", "---\nvisibility: [hr]\n---\n# Open\n\nThe egret plan.\n")
    settings = Settings.model_validate({"visibility": {"groups_by_path": {"ops/*": ["ops"]}}})
    retriever = open_index(docs, tmp_path / "index", settings)
    assert "ops/open.md" not in _visible_paths(retriever, "egret", frozenset({"ops"}))
    assert "ops/open.md" in _visible_paths(retriever, "egret", frozenset({"hr"}))


@pytest.mark.parametrize("head", ["---\nvisibility: [staff\n---\n",
                                  "---\nvisibility: [staff]\ntitle: Ops: notes: draft\n---\n",
                                  '+++\nvisibility = ["staff"\n+++\n'])
def test_malformed_front_matter_naming_visibility_fails_closed(docs, tmp_path, head):
    write(docs / "ops.md", head + "# Ops\n\nThe plover failover runs at night.\n")
    retriever = open_index(docs, tmp_path / "index", Settings())
    assert "ops.md" not in _visible_paths(retriever, "plover failover", frozenset())


# --- the verifier re-checks ------------------------------------------------------------


def _evidence(docs: Path, tmp_path: Path) -> tuple[Evidence, ...]:
    retriever = open_index(docs, tmp_path / "index", Settings())
    hits = retriever.search("restart node drain", k=4, mode="lexical", groups={"staff"})
    assert any(h.chunk.visibility == ("staff",) for h in hits)
    return tuple(Evidence(f"E{i}", h) for i, h in enumerate(hits, start=1))


def test_verifier_rejects_a_citation_to_a_source_the_user_may_not_see(docs, tmp_path):
    evidence = _evidence(docs, tmp_path)
    secret = next(e for e in evidence if e.chunk.visibility)
    with pytest.raises(CitationError) as err:
        verify_citations([secret.label], evidence, allowed_groups=frozenset({"guest"}))
    assert "\n" not in str(err.value) and secret.chunk.source_path not in str(err.value)
    with pytest.raises(CitationError):
        check_support([("Drain the node first.", [secret.label])], evidence,
                      threshold=0.5, allowed_groups=frozenset())
    cited = verify_citations([secret.label], evidence, allowed_groups=frozenset({"staff"}))
    assert [c.source_path for c in cited] == [secret.chunk.source_path]


class _LeakyRetriever:
    """A retriever that ignores the user's groups, to prove the later stages still filter."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    def search(self, query: str, **kwargs: object) -> list[SearchHit]:
        kwargs["groups"] = GROUPS + ("staff",)
        return self.inner.search(query, **kwargs)  # type: ignore[arg-type]


def test_pipeline_drops_restricted_hits_even_if_retrieval_returns_them(docs, tmp_path):
    settings = Settings()
    retriever = open_index(docs, tmp_path / "index", settings)
    leaky = _LeakyRetriever(retriever)
    with Pipeline(tmp_path / "index", settings, generator="extractive",
                  retriever=leaky) as pipeline:  # type: ignore[arg-type]
        answer = pipeline.ask("How do I restart a node and rotate the admin token?")
    assert any(h.chunk.visibility for h in answer.hits)  # retrieval did hand them over
    assert any(reason == "not_visible" for _, reason in answer.excluded)
    assert all(not e.chunk.visibility for e in answer.evidence)
    assert "staff/runbook.md" not in json.dumps(answer.to_dict())  # hits are not in it


# --- the command line passes --groups and the eval file's groups ----------------------


@pytest.fixture
def cli_index(docs, tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda _settings, **_: FakeEmbedder())
    monkeypatch.chdir(tmp_path)
    index = tmp_path / "index"
    result = CliRunner().invoke(app, ["index", str(docs), "--index", str(index), "--json"])
    assert result.exit_code == 0, result.output
    return index


@pytest.mark.parametrize("groups, sees", [("", False), ("guest", False), ("staff", True),
                                          ("hr, staff", True)])
def test_cli_search_and_ask_respect_groups(cli_index, groups, sees):
    runner = CliRunner()
    search = runner.invoke(app, ["search", "restart node drain admin token", "--index",
                                    str(cli_index), "--groups", groups, "--json"])
    assert search.exit_code == 0, search.output
    paths = {json.loads(line)["source_path"] for line in search.stdout.splitlines()}
    assert ("staff/runbook.md" in paths) is sees
    ask = runner.invoke(app, ["ask", "How do I restart a node?", "--index", str(cli_index),
                                 "--generator", "extractive", "--groups", groups, "--json"])
    assert ask.exit_code in (0, 1), ask.output
    assert ("staff/runbook.md" in ask.stdout) is sees


def test_cli_eval_uses_each_cases_groups(cli_index, docs, tmp_path):
    case = {"question": "How do I restart a node?", "expected_sources": ["staff/runbook.md"]}
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"id": "staff", "groups": ["staff"], **case}) + "\n"
                         + json.dumps({"id": "public", **case}) + "\n", encoding="utf-8")
    out = tmp_path / "reports" / "eval-extractive.json"
    result = CliRunner().invoke(app, ["eval", str(eval_file), "--docs", str(docs), "--index",
                                         str(cli_index), "--generator", "extractive",
                                         "--out", str(out)])
    assert result.exit_code == 0, result.output
    cases = {c["id"]: c for c in json.loads(out.read_text(encoding="utf-8"))["cases"]}
    assert cases["staff"]["metrics"]["hit@5"] == 1.0
    assert cases["public"]["metrics"]["hit@5"] == 0.0
    assert not any("runbook" in c for c in cases["public"]["citations"])
    assert "drain" not in cases["public"]["answer"].lower()
