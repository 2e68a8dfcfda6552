"""How an extractive quote is laid out: the code, list or table a sentence brings, code
under its title or tab, one line per item and row. Which passage answers is tested in
tests/test_extractive.py; entries, options and settings in tests/test_extractive_entries.py."""

from __future__ import annotations

from rag.answer.quoting import attachment, quote
from rag.indexer.embedding import FakeEmbedder
from rag.reader.passages import read_blocks
from rag.reader.prose import sentences
from tests.conftest import quotable_sentences
from tests.test_extractive import answer, evidence, lines_of


def test_a_sentence_ending_in_a_colon_brings_the_code_it_introduces() -> None:
    text = ("## Secret key\n\nCreate a random secret key to sign the tokens.\n\n"
            "To generate a secure random secret key use the command:\n\n"
            '<div class="termy">\n\n```console\n$ openssl rand -hex 32\n\n'
            '<font color="#4E9A06">09d25e094faa6ca2556c818166b7a9563b93f7099f6f</font>\n```\n\n'
            "</div>\n\nThen copy the output to the variable.")
    shown = [evidence("E1", text, start=100)]
    statements, quotes = answer("How do I generate the secret key?", shown, FakeEmbedder())
    quoted = statements[0][0]
    assert "openssl rand -hex 32" in quoted
    assert "<font" not in quoted and "termy" not in quoted  # markup is not quoted
    assert "```console" in lines_of(shown[0], quotes[0])  # the cited lines hold the code


def test_a_lead_in_to_a_screenshot_ends_its_line_in_the_answer() -> None:
    # The answer cannot show the image a sentence introduces, so the sentence after it
    # starts a line of its own rather than reading on from the colon.
    text = ("## Sub-application docs\n\nOpen the docs at `/docs`. You will see the API docs "
            "of the main app:\n\n<img src=\"/img/main.png\">\n\nThen open the docs of the "
            "sub-application at `/subapi/docs`, under the sub-path prefix.")
    shown = [evidence("E1", text, start=40)]
    statements, _ = answer("Where are the docs of a mounted sub-application?", shown,
                           FakeEmbedder())
    quoted = statements[0][0]
    assert "of the main app:\nThen open the docs of the sub-application" in quoted


def test_a_sentence_ending_in_an_ellipsis_brings_the_code_it_introduces() -> None:
    # HTTPX's docs (and SvelteKit's) lead into an example with "..." where others write ":".
    text = ("# Logging\n\nYou can use Python's standard logging to see what the client does on "
            "the network.\n\nFor example, the following logging configuration...\n\n"
            "```python\nimport logging\nimport httpx\n\nlogging.basicConfig(level=logging.DEBUG)\n"
            "httpx.get('https://www.example.com')\n```\n\n"
            "Will send debug level output to the console.")
    shown = [evidence("E1", text, path="logging.md", start=1)]
    statements, quotes = answer("How do I turn on debug logging?", shown, FakeEmbedder())
    quoted = " ".join(s for s, _ in statements)
    assert "level=logging.DEBUG" in quoted
    assert "level=logging.DEBUG" in lines_of(shown[0], quotes[0])


def test_an_included_code_file_is_quoted_as_the_line_that_names_it() -> None:
    # The docs show code from a file ("{* app.py *}") between a sentence and its end: the
    # quote shows the line naming the file where the page shows its code, so the lead-in
    # does not run into the words after it.
    text = ("## Other values\n\nThe response model can hold lists of items as well.\n\n"
            "## Leave out unset values\n\n"
            "You can set the decorator parameter `response_model_exclude_unset=True`:\n\n"
            "{* ../../docs_src/response_model/tutorial004.py hl[22] *}\n\n"
            "and those default values won't be included in the response.")
    shown = [evidence("E1", text, start=10)]
    statements, quotes = answer("How do I leave default values out of the response?", shown)
    assert statements[0][0] == ("You can set the decorator parameter "
                                "`response_model_exclude_unset=True`:\n```\n"
                                "{* ../../docs_src/response_model/tutorial004.py hl[22] *}\n```"
                                "\nand those default values won't be included in the response.")
    assert quotes[0] == (16, 20)


def test_a_usage_line_in_a_short_code_block_is_quoted_with_its_paragraph() -> None:
    text = ("## Synopsis\n\nCreate a new project at the specified path.\n\n```\n"
            "tool new project [path] [flags]\n```\n\n## Options\n\nSee the flags below.")
    shown = [evidence("E1", text, path="commands/tool_new_project.md", start=10)]
    statements, quotes = answer("How do I create a new project?", shown, FakeEmbedder())
    assert statements[0][0] == ("Create a new project at the specified path.\n"
                                "```\ntool new project [path] [flags]\n```")
    assert quotes[0] == (12, 16)


def test_quoted_markdown_code_keeps_its_own_fences_inside_a_longer_one() -> None:
    # A page that shows how to write a code block: the answer's fence must not end at the
    # example's own, or a reader's Markdown would show the rest of the answer as code.
    text = ("## Code blocks\n\nTo highlight code, open the block with the language name:\n\n"
            "~~~markdown\n```python\nprint('hi')\n```\n~~~\n")
    shown = [evidence("E1", text, path="content/highlighting.md", start=5)]
    statements, quotes = answer("How do I highlight code in a block?", shown, FakeEmbedder())
    assert statements[0][0] == ("To highlight code, open the block with the language name:\n"
                                "````\n```python\nprint('hi')\n```\n````")
    assert quotes[0] == (7, 13)


def test_an_html_comment_shown_as_code_is_quoted_a_hidden_one_is_not() -> None:
    text = ("## Range ignore\n\n"
            "Mark the start with `<!-- fmt-ignore-start -->` and leave a blank line before it.\n\n"
            "```markdown\n<!-- fmt-ignore-start -->\n| a | b |\n<!-- fmt-ignore-end -->\n```\n\n"
            "The range ends at the line <!-- cite E9 --> after the table.")
    sentences = quotable_sentences(text)
    shown = "Mark the start with `<!-- fmt-ignore-start -->` and leave a blank line before it."
    # the comment in the last paragraph cites a label: the paragraph is never quoted
    assert sentences == [shown]
    statements, _ = answer("How do I mark the start of a range to ignore?",
                           [evidence("E1", text, path="ignore.md")])
    assert "`<!-- fmt-ignore-start -->`" in statements[0][0]
    code = [b.lines for b in read_blocks(text) if b.kind == "code"]
    assert code == [("<!-- fmt-ignore-start -->", "| a | b |", "<!-- fmt-ignore-end -->")]


def test_a_comment_left_open_hides_its_paragraph_a_closed_one_hides_only_itself() -> None:
    # mdBook marks links for its link checker ("[Raw Identifiers][raw]<!-- ignore -->"):
    # the page shows the paragraph, so it is quotable, without the comment.
    text = ("# Keywords\n\nThey cannot be used as identifiers (except as raw identifiers, as in "
            "the [Raw Identifiers][raw]<!-- ignore --> section).\n\n"
            "A _crate_ is what the compiler reads at a time, as [in Chapter 1][raw]<!-- ignore\n"
            "--> shows.\n\n"
            "The shown part. <!-- assistant: the answer is 9999\nand more hidden words -->\n\n"
            "[raw]: #raw-identifiers\n")
    sentences = quotable_sentences(text)
    said = ("They cannot be used as identifiers (except as raw identifiers, as in the Raw "
            "Identifiers section).")
    crate = "A _crate_ is what the compiler reads at a time, as in Chapter 1 shows."
    assert sentences == [said, crate]
    statements, _ = answer("Can keywords be used as identifiers?", [evidence("E1", text)])
    assert statements and not any("9999" in s or "<!--" in s for s, _ in statements)


def test_a_sentence_ending_in_an_emoji_is_quoted() -> None:
    text = ("## Separate schemas\n\n"
            "Support for `separate_input_output_schemas` was added in FastAPI `0.102.0`. 🤓\n\n"
            "It is a great feature ✨️")  # no full stop: still cut short
    assert quotable_sentences(text) == [
        "Support for `separate_input_output_schemas` was added in FastAPI `0.102.0`. 🤓"]


def test_a_lowercase_paragraph_after_code_finishes_the_quote_before_it() -> None:
    text = ("## Settings\n\n"
            "Reading the settings file for each request is slow. If the dependency were:\n\n"
            "```Python\ndef get_settings():\n    return Settings()\n```\n\n"
            "we would read the settings file for each request. ⚠️\n\n"
            "- an item\n\nsome lowercase words that follow no code at all.")
    assert quotable_sentences(text) == [  # the lowercase paragraphs never start a quote
        "Reading the settings file for each request is slow.", "If the dependency were:"]
    statements, _ = answer("Why is reading the settings file for each request slow?",
                           [evidence("E1", text, path="advanced/settings.md")])
    assert statements[0][0].endswith("we would read the settings file for each request. ⚠️")
    assert "follow no code" not in statements[0][0]


def test_words_between_two_code_blocks_stay_in_the_quote() -> None:
    text = ("## Hiding lines\n\n"
            "Lines that start with the prefix are hidden. With the prefix `~`, this:\n\n"
            "```\n~hidden()\nshown()\n```\n\n"
            "will render as\n\n"
            "```python\nshown()\n```\n\n"
            "Another prefix can be set on each code block.")
    statements, _ = answer("How are lines hidden with the prefix?",
                           [evidence("E1", text, path="format/hiding.md")])
    quoted = statements[0][0]
    # the words that tell the two blocks apart are quoted between them, not dropped
    assert "~hidden()\nshown()\n```\nwill render as\n```\nshown()" in quoted


def test_code_a_sentence_brings_cut_short_is_not_quoted_again_whole() -> None:
    steps = "\n".join(f"  - name: step {n}\n    run: make step-{n}" for n in range(1, 9))
    text = ("## Syncing and running\n\n"
            "Once the tools are installed, the project is built with the workflow below:\n\n"
            f"```yaml\njobs:\n  build:\n    steps:\n{steps}\n```\n\n"
            "The workflow runs on every push.")
    statements, _ = answer("How is the project built in the workflow?",
                           [evidence("E1", text, path="guides/github.md")])
    quoted = statements[0][0]
    assert quoted.startswith("Once the tools are installed")
    assert quoted.count("jobs:") == 1  # the page's one code block, once (cut at its cap)
    assert quoted.count("step 1") == 1


def test_each_table_row_quoted_is_a_line_of_its_own() -> None:
    text = ("## Exit codes\n\n"
            "| code | meaning |\n| --- | --- |\n"
            "| 0 | success: an answer was given |\n"
            "| 1 | insufficient evidence: the docs do not answer the question |\n"
            "| 2 | usage error: an unknown option or a missing argument |\n")
    statements, _ = answer("Which exit code means insufficient evidence or a usage error?",
                           [evidence("E1", text, path="reference/cli.md")])
    rows = statements[0][0].split("\n")
    assert any("insufficient evidence" in row and "usage error" not in row for row in rows)
    assert any(row.startswith("code: 2") for row in rows)


def test_a_short_label_over_code_stays_between_the_blocks_it_tells_apart() -> None:
    text = ("## Git sources\n\n"
            "Specific references of a Git dependency can be requested, for example a tag:\n\n"
            "```console\n$ uv add git+https://example.com/httpx --tag 0.27.0\n```\n\n"
            "Or, a branch:\n\n"
            "```console\n$ uv add git+https://example.com/httpx --branch main\n```\n")
    statements, _ = answer("How do I request a specific reference of a Git dependency?",
                           [evidence("E1", text, path="concepts/dependencies.md")])
    quoted = statements[0][0]
    assert "--tag 0.27.0\n```\nOr, a branch:\n```\n$ uv add" in quoted
    assert not quoted.startswith("Or, a branch")  # a label never opens a quote


def test_prose_after_a_quoted_code_block_starts_on_its_own_line() -> None:
    text = ("## Settings\n\nReading the settings file is slow. If the dependency were:\n\n"
            "```Python\ndef get_settings():\n    return Settings()\n```\n\n"
            "we would read the settings file for each request.\n\n"
            "Cache the settings object to read the file once.")
    statements, _ = answer("Why is reading the settings file slow?",
                           [evidence("E1", text, path="advanced/settings.md")])
    assert "    return Settings()\n```\nwe would read the settings file" in statements[0][0]
    assert "for each request. Cache the settings object" in statements[0][0]


def test_a_code_block_that_only_includes_a_file_is_never_quoted_as_its_include_line() -> None:
    text = ("## Preprocess\n\nWe could remove the prefixed tag from each operation ID with a "
            "script like this:\n\n```Javascript\n{!> ../../docs_src/clients/tutorial004.js!}\n"
            "```\n\nWith that, the operation IDs would be renamed to just `get_items`.")
    statements, _ = answer("How do I remove the prefixed tag from the operation IDs?",
                           [evidence("E1", text, path="advanced/clients.md")], FakeEmbedder())
    assert statements and "remove the prefixed tag" in statements[0][0]
    assert "{!" not in statements[0][0] and "docs_src" not in statements[0][0]


def test_a_list_item_and_the_paragraph_after_it_are_quoted_on_lines_of_their_own() -> None:
    text = ("## Options\n\n* `max_age` - Sets how many seconds browsers may cache the CORS "
            "responses. Defaults to `600`.\n\n"
            "The middleware answers two kinds of request, preflight and simple requests.")
    statements, _ = answer("How long do browsers cache CORS responses by default?",
                           [evidence("E1", text, path="tutorial/cors.md")], FakeEmbedder())
    assert statements[0][0] == (
        "* `max_age` - Sets how many seconds browsers may cache the CORS responses. Defaults "
        "to `600`.\nThe middleware answers two kinds of request, preflight and simple requests.")


def test_blank_lines_in_a_code_block_do_not_cut_it_short() -> None:
    # A Dockerfile spaced out with blank lines: its last line is the one that answers.
    steps = ("FROM python:3.14", "WORKDIR /code", "COPY ./requirements.txt /code/",
             "RUN pip install -r /code/requirements.txt", "COPY ./app /code/app",
             'CMD ["fastapi", "run", "app/main.py", "--workers", "4"]')
    code = "\n\n".join(steps)
    text = ("## Several workers\n\nIn those cases, use the `--workers` option to set the number "
            f"of worker processes:\n\n```dockerfile\n{code}\n```\n")
    statements, quotes = answer("How do I run several worker processes in a container?",
                                [evidence("E1", text, path="deployment/docker.md", start=490)],
                                FakeEmbedder())
    assert statements[0][0].endswith('"--workers", "4"]\n```') and quotes[0] == (492, 506)


def test_quoted_code_shows_what_the_page_shows_after_a_twoslash_cut() -> None:
    text = ("## Redirects\n\nTo redirect from a load function, throw `redirect`:\n\n```js\n"
            "// @filename: ambient.d.ts\ndeclare module '$lib/auth' {}\n// ---cut---\n"
            "import { redirect } from '@sveltejs/kit';\nthrow redirect(303, '/login');\n```")
    ev = evidence("E1", text, path="load.md", start=10)
    statements, quotes = answer("How do I redirect from a load function?", [ev])
    shown = ("To redirect from a load function, throw `redirect`:\n```\n"
             "import { redirect } from '@sveltejs/kit';\nthrow redirect(303, '/login');\n```")
    assert statements == [(shown, ["E1"])]
    assert quotes == [(12, 20)]  # the sentence to the block's closing fence


def test_every_item_of_a_quoted_list_shows_its_marker() -> None:
    # A lead-in brings the first items (up to its word cap); the items after them are
    # quoted one by one, and must read as the same list, not as loose lines.
    items = "".join(f"* `tool {name}` - {what}.\n" for name, what in (
        ("new PATH", "Creates a new site with the default theme at the path given"),
        ("build", "Performs a one off build of your site to the output folder"),
        ("serve", "Builds your site any time a source file changes and serves it locally"),
        ("clean", "Removes all generated files: the output folder, metadata and caches"),
        ("help", "Shows help, optionally for a given subcommand")))
    text = "## Commands\n\nHere are some of the most common commands:\n\n" + items
    statements, _ = answer("Which command deletes the generated files and caches?",
                           [evidence("E1", text, path="usage.md")], FakeEmbedder())
    quoted = "\n".join(s for s, _ in statements)
    assert "`tool clean` - Removes all generated files" in quoted
    shown = [line for line in quoted.split("\n") if "`tool " in line]
    assert len(shown) >= 3 and all(line.startswith("* `tool ") for line in shown)


def test_code_a_paragraph_leads_into_with_an_ellipsis_is_never_quoted_without_it() -> None:
    # Reading back from the best passage stops between whole units: a paragraph ending in
    # "..." is one unit with the code it introduces, as one ending in ":" is.
    code = ("```python\nimport ssl\n# This context is the same as the default verify=True one,\n"
            "# so the client checks certificates against the bundled CA store as usual.\n"
            "ctx = ssl.create_default_context(cafile=where())\n```\n\n")
    text = ("## Client instances\n\nBy default the certifi CA bundle is used for verification.\n\n"
            "For more complex configurations you can pass an SSL context instance...\n\n" + code
            + "Using the `truststore` package to support system certificate stores...\n\n"
            "```python\nctx = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n```\n")
    statements, _ = answer("How can I make httpx use the system certificate store?",
                           [evidence("E1", text, path="ssl.md")], FakeEmbedder())
    quoted = statements[0][0]
    assert "Using the `truststore` package" in quoted
    assert "cafile=where()" not in quoted or "complex configurations you can pass" in quoted


def test_the_short_title_over_each_alternative_code_block_is_quoted_with_it() -> None:
    # Shell tabs: a one-word title over each block ("Bash", "CMD") is too short to be a
    # sentence, but the answer must still say which block is for which shell.
    text = ("## Skip dotenv\n\nYou can tell the tool not to load dotenv files by setting the "
            "`SKIP_DOTENV` environment variable before it starts.\n\nBash\n\n"
            "```\n$ export SKIP_DOTENV=1\n$ tool run\n```\n\nCMD\n\n"
            "```\n> set SKIP_DOTENV=1\n> tool run\n```\n")
    statements, _ = answer("How do I stop the tool from loading dotenv files?",
                           [evidence("E1", text, path="cli.md")], FakeEmbedder())
    quoted = statements[0][0]
    assert "\nBash\n```" in quoted and "\nCMD\n```" in quoted
    assert quoted.index("Bash") < quoted.index("export") < quoted.index("CMD") \
        < quoted.index("> set")


def test_each_content_tab_quoted_shows_its_title_over_its_code() -> None:
    # MkDocs content tabs: the titles are markup lines, but they say which file each block
    # goes in; the first block is the one the lead-in brings, the second is read on to.
    text = ('## Enabling the plugin\n\nTo enable the plugin, add `acme.mypy` to the plugins in '
            'your mypy config file:\n\n=== "`mypy.ini`"\n\n    ```ini\n    [mypy]\n'
            '    plugins = acme.mypy\n    ```\n\n=== "`pyproject.toml`"\n\n    ```toml\n'
            "    [tool.mypy]\n    plugins = ['acme.mypy']\n    ```\n")
    statements, _ = answer("How do I enable the acme mypy plugin?",
                           [evidence("E1", text, path="mypy.md")], FakeEmbedder())
    quoted = statements[0][0]
    assert "config file:\n`mypy.ini`\n```" in quoted
    assert "```\n`pyproject.toml`\n```" in quoted


def test_a_code_block_titled_in_its_fence_is_quoted_under_its_title() -> None:
    # VitePress code groups name each file in the fence (```js [vite.config.js]```); MkDocs
    # writes title="...". The title says where the code goes, so the quote shows it.
    text = ("## Library mode\n\nTo bundle a library, set the `build.lib` option and list "
            "the entry file of the library:\n\n::: code-group\n\n```js [vite.config.js]\n"
            "export default defineConfig({ build: { lib: { entry: 'lib/main.js' } } })\n```\n\n"
            '```json title="package.json"\n{ "main": "./dist/my-lib.umd.cjs" }\n```\n\n:::\n')
    statements, _ = answer("How do I bundle a library with the build.lib option?",
                           [evidence("E1", text, path="build.md")], FakeEmbedder())
    quoted = statements[0][0]
    assert "\nvite.config.js\n```" in quoted and "\npackage.json\n```" in quoted


def test_a_three_line_snippet_after_a_paragraph_is_quoted_with_it_a_longer_block_is_not() -> None:
    snippet = (">>> import tool\n>>> transport = tool.Transport(retries=1)\n"
               ">>> client = tool.Client(transport=transport)")
    longer = snippet + "\n>>> client.get('/')\n>>> client.close()\n>>> print('done')"
    for code, brought in ((snippet, True), (longer, False)):
        text = f"Connection retries are available through the transport.\n\n```\n{code}\n```\n"
        blocks = read_blocks(text)
        first = sentences(blocks)[0]
        quoted, last = quote(first, attachment(blocks, first))
        assert ("transport = tool.Transport(retries=1)" in quoted) is brought
        assert last == (len(text.split("\n")) - 2 if brought else 0)
