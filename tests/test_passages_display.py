"""Quoted text reads like the rendered page: short closing facts, blockquotes, links."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag.answer.quoting import attachment, quote
from rag.indexer.embedding import FakeEmbedder
from rag.reader.code_tail import code_continuation
from rag.reader.passages import read_blocks
from rag.reader.prose import sentences
from tests.conftest import quotable_sentences
from tests.test_extractive import answer, evidence, lines_of

SETTING = ("## JPEG\n\n"
           "`quality`\n"
           ": (`int`) The visual fidelity. Expressed as a whole number from `1` to `100`, "
           "inclusive. Lower numbers prioritize smaller file size. Default is `75`.\n")


def test_a_short_closing_fact_stays_with_the_sentence_before_it() -> None:
    sentences = quotable_sentences(SETTING)
    assert "Lower numbers prioritize smaller file size. Default is `75`." in sentences
    assert "Default is `75`." not in sentences  # never quoted on its own


def test_the_default_of_a_setting_is_part_of_the_answer() -> None:
    shown = [evidence("E1", SETTING, path="configuration/imaging.md", start=90)]
    statements, quotes = answer("What is the default JPEG quality?", shown, FakeEmbedder())
    assert statements and "Default is `75`" in " ".join(s for s, _ in statements)
    assert "Default is `75`." in lines_of(shown[0], quotes[-1])


def test_a_short_fragment_without_a_fact_is_still_dropped() -> None:
    assert quotable_sentences("The server starts on its own when asked. See below.") == [
        "The server starts on its own when asked."]


def test_blockquote_and_alert_markers_are_not_quoted() -> None:
    text = ("> [!NOTE]\n> To override the embedded `details` shortcode, copy the source "
            "code to a file.\n>\n> > Nested quotes keep their words as well.\n")
    sentences = quotable_sentences(text)
    assert sentences == [("To override the embedded `details` shortcode, copy the source code "
                          "to a file."), "Nested quotes keep their words as well."]


def test_inline_links_show_their_text() -> None:
    text = ("To build from source you must install [Git][] and [Go](https://go.dev \"Go\"), "
            "then read the [guide][install] about [context](g).\n\n"
            "- See [hugo mod clean](/commands/hugo_mod_clean/) for the cache.\n\n"
            "An image ![logo](logo.png) keeps its markup.\n")
    sentences = quotable_sentences(text)
    assert sentences[0] == ("To build from source you must install Git and Go, then read the "
                            "guide about context.")
    assert sentences[1] == "See hugo mod clean for the cache."
    assert sentences[2] == "An image ![logo](logo.png) keeps its markup."





def test_a_link_whose_text_is_code_with_brackets_shows_that_code() -> None:
    text = ("Entry points are declared in the [`[project.entry-points]`](https://packaging.org/ep) "
            "table; `[x](y)` written as code stays as it is.\n")
    shown = ("Entry points are declared in the `[project.entry-points]` table; `[x](y)` "
             "written as code stays as it is.")
    assert quotable_sentences(text) == [shown]


def test_a_table_without_leading_pipes_is_read_as_rows() -> None:
    text = ("Use the standard edition unless you need more.\n\n"
            "Feature|standard|extended\n:--|:-:|:-:\nCore features|yes|yes\n"
            "LibSass support|no|yes\n\nThe shell pipe in a | b stays prose here.\n")
    sentences = quotable_sentences(text)
    assert "Feature: LibSass support; standard: no; extended: yes" in sentences
    assert not any(":--" in s or "|" in s.replace("a | b", "") for s in sentences)
    assert "The shell pipe in a | b stays prose here." in sentences


def test_a_row_ending_in_an_emoji_code_introduces_nothing() -> None:
    text = ("## Editions\n\nUse the standard edition unless you need more features.\n\n"
            "Feature|standard|extended\n:--|:-:|:-:\n"
            "Core features|:heavy_check_mark:|:heavy_check_mark:\n"
            "LibSass support|:x:|:heavy_check_mark:\n")
    shown = [evidence("E1", text, path="installation/editions.md")]
    statements, _ = answer("Which features does each edition have?", shown, FakeEmbedder())
    quoted = " ".join(s for s, _ in statements)
    assert quoted and "|" not in quoted  # no raw rows run on after a row's ":x:" ending


def test_html_entities_show_as_their_characters_outside_code() -> None:
    text = "A leaf bundle holds an&nbsp;`index.md`&nbsp;file, R&amp;D notes and `&amp;` code.\n"
    assert quotable_sentences(text) == [
        "A leaf bundle holds an `index.md` file, R&D notes and `&amp;` code."]


def test_a_code_spans_highlight_language_is_not_shown() -> None:
    text = ("Set `mode` to `'all' | 'client'`{lang=\"ts\"} or `false`{lang=ts}, as "
            "`x`{:.language-ruby} shows; the code `{lang=ts}` stays.\n")
    assert quotable_sentences(text) == [
        "Set `mode` to `'all' | 'client'` or `false`, as `x` shows; the code `{lang=ts}` stays."]


def test_myst_roles_show_their_title_target_or_code_as_the_page_does() -> None:
    text = ("Read {ref}`the syntax guide <syntax/referencing>` and {doc}`../intro`, then "
            "subclass {py:class}`~myst_parser.mdit.Renderer` {octicon}`book`; `{x}` stays.\n")
    assert quotable_sentences(text) == [
        "Read the syntax guide and ../intro, then subclass `Renderer` ; `{x}` stays."]
    # Braces inside code are code, not a role before the next code span.
    path = "Otherwise, the path for `/users/{user_id}` would match also for `/users/me`.\n"
    assert quotable_sentences(path) == [path.strip()]


def test_a_link_whose_target_is_a_template_expression_shows_its_text() -> None:
    text = ("Use the `--port` argument, as described in the [serve command options]"
            "({{ '/docs/configuration/options/' | relative_url }}) or [the docs]"
            "({% link _docs/x.md %}).\n"
            "Fix pagination on Windows ([#1063]({{ site.repository }}/issues/1063)).\n")
    assert quotable_sentences(text) == [
        "Use the `--port` argument, as described in the serve command options or the docs.",
        "Fix pagination on Windows (#1063)."]


def test_liquid_raw_and_include_tags_inside_a_line_show_as_the_page_shows_them() -> None:
    text = ("Includes (using the {% raw %}`{% include %}`{% endraw %} tag) are tracked. "
            "You can set `strict_variables` to `true`. "
            '{% include docs_version_badge.html version="3.8.0" %}\n')
    assert quotable_sentences(text) == ["Includes (using the `{% include %}` tag) are tracked.",
                                     "You can set `strict_variables` to `true`. (3.8.0)"]


def test_e_g_and_i_e_never_end_a_sentence() -> None:
    text = ("Files keep their names (e.g. `robots.txt`) or never change (i.e. `favicon.ico`). "
            "Use a formatter, e.g. Black, on every file. It runs fast on large projects.\n")
    assert quotable_sentences(text) == [
        "Files keep their names (e.g. `robots.txt`) or never change (i.e. `favicon.ico`).",
        "Use a formatter, e.g. Black, on every file.", "It runs fast on large projects."]


def test_two_inline_elements_side_by_side_keep_their_texts_apart() -> None:
    text = ('For example, the <span class="composition-api">`onMounted`</span><span '
            'class="options-api">`mounted`</span> hook runs after the first render.\n')
    assert quotable_sentences(text) == [
        "For example, the `onMounted` `mounted` hook runs after the first render."]


def test_a_shortcut_reference_link_shows_its_text_but_code_keeps_its_brackets() -> None:
    text = ("Pydantic V2 uses the Rust [regex crate] instead of Python's. Install it with "
            "`pip install -e \".[local]\"` or pip install pydantic[email] today.\n")
    assert quotable_sentences(text) == [
        "Pydantic V2 uses the Rust regex crate instead of Python's.",
        "Install it with `pip install -e \".[local]\"` or pip install pydantic[email] today."]


def test_a_table_row_names_each_cell_by_its_column() -> None:
    text = ("Print trailing commas wherever possible in multi-line structures.\n\n"
            "| Default | CLI Override | API Override |\n| ------- | ---- | ---- |\n"
            "| `\"all\"` | <code>--trailing-comma \\<all&#124;es5&#124;none></code> | "
            "<code>trailingComma: \"\\<all&#124;es5&#124;none>\"</code> |\n\n"
            "| a | b | c |\n")
    sentences = quotable_sentences(text)
    assert sentences[1] == ('Default: `"all"`; CLI Override: `--trailing-comma <all|es5|none>`; '
                            'API Override: `trailingComma: "<all|es5|none>"`')
    assert "Default; CLI Override; API Override" not in sentences  # the header alone says nothing
    assert sentences[2] == "a; b; c"  # a table of its own, without a header


def test_backslash_escapes_read_as_their_character_outside_code() -> None:
    assert quotable_sentences("Use \\<bool\\> and \\*stars\\* but keep `a\\*b` as it is.\n") == [
        "Use <bool> and *stars* but keep `a\\*b` as it is."]


def test_a_code_block_inside_a_tab_is_shown_under_its_title_without_the_tabs_indent() -> None:
    text = ('To install optional dependencies along with Pydantic:\n\n=== "pip"\n\n'
            "    ```bash\n    # with the `email` extra:\n    pip install 'pydantic[email]'\n"
            "    ```\n")
    shown = [evidence("E1", text, path="install.md", start=38)]
    statements, _ = answer("What do I need to install for email validation?", shown,
                           FakeEmbedder())
    assert statements[0][0] == ("To install optional dependencies along with Pydantic:\npip\n"
                                "```\n# with the `email` extra:\npip install 'pydantic[email]'\n"
                                "```")


_MARKDOWN_PIECES = ["```", "```python", "~~~", "    ```", "| a | b |", "| --- | --- |",
                    "|x\\|y| `a|b` |", "[](){#anchor}", '=== "pip"', "!!! note", "    indented",
                    "text &nbsp; &amp; \\< \\* <code>c</code>", "Lead-in:", "- item one two",
                    "## Heading", "`name`", ": a definition", "{{< new-in 0.1.0 />}}", "",
                    "  -p, --port int   the port (default 1313)", "}", '"key": 1,', "x = 1"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_MARKDOWN_PIECES), st.text(max_size=20)),
                max_size=25), st.booleans())
def test_any_chunk_reads_into_quotes_inside_its_own_lines(pieces: list[str],
                                                          file_start: bool) -> None:
    text = "\n".join(p.replace("\r", "") for p in pieces)
    lines = text.split("\n")
    assert 0 <= code_continuation(lines) <= len(lines)
    blocks = read_blocks(text, file_start)
    for s in sentences(blocks):
        quoted, last = quote(s, attachment(blocks, s))
        assert 0 <= s.first <= s.last <= last < len(lines)
        assert quoted.strip()


def test_an_inline_shortcode_shows_as_a_reader_takes_it_and_keeps_its_list_item() -> None:
    text = ("To build Hugo from source you must install:\n\n1. Install [Git][]\n"
            "1. Install [Go][] version {{% current-go-version %}} or later\n\n"
            "Press {{< kbd >}}Ctrl{{< /kbd >}} to stop the server at any time.\n\n"
            "{{< tabs >}}\n")
    shown = [evidence("E1", text, path="contribute/development.md", start=32)]
    statements, quotes = answer("What do I need to install to build Hugo from source?", shown,
                                FakeEmbedder())
    # (the quote then runs on through its section, as every quote does)
    assert statements[0][0].startswith("To build Hugo from source you must install:\n"
                                       "1. Install Git\n"
                                       "1. Install Go version `current-go-version` or later\n")
    assert quotes[0][0] == 32 and quotes[0][1] >= 35
    assert "Press Ctrl to stop the server at any time." in quotable_sentences(text)
    assert not any("tabs" in s for s in quotable_sentences(text))  # a shortcode line is markup


@settings(max_examples=20, deadline=5000)
@given(unit=st.sampled_from(["{{< x ", " ", "<code>x ", "[a ", "\\", "&amp", "| a ", "[](){",
                             '=== "', "`a ", "{{% y %}} ", "__", "{% raw %}"]),
       prefix=st.sampled_from(["", "Text {{< x", "- ", "| h |\n| - |\n", "Text {% include"]))
def test_pathological_lines_are_read_into_quotes_quickly(unit: str, prefix: str) -> None:
    text = "An opening sentence that reads fine.\n\n" + prefix + unit * 20_000 + "\n"
    assert quotable_sentences(text)[0] == "An opening sentence that reads fine."


def test_python_prompts_in_a_code_block_are_kept_and_a_quoted_block_is_unquoted() -> None:
    # ">>> " opens a line of a Python session, not a blockquote; a code block inside a
    # blockquote loses the quote's markers.
    text = ("## Uploads\n\nTo send form fields with the file, use the `data=...` parameter:\n\n"
            "```pycon\n>>> data = {'message': 'Hello'}\n>>> r = httpx.post(url, data=data)\n```\n\n"
            "## Raw bytes\n\n> To send raw bytes instead, pass them as `content=...` like so:\n>\n"
            "> ```python\n> r = httpx.post(url, content=b'raw')\n> ```\n")
    shown = [evidence("E1", text, path="quickstart.md", start=200)]
    statements, _ = answer("How do I send form fields with the file?", shown, FakeEmbedder())
    assert statements[0][0] == ("To send form fields with the file, use the `data=...` parameter:\n"
                                "```\n>>> data = {'message': 'Hello'}\n"
                                ">>> r = httpx.post(url, data=data)\n```")
    statements, _ = answer("How do I send raw bytes?", shown, FakeEmbedder())
    assert statements[0][0] == ("To send raw bytes instead, pass them as `content=...` like so:\n"
                                "```\nr = httpx.post(url, content=b'raw')\n```")


def test_a_list_a_sentence_brings_reads_like_the_page() -> None:
    text = ("## Usage data\n\nWe count three kinds of usage in the docs traffic:\n\n"
            "* Referring traffic from an internal domain &mdash; no referrer names kept.\n"
            "* Visits from a <b>public</b> search engine.\n")
    statements, _ = answer("What kinds of usage are counted in the docs traffic?",
                           [evidence("E1", text, path="why.md")], FakeEmbedder())
    assert statements[0][0] == (
        "We count three kinds of usage in the docs traffic:\n"
        "* Referring traffic from an internal domain \u2014 no referrer names kept.\n"
        "* Visits from a public search engine.")


def test_a_list_items_text_goes_on_at_the_margin_until_a_rule_or_blank_line() -> None:
    text = ("- `max_connections`, maximum number of connections, or `None` for no\n"
            "limits. (Default 100)\n- `keepalive_expiry`, idle time limit.\n---\n"
            "A paragraph after the rule.\n")
    assert [(b.kind, b.first, b.last) for b in read_blocks(text)] == [
        ("item", 0, 1), ("item", 2, 2), ("prose", 4, 4)]


def test_a_line_of_images_is_not_quoted_but_text_around_an_image_is() -> None:
    text = ("By default, the tool links only direct dependencies into the root folder.\n\n"
            "![A folder of links into a store](/img/isolated.svg)\n\n"
            "[![CI](https://ci.example/badge.svg)](https://ci.example) "
            "[![docs](https://docs.example/b.svg)](https://docs.example)<br>\n\n"
            "![Run result](../assets/run.png){ width=\"500\" }\n\n"
            "Press the ![gear](gear.png) button to open the settings.\n")
    shown = [" ".join(b.lines) for b in read_blocks(text)]
    assert shown == ["By default, the tool links only direct dependencies into the root folder.",
                     "Press the ![gear](gear.png) button to open the settings."]
