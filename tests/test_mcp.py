"""`rag mcp` through the MCP SDK's own client, over stdio, with the server as a subprocess."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import REPO

TIMEOUT_S = 120  # a bound on the whole session, never an expected duration
ROTATED = "The admin token is rotated every 30 days."  # only staff/runbook.md says so


def params(docs: Path, cache: Path, *extra: str, fake: bool = True) -> StdioServerParameters:
    module = "tests.fakes.fake_embedder_cli" if fake else "rag.interfaces.cli.main"
    env = {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache), "HF_HUB_OFFLINE": "1"}
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]  # the ONNX export cache of the real model
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", module, "mcp", "--docs", str(docs), "--generator", "extractive", *extra],
        env=env, cwd=str(REPO))


def session(server: StdioServerParameters,
            body: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        with anyio.fail_after(TIMEOUT_S):
            async with Client(server) as client:
                return await body(client)

    return anyio.run(main)


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return json.loads(result.content[0].text)


def error(result: Any) -> str:
    assert result.is_error
    return str(result.content[0].text)


def test_tools_answer_with_verified_citations_and_read_them(docs: Path, tmp_path: Path):
    async def body(client: Client) -> dict[str, Any]:
        tools = {t.name for t in (await client.list_tools()).tools}
        ask = data(await client.call_tool(
            "ask_docs", {"question": "Which port does the HTTP API listen on by default?"}))
        c = ask["citations"][0]
        read = data(await client.call_tool(
            "read_lines", {"path": c["source_path"], "start_line": c["start_line"],
                           "end_line": c["end_line"]}))
        search = data(await client.call_tool("search_docs", {"query": "default ports", "k": 3}))
        sources = data(await client.call_tool("list_sources", {}))
        return {"tools": tools, "ask": ask, "read": read, "search": search, "sources": sources}

    got = session(params(docs, tmp_path / "cache"), body)
    assert got["tools"] == {"search_docs", "ask_docs", "check_claims", "read_lines",
                            "list_sources"}
    ask = got["ask"]
    assert not ask["insufficient_evidence"] and ask["citations"]
    labels = {c["label"] for c in ask["citations"]}
    assert ask["answer"] and ask["statements"]
    assert all(s["citations"] and set(s["citations"]) <= labels for s in ask["statements"])
    c = ask["citations"][0]
    file = (docs / c["source_path"]).read_bytes().decode("utf-8-sig").split("\n")
    assert "\n".join(file[c["start_line"] - 1:c["end_line"]]) == c["text"]
    assert [ln["text"] for ln in got["read"]["lines"]] == c["text"].split("\n")
    assert not got["read"]["changed_since_indexed"]
    assert len(got["search"]["hits"]) == 3
    assert got["search"]["hits"][0]["source_path"] == "server-ports.md"
    paths = {s["source_path"] for s in got["sources"]["sources"]}
    assert "server-ports.md" in paths and "staff/runbook.md" not in paths


def test_restricted_files_need_the_servers_groups(docs: Path, tmp_path: Path):
    question = "How is the admin token rotated and where is it stored?"

    async def body(client: Client) -> dict[str, Any]:
        read = await client.call_tool(
            "read_lines", {"path": "staff/runbook.md", "start_line": 1, "end_line": 5})
        missing = await client.call_tool(
            "read_lines", {"path": "no-such.md", "start_line": 1, "end_line": 5})
        outside = await client.call_tool(
            "read_lines", {"path": "../secret.md", "start_line": 1, "end_line": 5})
        search = data(await client.call_tool("search_docs", {"query": question, "k": 50}))
        ask = data(await client.call_tool("ask_docs", {"question": question}))
        check = data(await client.call_tool("check_claims", {"text": ROTATED}))
        # A tool call cannot claim a group: unknown arguments change nothing.
        claimed = await client.call_tool("read_lines", {
            "path": "staff/runbook.md", "start_line": 1, "end_line": 5, "groups": ["staff"]})
        return {"read": read, "missing": missing, "outside": outside, "search": search,
                "ask": ask, "check": check, "claimed": claimed}

    got = session(params(docs, tmp_path / "cache"), body)
    refused = error(got["read"])
    assert "staff/runbook.md" in refused and refused.replace("staff/runbook.md", "X") == (
        error(got["missing"]).replace("no-such.md", "X"))  # same answer as a missing file
    assert "secret" in error(got["outside"])
    assert all(h["source_path"] != "staff/runbook.md" for h in got["search"]["hits"])
    assert all(c["source_path"] != "staff/runbook.md" for c in got["ask"]["citations"])
    assert [s["status"] for s in got["check"]["sentences"]] == ["not_found"]
    assert "runbook" not in json.dumps(got["check"])
    assert got["claimed"].is_error

    async def staff(client: Client) -> dict[str, Any]:
        read = data(await client.call_tool(
            "read_lines", {"path": "staff/runbook.md", "start_line": 1, "end_line": 5}))
        return {"read": read, "check": data(await client.call_tool(
            "check_claims", {"text": ROTATED}))}

    got = session(params(docs, tmp_path / "cache", "--groups", "staff"), staff)
    lines = got["read"]["lines"]
    assert lines[0]["number"] == 1 and lines
    [checked] = got["check"]["sentences"]
    assert checked["status"] == "supported"
    assert checked["citations"][0]["source_path"] == "staff/runbook.md"


def test_bad_ranges_are_tool_errors_not_crashes(docs: Path, tmp_path: Path):
    async def body(client: Client) -> list[str]:
        calls = [{"path": "faq.md", "start_line": 5, "end_line": 2},
                 {"path": "faq.md", "start_line": 9000, "end_line": 9001},
                 {"path": "faq.md", "start_line": 1, "end_line": 5000}]
        out = [error(await client.call_tool("read_lines", c)) for c in calls]
        out.append(error(await client.call_tool("ask_docs", {"question": "  "})))
        data(await client.call_tool("list_sources", {}))  # still serving
        return out

    messages = session(params(docs, tmp_path / "cache"), body)
    assert "before start_line" in messages[0] and "past its end" in messages[1]
    assert "at most" in messages[2] and "empty" in messages[3]


@pytest.mark.slow
def test_real_command_with_the_real_model(docs: Path, tmp_path: Path):
    async def body(client: Client) -> dict[str, Any]:
        return data(await client.call_tool(
            "ask_docs", {"question": "Which port does the HTTP API listen on by default?"}))

    ask = session(params(docs, tmp_path / "cache", fake=False), body)
    assert not ask["insufficient_evidence"]
    assert any(c["source_path"] == "server-ports.md" for c in ask["citations"])


def test_read_lines_answers_aliases_and_fifos_as_missing_files(docs: Path, tmp_path: Path):
    import os

    (docs / "public").mkdir()
    (docs / "public/link.md").symlink_to(docs / "staff/runbook.md")
    aliases = ["staff\\runbook.md", "staff//runbook.md", "./staff/runbook.md", "public/link.md"]

    async def body(client: Client) -> dict[str, Any]:
        out = {a: await client.call_tool("read_lines", {"path": a, "start_line": 1,
                                                        "end_line": 5}) for a in aliases}
        (docs / "faq.md").unlink()
        os.mkfifo(docs / "faq.md")  # an indexed Source swapped for a FIFO: never waited on
        out["fifo"] = await client.call_tool("read_lines", {"path": "faq.md", "start_line": 1,
                                                            "end_line": 5})
        return out

    got = session(params(docs, tmp_path / "cache"), body)
    for name, result in got.items():
        assert result.is_error and "no source" in error(result), name


def test_a_notebook_citation_names_its_cell(tmp_path: Path):
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "tests" / "fixtures" / "formats", docs)

    async def body(client: Client) -> list[dict[str, Any]]:
        return [data(await client.call_tool("ask_docs", {"question": question}))
                for question in ("How do I drop the rows without answers before counting?",
                                 "Which port does the server listen on by default?")]

    notebook, other = session(params(docs, tmp_path / "cache"), body)
    cited = notebook["citations"][0]
    assert cited["source_path"] == "demo.ipynb"
    assert (cited["cell"], cited["cell_lines"]) == (3, [3, 3])
    assert "dropna" in cited["text"]
    assert other["citations"][0]["source_path"] == "guide.rst"
    assert "cell" not in other["citations"][0]
