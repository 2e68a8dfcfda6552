"""Schemathesis fuzzes the HTTP API from its own OpenAPI schema, in process.

Every operation gets a bounded, derandomised set of generated requests (valid and invalid),
sent as an authenticated user and as an anonymous one, against the app over a small index
(fake embedder, extractive answers). Each response must be no 5xx and must match the schema:
documented status code, content type and body shape.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from rag.core.config import Settings
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.interfaces.http.auth import add_token
from rag.interfaces.http.server import create_app
from tests.conftest import FIXTURE_DOCS

schemathesis = pytest.importorskip("schemathesis", reason="pip install schemathesis")
from hypothesis import HealthCheck, given, settings

BASE_URL = "http://127.0.0.1:8000"  # a served Host: the allow-list is on while fuzzing
EXAMPLES = 30  # per operation, mode and user: 18 runs of at most 30 requests each
HEADERS: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    root = tmp_path_factory.mktemp("fuzz")
    docs = root / "docs"
    shutil.copytree(FIXTURE_DOCS, docs)
    tokens = root / "tokens.json"
    HEADERS["staff"] = {"Authorization": f"Bearer {add_token(tokens, 'ann', ('staff',))}"}
    HEADERS["anonymous"] = {}
    config = Settings.model_validate({"server": {"tokens_file": str(tokens)}})
    embedder = FakeEmbedder()
    build_index(docs, root / "index", config, embedder)
    app = create_app(index=root / "index", settings=config, docs=docs, generator="extractive",
                     embedder=embedder)
    yield schemathesis.openapi.from_asgi("/openapi.json", app, headers={"Host": "127.0.0.1:8000"})


OPERATIONS = [("GET", "/health"), ("GET", "/search"), ("POST", "/ask"), ("POST", "/index"),
              ("POST", "/verify"), ("POST", "/check")]
BOUNDED = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))


def test_every_operation_is_fuzzed(api_schema: object) -> None:
    raw = api_schema.raw_schema  # type: ignore[attr-defined]
    assert sorted((m.upper(), p) for p, ops in raw["paths"].items() for m in ops) == sorted(
        OPERATIONS)


# Driven through hypothesis directly rather than schemathesis' pytest plugin, whose fixture
# loader does not run under pytest 9.
@pytest.mark.parametrize("who", ["staff", "anonymous"])
@pytest.mark.parametrize("method, path, mode", [
    (method, path, mode) for method, path in OPERATIONS for mode in ("positive", "negative")
    if path != "/health" or mode == "positive"  # no parameters: nothing to get wrong
])
def test_api_conforms_to_its_schema(api_schema: object, method: str, path: str, who: str,
                                    mode: str) -> None:
    from schemathesis import GenerationMode

    operation = api_schema[path][method]  # type: ignore[index]

    @given(case=operation.as_strategy(GenerationMode(mode)))
    @BOUNDED
    def check(case: object) -> None:
        case.call_and_validate(base_url=BASE_URL, headers=HEADERS[who])  # type: ignore

    check()


def test_the_schema_documents_every_refusal(api_schema: object) -> None:
    """The statuses the guard answers with are part of each operation's contract."""
    raw = api_schema.raw_schema  # type: ignore[attr-defined]
    for path, operations in raw["paths"].items():
        for method, operation in operations.items():
            documented = set(operation["responses"])
            assert {"401", "421", "500"} <= documented, (method, path)
            if method == "post":
                assert {"403", "413", "415"} <= documented, (method, path)
    assert raw["paths"]["/index"]["post"]["security"] == [{"HTTPBearer": []}]
