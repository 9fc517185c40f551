"""The card of the finding the long-document merge adds (``extractor.windows.merge``).

It is not checked on a candidate: the merge is the only place two windows' values meet, so it reports the
conflict there, and this card documents it for ``extract rules``. Every contract sends it to a person
(``extractor.contracts.registry.ALWAYS_NEEDS_PERSON``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from extractor.rules import Card, Hit, rule
from extractor.vocab import Severity

MERGE_VALUE_CONFLICT = "MERGE_VALUE_CONFLICT"


@rule(Card(
    MERGE_VALUE_CONFLICT,
    contract="*",
    stage="completeness",
    severity=Severity.WARNING,
    fires_when="two windows of a long document give one scalar field different values, each with evidence",
    inputs="the windows' partial candidates: the field's value and its first evidence excerpt in each window",
    normalisation="values compared after NFC, case folding and whitespace collapse",
    passes="every window that found the field found the same value (or only one window found it)",
    location="$.<field> (hint: both windows, values and excerpts)",
    judge_needed_after_failure="yes: the merge keeps the first value; a person decides which the source means",
))
def merge_value_conflict(context: Any) -> Iterator[Hit]:
    """Found by the merge itself, never on a single candidate."""
    return iter(())
