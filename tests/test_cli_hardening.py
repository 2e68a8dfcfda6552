"""The command line under hostile input: terminal-safe output, one-line usage errors,
config that fails closed, and clean exits for everything else (fake embedder, no model)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.indexer.embedding import FakeEmbedder
from rag.interfaces.cli.main import app
from tests.fakes.fake_openai_server import FakeOpenAIServer, Reply, answer_json

# Anything a terminal could act on: C0 controls but \t and \n, DEL, C1, line separators,
# bidi overrides and isolates.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f"
                         "\u202a-\u202e\u2066-\u2069]")
ESC = "\x1b"
HOSTILE_NAME = "evil\x1b]0;owned\x07\nfake.md"  # sets the window title, then forges a line
HOSTILE_DOC = (
    "# Ports \x1b[31mred\x1b[0m heading\n\n"
    "The tidewatch server listens on port 8080 by default \x1b]8;;http://evil.example/\x1b\\"
    "click here\x1b]8;;\x1b\\ and [bold]never[/bold] on port 9 \u202eevil\u202c today.\n\n"
    "Port settings live in the server section\r of the tidewatch file \x9b2J with \x07 bells.\n"
)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def assert_one_line(err: str, needle: str = "") -> None:
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert needle in err, err
    assert "Traceback" not in err and "╭" not in err and "Usage:" not in err


@pytest.fixture
def fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda _settings, **_: FakeEmbedder())


@pytest.fixture
def hostile(tmp_path: Path, fake_embedder: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An index of a docs folder whose text and file name carry terminal escapes."""
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / HOSTILE_NAME).write_text(HOSTILE_DOC, encoding="utf-8")
    (docs / "plain.md").write_text("# Plain\n\nNothing to see in this plain page at all.\n",
                                   encoding="utf-8")
    (docs / "bin\x1b[2J.md").write_bytes(b"\x00\x01binary")  # skipped, with a warning
    code, out, err = run("index", str(docs), "--index", str(tmp_path / "index"))
    assert code == 0, err
    assert "skipped bin\\x1b[2J.md: binary file" in err and ESC not in err + out
    return tmp_path / "index"


# --- terminal output ---------------------------------------------------------------------


def test_search_text_output_shows_escapes_instead_of_obeying_them(hostile: Path):
    code, out, err = run("search", "tidewatch server port", "--index", str(hostile),
                         "--mode", "lexical")
    assert code == 0, err
    assert not RAW_CONTROL.search(out + err)
    assert "\\x1b]0;owned\\x07\\nfake.md" in out  # the file name, visibly escaped
    assert "\\x1b[31mred\\x1b[0m" in out and "\\x1b]8;;http://evil.example/" in out
    assert "[bold]never[/bold]" in out  # shown as typed, not styled
    # each hit is exactly two lines: a header and an indented snippet
    lines = out.splitlines()
    assert len(lines) % 2 == 0 and all(line.startswith("    ") for line in lines[1::2])


def test_search_json_stays_exact_and_carries_no_raw_controls(hostile: Path):
    code, out, _ = run("search", "tidewatch server port", "--index", str(hostile), "--json",
                       "--mode", "lexical")
    assert code == 0
    assert not RAW_CONTROL.search(out)
    hits = [json.loads(line) for line in out.splitlines()]
    evil = next(h for h in hits if h["source_path"] == HOSTILE_NAME)
    assert evil["text"] in HOSTILE_DOC and ESC in evil["text"]  # the data is unchanged


def test_ask_text_output_is_terminal_safe(hostile: Path):
    code, out, err = run("ask", "Which port does the tidewatch server listen on by default?",
                         "--index", str(hostile), "--generator", "extractive",
                         env={"RAG_VERIFICATION__MIN_QUESTION_COVERAGE": "0"})
    assert code == 0, err
    assert "8080" in out and "Citations:" in out
    assert not RAW_CONTROL.search(out + err)
    assert "\\x1b]0;owned\\x07\\nfake.md" in out
    # the cited file name cannot forge a line: every citation line holds a label
    citations = out.split("Citations:\n", 1)[1].splitlines()
    assert citations[0].startswith("  [E") and "fake.md:" in citations[0]


def test_ask_json_keeps_model_text_exact(hostile: Path):
    code, out, _ = run("ask", "Which port does the tidewatch server listen on by default?",
                       "--index", str(hostile), "--generator", "extractive", "--json",
                       env={"RAG_VERIFICATION__MIN_QUESTION_COVERAGE": "0"})
    assert code == 0 and not RAW_CONTROL.search(out)
    answer = json.loads(out)
    assert any(ESC in s["text"] for s in answer["statements"])


# --- usage errors: one line, exit 2 ------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    (["search", "port", "-k", "0"], "must be at least 1"),
    (["search", "port", "-k", "-3"], "must be at least 1"),
    (["search", "   "], "must not be empty"),
    (["ask", ""], "must not be empty"),
    (["ask", " \t\n"], "must not be empty"),
    (["eval", "cases.jsonl", "--limit", "-1"], "must be at least 1"),
    (["eval", "cases.jsonl", "--limit", "0"], "must be at least 1"),
    (["eval", "cases.jsonl", "--tolerance", "-1"], "--tolerance"),
    (["search", "port", "-k", "many"], "valid integer"),
    (["search"], "Missing argument"),
    (["search", "port", "--frobnicate"], "No such option"),
    (["frobnicate"], "No such command"),
    (["search", "port", "--mode", "bogus"], "unknown search mode 'bogus' (choose dense, lexical"),
    (["ask", "port?", "--mode", "Dense"], "unknown search mode 'Dense'"),
    (["serve", "--port", "70000"], "must be a port from 1 to 65535, not 70000"),
    (["serve", "--port", "-1"], "must be a port from 1 to 65535, not -1"),
    (["serve", "--port", "0"], "must be a port from 1 to 65535, not 0"),
    (["serve-model", "--port", "65536"], "must be a port from 1 to 65535, not 65536"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(*args)
    assert code == 2, (code, out, err)
    assert_one_line(err, needle)
    assert out == ""


@pytest.mark.parametrize("args", [
    ["search", "port", "--docs", "{docs}"],
    ["ask", "port?", "--docs", "{docs}"],
    ["serve", "--docs", "{docs}"],
    ["index", "{docs}", "--index", "idx"],
    ["eval", "cases.jsonl", "--docs", "{docs}"],
    ["verify", "answer.json", "--docs", "{docs}"],
])
def test_docs_folder_whose_name_is_not_utf8_is_a_usage_error(tmp_path: Path, monkeypatch,
                                                               fake_embedder, args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    docs = Path(os.fsdecode(b"docs-\xff"))  # a Latin-1 name: the byte 0xff alone
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nThe port is 8080.\n", encoding="utf-8")
    code, out, err = run(*[a.replace("{docs}", str(docs)) for a in args])
    assert code == 2, (code, out, err)
    assert_one_line(err, "docs-\\udcff is not valid UTF-8; rename the folder")
    assert out == "" and not (tmp_path / "cache").exists() and not (tmp_path / "idx").exists()


def test_help_still_works():
    code, out, _ = run("search", "--help")
    assert code == 0 and "--json" in out


# --- environment overrides ---------------------------------------------------------------


@pytest.mark.parametrize("name, needle", [
    ("RAG_RETRIEVAL_K", "did you mean RAG_RETRIEVAL__K"),
    ("RAG_GENERATION_RETRIES", "did you mean RAG_GENERATION__RETRIES"),
    ("RAG_RETRIEVAL__KK", "names no config value"),
    ("RAG_RETRIEVER__K", "names no config value"),
])
def test_mistyped_overrides_fail_with_exit_4(hostile: Path, name, needle):
    code, _, err = run("search", "port", "--index", str(hostile), env={name: "5"})
    assert code == 4
    assert_one_line(err, needle)
    assert name in err


def test_unknown_rag_variable_gets_one_warning(hostile: Path):
    code, out, err = run("search", "tidewatch port", "--index", str(hostile), "--json",
                         env={"RAG_SOMETHING": "1", "RAG_RETRIEVAL__K": "1"})
    assert code == 0 and len(out.splitlines()) == 1  # the real override applied
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [("warning: environment variable RAG_SOMETHING is not a config value "
                        "and is ignored (overrides are RAG_<SECTION>__<FIELD>)")]


# --- docs folder and visibility patterns ---------------------------------------------------


def test_docs_folder_without_docs_files_writes_no_index(tmp_path: Path, fake_embedder):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.csv").write_text("not,docs", encoding="utf-8")
    code, _, err = run("index", str(docs), "--index", str(tmp_path / "index"))
    assert code == 5
    assert_one_line(err, "has no docs files")
    assert not (tmp_path / "index" / "CURRENT").exists()


def test_emptied_docs_folder_keeps_the_old_index(tmp_path: Path, hostile: Path):
    before = (hostile / "CURRENT").read_text(encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("index", str(empty), "--index", str(hostile))
    assert code == 5 and "has no docs files" in err
    assert (hostile / "CURRENT").read_text(encoding="utf-8") == before
    code, out, _ = run("search", "tidewatch port", "--index", str(hostile), "--json")
    assert code == 0 and out  # still searchable


@pytest.mark.parametrize("pattern, needle", [
    ("./Internal/*", "without a leading './' or '/'"),
    ("/internal/*", "without a leading './' or '/'"),
    ("internal/../*", "contains '..'"),
    ("internal\\\\*", "contains a backslash"),
    ("", "is empty"),
])
def test_unusable_visibility_patterns_are_config_errors(tmp_path: Path, pattern, needle):
    config = tmp_path / "bad.toml"
    config.write_text(f'[visibility]\ngroups_by_path = {{ "{pattern}" = ["staff"] }}\n',
                      encoding="utf-8")
    code, _, err = run("search", "x", "--config", str(config), "--index", str(tmp_path / "i"))
    assert code == 4
    assert_one_line(err, needle)
    assert "visibility.groups_by_path" in err


def test_pattern_without_groups_is_a_config_error(tmp_path: Path):
    config = tmp_path / "bad.toml"
    config.write_text('[visibility]\ngroups_by_path = { "internal/*" = [] }\n',
                      encoding="utf-8")
    code, _, err = run("search", "x", "--config", str(config), "--index", str(tmp_path / "i"))
    assert code == 4
    assert_one_line(err, "has no groups")


def test_patterns_match_ignoring_case_and_unmatched_ones_warn(tmp_path: Path, fake_embedder,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    (docs / "Internal").mkdir(parents=True)
    (docs / "Internal" / "keys.md").write_text("# Keys\n\nThe vault key rotates weekly.\n",
                                               encoding="utf-8")
    (docs / "public.md").write_text("# Public\n\nThe vault is open to all readers.\n",
                                    encoding="utf-8")
    config = tmp_path / "vis.toml"
    config.write_text('[visibility]\ngroups_by_path = { "internal/*" = ["staff"], '
                      '"secret/*" = ["staff"] }\n', encoding="utf-8")
    index = str(tmp_path / "index")
    code, _, err = run("index", str(docs), "--index", index, "--config", str(config))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if not line.startswith("embedding: ")]
    assert warnings == [("warning: visibility.groups_by_path pattern 'secret/*' "
                                "matches no file: nothing is restricted by it")]
    for groups, sees in (("", False), ("staff", True)):
        code, out, _ = run("search", "vault key", "--index", index, "--config", str(config),
                           "--groups", groups, "--json")
        assert code == 0
        paths = {json.loads(line)["source_path"] for line in out.splitlines()}
        assert ("Internal/keys.md" in paths) is sees


@pytest.mark.parametrize("folder_form, pattern", [
    ("NFD", "geheim-b\u00fccher/*"),        # rule typed in NFC, folder stored in NFD (macOS)
    ("NFC", "geheim-bu\u0308cher/*"),       # and the other way round
    ("NFD", "GEHEIM-B?CHER/*"),              # '?' stands for the accented letter either way
])
def test_patterns_match_under_any_unicode_normal_form(tmp_path: Path, fake_embedder,
                                                      monkeypatch, folder_form, pattern):
    import unicodedata

    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    folder = unicodedata.normalize(folder_form, "Geheim-B\u00fccher")
    (docs / folder).mkdir(parents=True)
    assert (folder_form == "NFD") == ("u\u0308" in os.listdir(docs)[0])  # stored as written
    (docs / folder / "keys.md").write_text("# Keys\n\nThe vault key rotates weekly.\n",
                                           encoding="utf-8")
    (docs / "public.md").write_text("# Public\n\nThe vault is open to all readers.\n",
                                    encoding="utf-8")
    config = tmp_path / "vis.toml"
    config.write_text(f'[visibility]\ngroups_by_path = {{ "{pattern}" = ["staff"] }}\n',
                      encoding="utf-8")
    index = str(tmp_path / "index")
    code, _, err = run("index", str(docs), "--index", index, "--config", str(config))
    assert code == 0 and "matches no file" not in err, err
    for groups, sees in (("", False), ("staff", True)):
        code, out, _ = run("search", "vault key", "--index", index, "--config", str(config),
                           "--groups", groups, "--json")
        assert code == 0
        paths = {json.loads(line)["source_path"] for line in out.splitlines()}
        assert "public.md" in paths and (f"{folder}/keys.md" in paths) is sees


# --- failures nobody planned for, and a model endpoint that is not one ---------------------


def test_unexpected_exception_is_one_line_and_exit_3(hostile: Path, monkeypatch):
    def boom(*_: object, **__: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("rag.pipeline.open_retriever", boom)
    code, out, err = run("search", "port", "--index", str(hostile))
    assert out == ""
    assert code == 3
    assert_one_line(err, "unexpected ZeroDivisionError: division by zero")


@pytest.mark.parametrize("reply, needle", [
    (Reply(raw_body=b"<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
     "answered with a body that is not JSON"),
    (Reply(raw_body=b"<html>oops</html>"), "answered with a body that is not JSON"),
    (Reply(raw_body=b'{"hello": "world"}'), "JSON without a list of choices"),
    (Reply(raw_body=b'[1, 2]'), "JSON without a list of choices"),
])
def test_broken_model_endpoint_is_exit_7(hostile: Path, reply: Reply, needle: str):
    with FakeOpenAIServer([reply]) as server:
        env = {"RAG_GENERATION__BASE_URL": server.base_url, "RAG_GENERATION__RETRIES": "1",
               "RAG_VERIFICATION__MIN_QUESTION_COVERAGE": "0"}
        code, out, err = run("ask", "Which port does the tidewatch server use?", "--index",
                             str(hostile), "--generator", "openai", env=env)
    assert code == 7, (code, out, err)
    assert_one_line(err, needle)
    assert err.rstrip().endswith("after 2 attempts") and out == ""


@pytest.mark.parametrize("reply, needle", [
    (Reply(answer_json([(f"Port {i} is used by the server.", ["E1"]) for i in range(50)])),
     "has 50 statements, more than generation.max_statements=5"),
    (Reply(answer_json([(f"Port {i} is used by the server.", ["E1"]) for i in range(20_000)])),
     "model output is too long"),
    (Reply(answer_json([("The tidewatch server", ["E1"])])[:40], finish_reason="length",
           completion_tokens=512),
     "model output was cut off at max_tokens=512"),
])
def test_unusable_model_output_gives_the_labelled_extractive_answer(hostile: Path, reply: Reply,
                                                                    needle: str):
    # The model answered, but never usably: the user still gets a verified answer, marked as
    # the extractive one, instead of an error; with the fallback off it is exit 7.
    env = {"RAG_GENERATION__RETRIES": "1", "RAG_VERIFICATION__MIN_QUESTION_COVERAGE": "0"}
    question = "Which port does the tidewatch server use?"
    with FakeOpenAIServer([reply]) as server:
        env["RAG_GENERATION__BASE_URL"] = server.base_url
        code, out, err = run("ask", question, "--index", str(hostile), "--generator", "openai",
                             env=env)
        assert len(server.requests) == 2  # both attempts were unusable
        assert code == 0, (code, out, err)
        assert out.startswith("[extractive answer:") and "tidewatch" in out.lower()
        env["RAG_VERIFICATION__EXTRACTIVE_FALLBACK"] = "false"
        code, out, err = run("ask", question, "--index", str(hostile), "--generator", "openai",
                             env=env)
    assert code == 7, (code, out, err)
    assert_one_line(err, needle)
    assert err.rstrip().endswith("after 2 attempts") and out == ""
