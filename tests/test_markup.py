"""Docs-generator markup is left out of what is embedded and shown, its content stays."""

from __future__ import annotations

import pytest

from rag.reader.code_tail import code_continuation
from rag.reader.markup import clean_markup, display_lines
from rag.reader.passages import read_blocks
from rag.reader.prose import sentences as passage_sentences


def display_line(line: str) -> str:
    """One line shown without context (no open comment or fence before it)."""
    return display_lines([line])[0]


@pytest.mark.parametrize("line, shown", [
    ('{{< code-toggle file=hugo >}}', ""),
    ('{{< /code-toggle >}}', ""),
    ('{{% include "/_common/x.md" %}}', ""),
    ("Run {{< hl >}}hugo server{{< /hl >}} now.", "Run hugo server now."),
    ("Escaped: {{</* figure src=a.jpg */>}}", "Escaped: {{< figure src=a.jpg >}}"),
    ("{{%/* note */%}}", "{{% note %}}"),
    ('!!! note "Read this first"', "Read this first"),
    ("??? tip", ""),
    ('???+ warning inline end "Careful"', "Careful"),
    ("/// note | Technical Details", "Technical Details"),
    ("//// tab | Python 3.10+", "Python 3.10+"),
    ("///", ""),
    (":::tip Pro tip", "Pro tip"),
    (":::note[Heads up]", "Heads up"),
    (":::", ""),
    ("::tip", ""),
    ("{: .note .info}", ""),
    ("::: {.callout-note}", ""),
    (":::{figure} diagram.png", "diagram.png"),
    ('{% include note.html content="x" %}', ""),
    ('{% hint style="info" %}', ""),
    ("{% endhint %}", ""),
    ('::read-more{to="/docs/x" target="_blank"}', ""),
    ("::", ""),
    ('<TabItem value="npm" label="npm">', ""),
    ("</Tabs>", ""),
    ("<summary>Why is it slow?</summary>", "Why is it slow?"),
    ("<!-- markdownlint-disable -->", ""),
    ("Before <!-- hidden --> after", "Before  after"),
    ('[hugo]: https://gohugo.io "Hugo"', ""),
    ("[docs]: </a b/>", ""),
    ("{/* an MDX comment */}", ""),
    ("{* ../../docs_src/first_steps/tutorial001_py310.py hl[3] *}", ""),
    ('--8<-- "includes/abbreviations.md"', ""),
    ("{!> ../../docs_src/generate_clients/tutorial004.js!}", ""),
    ("{!../../docs_src/templates/templates/item.html!}", ""),
    ("  {#field-wrap-validator}", ""),
    ("{.no-wrap-first-col}", ""),
])
def test_markup_lines_show_only_their_content(line: str, shown: str) -> None:
    assert display_line(line) == shown


@pytest.mark.parametrize("line", [
    "[^1]: A footnote is text.",
    "<https://example.com> is an autolink.",
    "Use List<String> here.",
    "A [link][ref] in prose.",
    "import this from a sentence",  # not MDX: prose
    "{{ .Title }} is a template action, not a shortcode.",
    "{{< never closed",
    "{ #not-an-attribute-list",
    "{.} is a dict literal",
    "::1 is the IPv6 loopback address.",
    "{% raw %} opens a Liquid block, then text follows.",
    "{{ site.url }} is a Liquid variable.",
    "::before { content: none }",
])
def test_text_that_looks_like_markup_stays(line: str) -> None:
    assert display_line(line) == line


def test_multi_line_comments_shortcodes_and_admonitions() -> None:
    lines = [
        "<!-- a comment",
        "over two lines --> Visible.",
        "{{< img",
        '  src="kitten.jpg"',
        "  alt=\"A kitten\" >}}",
        '!!! warning "Mind the gap"',
        "    The body is indented.",
        "",
        "    Second paragraph.",
        "Back to normal text.",
    ]
    assert display_lines(lines) == [
        "", " Visible.", "", "", "", "Mind the gap", "The body is indented.", "",
        "Second paragraph.", "Back to normal text.",
    ]


def test_code_fences_keep_their_text_but_shortcodes_are_expanded() -> None:
    lines = ["```html", "<!-- kept: this is code -->", "<Tabs>", "[a]: /b",
             "{{</* figure */>}}", "```", "<!-- gone -->"]
    assert display_lines(lines) == [
        "```html", "<!-- kept: this is code -->", "<Tabs>", "[a]: /b", "{{< figure >}}",
        "```", "",
    ]
    # A file included into a code block is shown by the page, never as its include line.
    assert display_lines(["```jinja", "{!../../docs_src/templates/item.html!}",
                          '--8<-- "app.py"', "{* a Smarty comment *}", "```"]) == [
        "```jinja", "", "", "{* a Smarty comment *}", "```"]


def test_mdx_imports_and_exports_only_in_mdx() -> None:
    text = "import Tabs from '@theme/Tabs';\nexport const x = 1;\n\n# Title\n"
    assert clean_markup(text, mdx=True) == "# Title"
    assert clean_markup(text) == text.strip()


def test_clean_markup_keeps_content_and_one_blank_between_blocks() -> None:
    text = (
        "import TabItem from '@theme/TabItem';\n\n<Tabs>\n<TabItem value=\"py\">\n\n"
        "Install with pip.\n\n</TabItem>\n</Tabs>\n\n:::tip Fast path\n\nUse the wheel.\n\n:::\n"
    )
    assert clean_markup(text, mdx=True) == "Install with pip.\n\nFast path\n\nUse the wheel."


def test_pathological_markup_lines_are_handled() -> None:
    # Each of these made naive patterns backtrack; here they must simply come out right.
    spaces = " " * 40_000
    assert display_line(f"[a]: /b{spaces}x") == f"[a]: /b{spaces}x"
    assert display_line("{{<" * 20_000) == "{{<" * 20_000
    assert display_line("<a" * 20_000) == "<a" * 20_000
    assert display_line(f"!!! note{spaces}\"x") == f"!!! note{spaces}\"x"
    assert display_line("<!--" * 10_000) == ""


def test_a_version_marker_shortcode_reads_as_its_words() -> None:
    # Hugo renders {{< new-in X >}} as a "New in vX" badge: the version is what a reader sees.
    assert display_lines(["{{< new-in 0.140.0 />}}", ": {{< deprecated-in v0.144.0 >}}",
                          "{{< code-toggle file=hugo >}}"]) == [
        "New in 0.140.0", ": Deprecated in v0.144.0", ""]


def test_a_chunk_that_starts_inside_a_split_code_block_is_read_as_code_to_its_fence() -> None:
    tail = ['          "type": "null"', "        }", "      ],", '  "title": "Main"', "}",
            '"""', "```", "", "1. This produces a dict of the model's schema."]
    assert code_continuation(tail) == 7  # through the closing fence
    # Prose, a list, a heading, or a fence with a language before it: not inside code.
    assert code_continuation(["## Usage", "", "Run it:", "```"]) == 0
    assert code_continuation(["* `pydantic.errors.IntegerError`", "* `x.y`", "```"]) == 0
    assert code_continuation(["    }", "}", "```python", "x = 1", "```"]) == 0
    # A bare fence followed by code opens a block: what stands before it is not code.
    assert code_continuation(["print(a)", "print(b)", "```", "x = 1", "```"]) == 0
    # A chunk that starts on a block's closing fence: the next fence names a language, so
    # the first one closed a block, whatever stands between them.
    assert code_continuation(["```", "", "Alternatively, a validator can be used:", "",
                              "```python", "class User(BaseModel):", "```"]) == 1
    # Python lines are code, even ones that hold six plain words ("foo: str | None = None").
    python = ["from typing import Annotated", "", "class Model(BaseModel):",
              "    foo: str | None = None", "    bar: int = Field(description='The bar')"]
    assert code_continuation(python) == len(python)
    # An admonition's indented prose stays prose, calls in its code spans and all.
    assert code_continuation(["    property names instead by calling `model_json_schema()` or",
                              "    `model_dump_json()` with the `by_alias=False` argument."]) == 0


def test_a_split_code_blocks_tail_is_never_quoted_as_prose() -> None:
    tail = ('    "required": ["foo_bar"],\n    "title": "Main"\n}\n"""\n```\n\n'
            "Calling `json.dumps` on the schema dict produces a JSON string.\n")
    sentences = [s.text for s in passage_sentences(read_blocks(tail))]
    assert sentences == ["Calling `json.dumps` on the schema dict produces a JSON string."]


def test_mkdocs_content_tabs_show_their_title_and_dedented_body() -> None:
    lines = ['=== "pip"', "", "    ```bash", "    pip install pydantic", "    ```",
             '=== "uv"', "    uv add pydantic", "Back to text."]
    assert display_lines(lines) == ["pip", "", "```bash", "pip install pydantic", "```",
                                    "uv", "uv add pydantic", "Back to text."]
    text = ("The attribute name is used for validation.\n\n"
            '=== "`validate_by_alias` and `validate_by_name`"\n\n'
            "    Both names are accepted here.\n")
    assert [s.text for s in passage_sentences(read_blocks(text))] == [
        "The attribute name is used for validation.", "Both names are accepted here."]


def test_only_a_terminal_session_loses_its_tags_an_html_template_keeps_them() -> None:
    text = ("To link a page:\n\n```go-html-template\n"
            '<a href="{{ .RelPermalink }}">{{ .LinkTitle }}</a>\n```\n\n'
            'Run it:\n\n```console\n$ <font color="#4E9A06">fastapi</font> run --workers 4 '
            '<u style="text-decoration-style:solid">main.py</u>\n```\n')
    code = [b.lines for b in read_blocks(text) if b.kind == "code"]
    assert code == [('<a href="{{ .RelPermalink }}">{{ .LinkTitle }}</a>',),
                    ("$ fastapi run --workers 4 main.py",)]  # what a reader of each sees
    embedded = clean_markup(text)
    assert '<a href="{{ .RelPermalink }}">' in embedded
    assert "$ fastapi run --workers 4 main.py" in embedded and "<font" not in embedded


def test_a_block_attribute_line_is_never_read_into_a_list_items_sentence() -> None:
    text = ("* **Wrap validators** are the most flexible of all, and may return early.\n"
            "  {#field-wrap-validator}\n\n"
            "    Such validators take a handler as an extra argument.")
    found = [s.text for s in passage_sentences(read_blocks(text))]
    assert found[0] == "**Wrap validators** are the most flexible of all, and may return early."
    assert not any("{#" in s for s in found)


def test_twoslash_setup_and_directives_are_not_shown_the_code_after_the_cut_is() -> None:
    lines = ["```ts", "// @filename: ambient.d.ts", "declare module 'x' {", "}",
             "// @filename: index.ts", "// ---cut---", "import { f } from 'x';",
             "// @errors: 2345", "f('a');", "//   ^?", "// @ts-expect-error", "g();",
             "// ---cut-after---", "export {};", "```", "After the code."]
    assert display_lines(lines) == [
        "```ts", "", "", "", "", "", "import { f } from 'x';", "", "f('a');", "",
        "// @ts-expect-error", "g();", "", "", "```", "After the code."]
    # The answer quotes what the page shows; the block keeps one line per file line.
    text = "Call it like this:\n\n" + "\n".join(lines)
    block = next(b for b in read_blocks(text) if b.kind == "code")
    assert [line for line in block.lines if line] == [
        "import { f } from 'x';", "f('a');", "// @ts-expect-error", "g();"]
    assert len(block.lines) == 13


def test_myst_admonitions_show_their_content_as_prose_and_code_stays_code() -> None:
    text = ("Intro.\n\n````{note}\n:class: tip\nNotes hold **prose** a reader sees in a box.\n\n"
            "```python\nx = 1\n```\n````\n\n```{versionadded} 1.2\nThe `x` option is set in "
            "the config.\n```\n\n:::{warning}\nColon fences hold prose too.\n:::\n\n"
            "```{code-block} python\ny = 2\n```\n")
    assert clean_markup(text).split("\n") == [
        "Intro.", "", "Notes hold **prose** a reader sees in a box.", "", "```python",
        "x = 1", "```", "", "New in version 1.2:", "The `x` option is set in the config.", "",
        "Colon fences hold prose too.", "", "```{code-block} python", "y = 2", "```"]
    assert [s.text for s in passage_sentences(read_blocks(text))] == [
        "Notes hold **prose** a reader sees in a box.",
        "New in version 1.2: The `x` option is set in the config.",
        "Colon fences hold prose too."]
    code = [b.lines for b in read_blocks(text) if b.kind == "code"]
    assert code == [("x = 1",), ("y = 2",)]


def test_an_mdx_comment_giving_a_heading_its_id_is_not_part_of_the_heading() -> None:
    blocks = read_blocks("## Caveats {/*caveats*/}\n\nCall it at the top level of a component.\n")
    assert [b.heading for b in blocks] == ["Caveats"]


def test_nested_myst_admonitions_are_boxes_and_a_fence_shown_as_code_is_not() -> None:
    # The parser pairs the fences: a box in a box, and a box's fence quoted in a code block
    # (how a docs page shows MyST syntax), which stays code.
    text = ("`````{note}\nThe outer box holds a note the reader sees on the page.\n\n"
            "````{tip} Careful\nThe inner box warns the reader about one setting.\n\n"
            "```python\nz = 3\n```\n````\n`````\n\n"
            "~~~markdown\n```{note}\nShown as code.\n```\n~~~\n")
    assert clean_markup(text).split("\n") == [
        "The outer box holds a note the reader sees on the page.", "", "Careful",
        "The inner box warns the reader about one setting.", "", "```python", "z = 3", "```",
        "", "~~~markdown", "```{note}", "Shown as code.", "```", "~~~"]
    assert [s.text for s in passage_sentences(read_blocks(text))] == [
        "The outer box holds a note the reader sees on the page.",
        "Careful The inner box warns the reader about one setting."]
    assert [b.lines for b in read_blocks(text) if b.kind == "code"] == [
        ("z = 3",), ("```{note}", "Shown as code.", "```")]
