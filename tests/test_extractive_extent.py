"""Where an extractive quote starts and how far it reads on: from a section's point or
a sentence's cause, through its paragraph, list or code, never into the next section."""

from __future__ import annotations

from rag.answer.scoring import READ_WORDS
from rag.indexer.embedding import FakeEmbedder
from tests.conftest import quotable_sentences
from tests.test_extractive import answer, evidence, lines_of

# An opening longer than a lead (LEAD_WORDS): a quote from later in its section does not
# start there.
LONG_OPENING = ("This part of the guide walks through every piece of a larger project one "
                "step at a time, with the files it adds, the commands it runs, the settings "
                "it changes and the reasons for each of them, so that by the end of it you "
                "can lay out an application of your own in the same way and know which of "
                "those pieces you can leave out when a project is small. ")


def test_a_quote_runs_on_through_a_paragraph_written_on_one_line() -> None:
    # Docs that write each paragraph on one line: the sentence after the best one shares
    # its line, and the fact the question needs is in it.
    text = ("## Development mode\n\nRunning `tool dev` starts the development server. "
            "It listens on `127.0.0.1` only, so other machines on the network cannot "
            "reach it.\n\nAuto-reload is on by default.")
    shown = [evidence("E1", text, start=10)]
    statements, quotes = answer("Why can't another machine reach the tool dev server?", shown,
                                FakeEmbedder())
    assert statements[0][0].startswith("Running `tool dev`") and "127.0.0.1" in statements[0][0]
    assert quotes[0][0] == 12


def test_a_first_quote_reads_on_through_its_section_but_not_into_the_next() -> None:
    # The fact a reader needs often comes a paragraph or two after the sentence that best
    # matches the question: the quote reads on, within its section and the answer's length.
    filler = " ".join(f"Sentence {i} says more about how the cache stores entries."
                      for i in range(9))
    text = ("## Cache\n\nThe cache keeps responses on disk between runs.\n\n"
            f"{filler}\n\nEntries expire after 7 days unless `max_age` says otherwise.\n\n"
            "## Logging\n\nLogs go to stderr.")
    shown = [evidence("E1", text, start=1)]
    statements, quotes = answer("Where does the cache keep responses?", shown, FakeEmbedder())
    quoted = " ".join(t for t, _ in statements)
    assert quoted.startswith("The cache keeps responses on disk")
    assert "Entries expire after 7 days" in quoted  # past 90 words, within 170
    assert "Logs go to stderr" not in quoted  # not into the next section
    assert len(quoted.split()) <= READ_WORDS
    assert quotes[-1][1] == 7  # its lines end where the quote does


def test_a_quote_starts_where_its_short_section_states_the_point() -> None:
    text = ("## About the parser\n\nYou shouldn't pin the parser yourself.\n\n"
            "Each release of the tool needs one version of the parser library.\n\n"
            "So let the tool pick the parser version.")
    shown = [evidence("E1", text, path="deploy/versions.md", start=70)]
    statements, quotes = answer("Should I pin the parser library version next to the tool?",
                                shown, FakeEmbedder())
    assert statements[0][0].startswith("You shouldn't pin the parser yourself.")
    assert quotes[0][0] == 72


def test_a_quote_opening_a_section_named_by_an_identifier_says_the_name() -> None:
    text = ("## `date_from_datetime_inexact`\n\n"
            "This error is raised when the input `datetime` value for a `date` field has a "
            "nonzero time component.\n")
    shown = [evidence("E1", text, path="errors/validation_errors.md", start=296)]
    statements, quotes = answer("Which error do I get when a datetime with a time is passed "
                                "to a date field?", shown, FakeEmbedder())
    assert statements[0][0].startswith("`date_from_datetime_inexact`: This error is raised")
    assert quotes[0] == (296, 298)  # the heading's line is cited with the sentence


def test_an_ellipsis_sentence_finishes_the_quote_it_follows_but_never_starts_one() -> None:
    # FastAPI's docs split one sentence around its code: "Instead of writing: <code>
    # ...you write: <code>". The second half belongs to the quote; alone it is a fragment.
    text = ("## Shortcut\n\n"
            "For classes, a shorter form of the dependency declaration exists. Instead of writing:\n\n"
            "```Python\ncommons: Annotated[Params, Depends(Params)]\n```\n\n"
            "/// tip\n\nPrefer the `Annotated` version.\n\n///\n\n"
            "...you write:\n\n"
            "```Python\ncommons: Annotated[Params, Depends()]\n```\n\n"
            "/// tip\n\nPrefer the `Annotated` version.\n\n///\n")
    shown = [evidence("E1", text, path="tutorial/classes.md", start=40)]
    statements, quotes = answer("Is there a shorter form of the dependency declaration for classes?",
                                shown, FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("For classes, a shorter form")
    assert "...you write:\n```\ncommons: Annotated[Params, Depends()]\n```" in quoted
    assert quoted.count("Prefer the `Annotated` version.") == 1  # the tab's repeat is not
    assert "Depends()]" in lines_of(shown[0], quotes[0])
    assert "...you write:" not in quotable_sentences(text)


def test_a_sentence_that_points_back_is_quoted_with_the_one_before_it() -> None:
    intro = ("Routers group the path operations of one part of a bigger application, and "
             "each of them can declare the tags, responses and dependencies that all of its "
             "path operations share.")  # too long to open the quote as the section's lead
    # A paragraph that fits in an answer is quoted whole; this one is too long for that.
    steps = " ".join(f"Step {n} of the guide adds the files, commands and settings of that "
                     "part of the larger project." for n in range(1, 7))
    text = (f"## Prefix\n\n{LONG_OPENING}{intro} {steps} The router prefix must not "
            "include a final slash. "
            "So, the router prefix in this case is `/items`.")
    statements, quotes = answer("What is the router prefix in this case?",
                                [evidence("E1", text, path="tutorial/bigger.md")])
    assert statements[0][0].startswith("The router prefix must not include a final slash. "
                                       "So, the router prefix")
    assert not statements[0][0].startswith(("Routers group", "This part"))
    assert quotes[0] == (3, 3)  # one line: the paragraph is written on one line


def test_a_consequence_is_quoted_with_its_cause_but_not_with_the_note_title() -> None:
    # Jekyll's notes: an HTML title, then "X. As a result, Y." on one line.
    text = ("## Front matter\n\n" + LONG_OPENING + "Pages, posts and documents of every "
            "collection can set their "
            "own permalink in front matter, which wins over the permalink style set for the "
            "whole site in the configuration file.\n\n"  # too long to open the quote
            '<div class="note info">\n<h5>Specifying permalinks through the front matter</h5>\n'
            "<p>Built-in permalink styles are not recognized in front matter. As a result, "
            "<code>permalink: pretty</code> will not work.</p>\n</div>\n")
    statements, quotes = answer("Why does permalink: pretty not work in my page?",
                                [evidence("E1", text, path="permalinks.md", start=100)])
    quoted = statements[0][0]
    assert quoted == ("Built-in permalink styles are not recognized in front matter. "
                      "As a result, `permalink: pretty` will not work.")
    assert quotes[0] == (106, 106)


def test_a_list_item_is_never_pulled_in_by_a_sentence_that_points_back() -> None:
    text = ("## Router\n\n" + LONG_OPENING + "\n\nEach router declares, for all of its path "
            "operations, the shared "
            "tags, responses, dependencies, callbacks, and a prefix that ends its path, so "
            "that the application that includes it, or any other application, can mount "
            "all of them at once under that prefix:\n\n"  # too long to be a lead
            "* The response `418`. 🍵\n\n"
            "But that prefix will only affect the router in our app, not in any other code.")
    statements, _ = answer("Will the router prefix affect other code that uses the router?",
                           [evidence("E1", text, path="tutorial/bigger.md")])
    assert statements[0][0].startswith("But that prefix will only affect")


def test_a_short_section_opening_brings_its_list_once_before_the_best_sentence() -> None:
    text = ("## Router\n\nEach router declares the shared tags and a prefix:\n\n"
            "* The response `418`. 🍵\n\n"
            "But that prefix will only affect the router in our app, not in any other code.")
    statements, quotes = answer("Will the router prefix affect other code that uses the router?",
                                [evidence("E1", text, path="tutorial/bigger.md")])
    assert statements[0][0] == (
        "Each router declares the shared tags and a prefix:\n* The response `418`. 🍵\n"
        "But that prefix will only affect the router in our app, not in any other code.")
    assert quotes[0] == (3, 7)


def test_a_quote_runs_on_past_the_list_its_sentence_introduces() -> None:
    text = ("## Watching\n\nThe file watcher may not detect file changes when:\n\n"
            "- Running inside WSL with the project files on a Windows partition\n"
            "- Running with the project files on a network share\n\n"
            "In these cases, use the `--poll` command line flag instead.")
    statements, quotes = answer("Why doesn't the file watcher detect changes in WSL?",
                                [evidence("E1", text, path="faq.md")], FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("The file watcher may not detect file changes when:")
    assert quoted.endswith("\nIn these cases, use the `--poll` command line flag instead.")
    assert quotes[0] == (3, 8)


def test_a_short_first_sentence_is_quoted_with_the_one_after_it() -> None:
    text = "## Several folders\n\nYes. Give each folder its own index with `--index` and pass it on.\n"
    statements, quotes = answer("Can I keep several docs folders apart?",
                                [evidence("E1", text, path="faq.md", start=30)], FakeEmbedder())
    assert statements[0][0].startswith("Yes. Give each folder") and quotes[0] == (32, 32)


def test_a_short_lead_in_naming_what_its_code_does_is_quotable() -> None:
    # "To install `ruff`:" is three words, but the command after it answers "how".
    text = ("## Installing tools\n\nTools used often can live in their own environment.\n\n"
            "To install `ruff`:\n\n```console\n$ uv tool install ruff\n```\n\n"
            "After installing `ruff`, it should be available:\n\n```console\n$ ruff --version\n```\n")
    statements, quotes = answer("How do I install a tool like ruff?",
                                [evidence("E1", text, path="guides/tools.md", start=160)],
                                FakeEmbedder())
    assert "To install `ruff`:\n```\n$ uv tool install ruff\n```" in statements[0][0]
    assert quotes[0][0] <= 165


def test_a_first_quote_is_its_whole_paragraph_and_the_code_after_it() -> None:
    # The fact sits mid-paragraph, and the example after the paragraph is what a reader
    # would copy: the first quote is the paragraph, from its start, and that code block.
    text = ("## Digest authentication\n\n"
            "Digest authentication is a challenge-response scheme. Unlike basic "
            "authentication it never sends the password, so it suits plain HTTP.\n\n"
            "```python\nauth = DigestAuth(username=\"olivia\", password=\"secret\")\n"
            "client = Client(auth=auth)\nresponse = client.get(url)\n```\n")
    shown = [evidence("E1", text, path="auth.md", start=10)]
    statements, quotes = answer("Can digest authentication be used over plain HTTP?", shown,
                                FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("Digest authentication is a challenge-response scheme.")
    assert "```\nauth = DigestAuth(" in quoted
    assert quotes[0] == (12, 18)  # through the closing fence


def test_a_first_quote_reads_on_into_a_long_list_item_by_item() -> None:
    # The list after the answer is too long to quote whole: its first items are quoted,
    # as many as the answer's words allow, each on its own line.
    items = "".join(f"* Step {n} checks the {word} settings of the build and reports what it "
                    f"found there to the console.\n"
                    for n, word in enumerate(("cache", "output", "theme", "plugin", "search",
                                              "server", "locale", "feed", "asset", "link",
                                              "image", "menu"), start=1))
    text = ("## Checks\n\nThe doctor command runs twelve checks on a site before it is built, "
            "in this order.\n\n" + items)
    shown = [evidence("E1", text, path="doctor.md", start=1)]
    statements, quotes = answer("What does the doctor command check before a build?", shown,
                                FakeEmbedder())
    quoted = statements[0][0]
    assert quoted.startswith("The doctor command runs twelve checks")
    assert "\n* Step 1 checks the cache settings" in quoted
    assert "Step 12" not in quoted  # the budget ends the list, at an item's end
    assert quoted.rstrip().endswith("to the console.")
    assert quotes[0][0] == 3


def test_a_first_quote_never_opens_with_code_whose_paragraph_it_leaves_out() -> None:
    # The code before the answer shows the paragraph before it, not the answer: read back,
    # it comes with that paragraph or not at all.
    tail = ("Connection retries are also available through the transport. Requests are "
            "retried the given number of times when a connection fails.\n\n```python\n"
            "transport = Transport(retries=1)\n```")

    def quoted_after(intro: str) -> tuple[str, int]:
        text = (f"## Transports\n\n{intro}\n\n```python\n"
                f"transport = Transport(local='0.0.0.0')\n```\n\n{tail}")
        statements, quotes = answer("Does the client retry when a connection fails?",
                                    [evidence("E1", text, start=1)], FakeEmbedder())
        return " ".join(t for t, _ in statements), quotes[0][0]

    long_intro = ("For some advanced configuration you might need to build a transport "
                  "yourself and hand it to the client. " + LONG_OPENING * 2).strip()
    quoted, first_line = quoted_after(long_intro)
    assert quoted.startswith("Connection retries are also available")
    assert "local=" not in quoted and "retries=1" in quoted
    assert first_line == 9  # the quote's lines start with its paragraph
    # A short paragraph before that code fits: the quote reads back to it, code and all.
    quoted, first_line = quoted_after("A transport can bind a local address.")
    assert quoted.startswith("A transport can bind a local address.") and "retries=1" in quoted
    assert first_line == 3
