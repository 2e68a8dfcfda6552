"""How an extractive quote shows an entry: a definition-list term, an option or a setting
is quoted with its name, its default and its description, from its term to its end.
Layout of code, lists and tables: tests/test_extractive_layout.py."""

from __future__ import annotations

from rag.indexer.embedding import FakeEmbedder
from tests.conftest import quotable_sentences
from tests.test_extractive import answer, evidence

OPTIONS = ("      --bind string              interface to which the server will bind\n"
           "      --disableLiveReload        watch without enabling live browser reload\n"
           "  -p, --port int                 port on which the server will listen (default 1313)\n"
           "      --renderToMemory           render to memory\n")


def test_a_definition_list_entry_is_quoted_from_its_term_to_its_end() -> None:
    # Settings pages written as `name` / ": what it is": the answer names its setting and
    # does not run on into the next one.
    text = ("## Settings\n\n`summaryLength`\n: (`int`) Applicable to automatic summaries, the "
            "minimum number of words returned by the summary method. The summary is cut at "
            "the paragraph closest to that length. Default is `70`.\n\n`taxonomies`\n"
            ": (`map`) The taxonomies of the site, each with its plural name.")
    shown = [evidence("E1", text, path="configuration/all.md", start=270)]
    statements, quotes = answer("How long is the summary cut at paragraph length by default?",
                                shown, FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("`summaryLength` : (`int`)") and quoted.endswith("Default is `70`.")
    assert "taxonomies" not in quoted and quotes[0] == (272, 273)


def test_one_option_of_a_command_option_list_is_quoted_at_its_line() -> None:
    text = "## Options\n\n```\n" + OPTIONS + "```\n"
    shown = [evidence("E1", text, path="commands/tool_server.md", start=30)]
    statements, quotes = answer("Which port does the server listen on by default?", shown,
                                FakeEmbedder())
    assert statements[0][0] == "-p, --port int port on which the server will listen (default 1313)"
    assert quotes[0] == (35, 35)


def test_an_option_list_is_read_even_when_its_chunk_starts_inside_the_code_block() -> None:
    text = OPTIONS + "```\n"  # the opening fence is in the chunk before
    shown = [evidence("E1", text, path="commands/tool_server.md", start=40)]
    statements, quotes = answer("Which port does the server listen on by default?", shown,
                                FakeEmbedder())
    assert statements[0][0].startswith("-p, --port int") and quotes[0] == (42, 42)


def test_a_definition_entry_runs_on_through_its_indented_body_and_no_further() -> None:
    text = ("## FAQ\n\nWhy doesn't the server see my file changes?\n"
            ": Its file watcher may miss changes on network drives.\n\n"
            "  In these cases, use the `--poll` flag to poll the files instead.\n\n"
            "Why is my page store missing a value?\n: Values are set during rendering.\n")
    shown = [evidence("E1", text, path="faq.md", start=70)]
    statements, quotes = answer("Why doesn't the server see file changes on a network drive?",
                                shown, FakeEmbedder())
    quoted = statements[0][0]
    assert "--poll" in quoted and "missing a value" not in quoted
    assert quotes[0] == (72, 75)


def test_a_lowercase_definition_term_opens_its_entry_and_a_line() -> None:
    text = ("## Introduction\n\n"
            "Page bundles are either leaf bundles or branch bundles, by what they hold.\n\n"
            "leaf bundle\n"
            ": A leaf bundle is a directory that contains an index file and zero or more "
            "resources. It has no descendants.\n")
    statements, _ = answer("What is a leaf bundle directory?",
                           [evidence("E1", text, path="content/page-bundles.md")])
    quoted = statements[0][0]
    assert "A leaf bundle is a directory that contains an index file" in quoted
    assert "\nleaf bundle" in quoted or quoted.startswith("leaf bundle")  # a line of its own


def test_list_items_wrapped_at_the_margin_keep_their_defaults() -> None:
    # HTTPX's resource limits: each item's text goes on at the margin on the next line.
    text = ("You can control the connection pool size using the `limits` keyword\n"
            "argument on the client. It takes instances of `httpx.Limits` which define:\n\n"
            "- `max_keepalive_connections`, number of allowable keep-alive connections, or "
            "`None` to always\nallow. (Defaults 20)\n"
            "- `max_connections`, maximum number of allowable connections, or `None` for no "
            "limits.\n(Default 100)\n")
    question = ("By default, how many connections will a client open at most, and how many "
                "keep-alive connections does it keep?")
    statements, quotes = answer(question, [evidence("E1", text, path="limits.md")],
                                FakeEmbedder())
    quoted = "\n".join(s for s, _ in statements)
    assert "or `None` to always allow. (Defaults 20)\n" in quoted  # one line per item
    assert "(Default 100)" in quoted and quotes[-1][1] == 7


def test_an_option_section_is_quoted_with_its_name_and_default() -> None:
    # Reference pages name the option in a bare heading, list its type and default as short
    # items, then describe it in a sentence too short to quote alone.
    text = ("# Server Options\n\n## server.port\n\n- **Type:** `number`\n- **Default:** `5173`\n\n"
            "Specify server port. Note if the port is already being used, the next free port "
            "is tried.\n\n## server.strictPort\n\n- **Type:** `boolean`\n\n"
            "Set to `true` to exit if the port is already in use.\n")
    shown = [evidence("E1", text, path="config/server-options.md")]
    statements, quotes = answer("Which port does the dev server listen on by default?", shown,
                                FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("server.port:\n- **Type:**") and "**Default:** `5173`" in quoted
    assert "Specify server port. Note if the port" in quoted and "strictPort" not in quoted
    assert quotes[0] == (3, 8)


def test_a_command_heading_names_the_quote_under_it() -> None:
    text = ("## Commands\n\n### `tool preview`\n\n"
            "Starts a local server for the built site, not meant for production.\n")
    statements, quotes = answer("How do I look at the built site locally?",
                                [evidence("E1", text, path="cli.md")], FakeEmbedder())
    assert statements[0][0].startswith("`tool preview`: Starts a local server")
    assert quotes[0] == (3, 5)


def test_a_setting_stated_in_short_paragraphs_is_quoted_with_its_name_and_values() -> None:
    # Poetry's settings page: the type, default and environment variable are paragraphs of
    # two or three words each, too short for sentences, and the name is in the heading.
    text = ("### `virtualenvs.in-project`\n\n**Type**: `boolean`\n\n**Default**: `None`\n\n"
            "**Environment Variable**: `POETRY_VIRTUALENVS_IN_PROJECT`\n\n"
            "Create the virtualenv inside the project's root directory.\n")
    statements, quotes = answer("How do I create the virtualenv inside the project directory?",
                                [evidence("E1", text, path="configuration.md", start=525)],
                                FakeEmbedder())
    assert statements[0][0] == (
        "`virtualenvs.in-project`: **Type**: `boolean`\n**Default**: `None`\n"
        "**Environment Variable**: `POETRY_VIRTUALENVS_IN_PROJECT`\n"
        "Create the virtualenv inside the project's root directory.")
    assert quotes[0] == (525, 533)


def test_an_option_in_a_list_of_options_is_quoted_alone() -> None:
    text = ("### Options\n\n* `--group (-G)`: The group to add the dependency to.\n"
            "* `--dev (-D)`: Add package as development dependency. (shortcut for `-G dev`)\n"
            "* `--editable (-e)`: Add vcs/path dependencies as editable.\n"
            "* `--optional`: Add as an optional dependency to an extra.\n")
    statements, quotes = answer("How do I add a package as a development dependency?",
                                [evidence("E1", text, path="cli.md", start=194)], FakeEmbedder())
    assert statements[0][0] == ("* `--dev (-D)`: Add package as development dependency. "
                                "(shortcut for `-G dev`)")
    assert quotes[0] == (197, 197)


def test_an_options_one_line_description_opens_its_quote_however_short() -> None:
    text = ("### `port`\n\nDev server listening port\n\n- **Type**: `number`\n"
            "- **Default:** `3000`\n\n### `host`\n\nDev server listening host")
    ev = evidence("E1", text, path="api/config.md", start=619, heading="Config > devServer")
    statements, quotes = answer("Which port does the dev server listen on by default?", [ev])
    shown = "Dev server listening port\n- **Type**: `number`\n- **Default:** `3000`"
    assert statements == [(shown, ["E1"])]
    assert quotes == [(621, 624)]


def test_an_option_whose_default_is_written_in_bold_is_quoted_with_it() -> None:
    # pnpm's settings pages write "* Default: **2**" where others write "Default: `2`".
    text = ("### fetchRetries\n\n* Default: **2**\n* Type: **Number**\n\n"
            "How many times to retry if pnpm fails to fetch from the registry.\n")
    statements, quotes = answer("How many times does pnpm retry a failed fetch by default?",
                                [evidence("E1", text, path="settings/network.md", start=92)],
                                FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("fetchRetries:\n* Default: **2**")
    assert "How many times to retry" in quoted and quotes[0] == (92, 97)


def test_a_fact_stated_in_a_paragraph_of_its_own_needs_no_final_stop() -> None:
    text = ("## Installation\n\nInstall with pip, then import it in your code.\n\n"
            "```shell\n$ pip install httpx\n```\n\nHTTPX requires Python 3.9+\n")
    statements, quotes = answer("What is the minimum Python version that httpx requires?",
                                [evidence("E1", text, path="index.md", start=128)],
                                FakeEmbedder())
    assert "HTTPX requires Python 3.9+" in statements[0][0] and quotes[0][1] == 136
    # Without a number or a code word such a line is a title or a fragment: never quoted.
    assert quotable_sentences("Some notes on this page\n") == []
