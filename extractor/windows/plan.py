"""Cutting a document into windows of whole sentences that fit the model's budgets.

A window is a run of consecutive sentences (never part of one) that one model call accounts for, plus up to
``overlap`` sentences before it shown as context only. Windows end at a block boundary where one lies in
the second half of the window, so a list or a paragraph is not split between two calls unless it has to
be. Planning is linear in the number of sentences.

What an answer costs is estimated before it exists: one ``sentenceCoverage`` entry per sentence
(``COVERAGE_ENTRY_TOKENS``) plus, conservatively, the sentence twice (a value taken from it and the verbatim
excerpt that backs the value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from extractor.document import Document, Sentence
from extractor.generate.prompt import sentence_line
from extractor.vocab import DEFAULT_OVERLAP
from extractor.windows.tokens import Budget, TokenCounter

COVERAGE_ENTRY_TOKENS = 40
"""``{"sentenceId": "s1234", "status": "UNMAPPED", "fieldPaths": [], "reason": "..."}`` with a short reason."""
ANSWER_SKELETON_TOKENS = 200
"""The answer's keys, brackets and scalar fields, whatever the document's length."""
MESSAGE_OVERHEAD_TOKENS = 8
"""Chat markup around each message (role, separators)."""

CONTEXT_NOTE = "(context only: {first}-{last} come before this part; read them, do not account for them)"
PART_NOTE = ("(this long document is read in parts; this is part {index} of {total}: account for every sentence "
             "{first}-{last}, each exactly once, and only these; field paths index your own answer's lists)")


class BudgetError(ValueError):
    """The fixed part of the prompt alone does not fit the input budget: no window can."""


@dataclass(frozen=True)
class Window:
    """Sentences ``[start, end)`` (0-based positions) are this window's own; ``[context, start)`` are context."""

    index: int  # 1-based, in source order
    start: int
    end: int
    context: int

    @property
    def first_number(self) -> int:
        """1-based number of the first own sentence (``s{first_number}`` for segmented text)."""
        return self.start + 1

    @property
    def last_number(self) -> int:
        return self.end

    def own(self, document: Document) -> list[Sentence]:
        return document.sentences[self.start:self.end]

    def describe(self, document: Document) -> str:
        return f"window {self.index} ({document.sentences[self.start].id}-{document.sentences[self.end - 1].id})"


@dataclass(frozen=True)
class Costs:
    """Token costs of one document against one prompt: per sentence, and what every call repeats."""

    fixed_input: int
    inputs: Sequence[int]  # tokens of each sentence's prompt line
    outputs: Sequence[int]  # tokens each sentence is expected to add to the answer

    def fits(self, budget: Budget) -> bool:
        """Whether the whole document goes in one call."""
        return (self.fixed_input + sum(self.inputs) <= budget.max_input
                and ANSWER_SKELETON_TOKENS + sum(self.outputs) <= budget.max_output)


def costs(document: Document, counter: TokenCounter, fixed_input: int) -> Costs:
    """Count every sentence's line once (``fixed_input``: the request's tokens without any sentence)."""
    inputs = [counter.count(sentence_line(sentence)) + 1 for sentence in document.sentences]
    outputs = [COVERAGE_ENTRY_TOKENS + 2 * tokens for tokens in inputs]
    notes = counter.count(CONTEXT_NOTE + PART_NOTE) + 16  # the notes with their numbers filled in
    return Costs(fixed_input + notes, inputs, outputs)


def plan(document: Document, costs: Costs, budget: Budget, overlap: int = DEFAULT_OVERLAP) -> list[Window]:
    """Windows covering every sentence once, in order; one window when the whole document fits.

    A single sentence larger than a budget still gets a window of its own (a sentence is never cut); the
    model may then run out of room, which validation reports like any other short answer.
    """
    count = len(document.sentences)
    if costs.fits(budget) or count <= 1:
        return [Window(1, 0, count, 0)]
    if costs.fixed_input >= budget.max_input:
        raise BudgetError(f"the prompt without any sentence takes {costs.fixed_input} tokens, more than "
                          f"--max-input-tokens {budget.max_input}")
    blocks = [sentence.block for sentence in document.sentences]
    windows: list[Window] = []
    start = 0
    while start < count:
        context = max(0, start - overlap) if windows else start
        used_in = costs.fixed_input + sum(costs.inputs[context:start])
        used_out = ANSWER_SKELETON_TOKENS
        end, boundary = start, None
        while end < count and (end == start or (used_in + costs.inputs[end] <= budget.max_input
                                                and used_out + costs.outputs[end] <= budget.max_output)):
            used_in += costs.inputs[end]
            used_out += costs.outputs[end]
            end += 1
            if end < count and blocks[end] != blocks[end - 1]:
                boundary = end
        if end < count and boundary is not None and boundary - start >= (end - start + 1) // 2:
            end = boundary
        windows.append(Window(len(windows) + 1, start, end, context))
        start = end
    return windows


def window_lines(document: Document, window: Window, total: int) -> str:
    """The window's sentences as the prompt shows them: the context (marked) first, then its own."""
    sentences = document.sentences
    own = sentences[window.start:window.end]
    lines = []
    if window.context < window.start:
        lines.append(CONTEXT_NOTE.format(first=sentences[window.context].id, last=sentences[window.start - 1].id))
        lines += [sentence_line(s) for s in sentences[window.context:window.start]]
    lines.append(PART_NOTE.format(index=window.index, total=total, first=own[0].id, last=own[-1].id))
    lines += [sentence_line(s) for s in own]
    return "\n".join(lines)
