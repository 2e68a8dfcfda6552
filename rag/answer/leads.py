"""What a first quote brings from before its best sentence: the opening of its section
(docs state a section's point first, then explain), or the sentence it points back to."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.answer.candidates import Passage

__all__ = ["section_lead"]

# A sentence that opens by pointing back at the one before it.
_REFERS_BACK = re.compile(r"(?i)^(?:so|then|thus|therefore|hence|consequently|as\s+a\s+result"
                          r"|that\s+way|this\s+way|with\s+th(?:at|is)"
                          r"|in\s+th(?:at|is)\s+case|because\s+of\s+th(?:at|is)|that|this|these"
                          r"|those|it|and|but)\b")
# A section's (or definition-list entry's: its term and first sentences) opening this short
# before the best sentence is quoted too.
LEAD_WORDS = 90


def section_lead(best: Passage, passages: Sequence[Passage]) -> list[Passage]:
    """The sentences that open the best passage's section (or its definition-list entry)
    before it, when the quote should start there: docs state a section's point first
    ("You shouldn't pin starlette."), then explain, so a best sentence a few words into its
    section is quoted from the start; an entry's first sentence names what it defines."""
    same = sorted((p for p in passages if p.evidence is best.evidence
                   and p.section == best.section
                   and (not best.entry or p.group == best.group)),
                  key=lambda p: p.order)
    before = [p for p in same if p is not best and best in p.window]  # run on into best
    # A list item that a sentence before it brought (it ends in ':') is quoted with it.
    before = [p for p in before if not any(o is not p and o.lines[0] < p.lines[0]
                                           and p.lines[1] <= o.lines[1] for o in before)]
    if not before or before[0] is not same[0] or same[0].sentence.continues \
            or (same[0].section < 0 and not best.entry) \
            or sum(p.words for p in before) > LEAD_WORDS:
        # "So, the prefix in this case is `/items`." says what the sentence before it
        # said: quote that one too.
        last = before[-1] if before else None
        return [last] if last is not None and last.window[0] is best \
            and last.block.kind == "prose" and not last.brings \
            and _REFERS_BACK.match(best.sentence.text) else []  # (a sentence, no list)
    return before
