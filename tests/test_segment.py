"""Segment stage: exact offsets, no unit across a block, language-specific abbreviations, stable speed."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extractor.document import Block, BlockKind, Document, Sentence
from extractor.segment import SEGMENTER_ID, check_invariants, segment
from extractor.segment.align import align

ROOT = Path(__file__).resolve().parents[1]

# The Korean worked example, as bundled in samples/ (its blank lines hold a single space).
KOREAN_SAMPLE = (Path(__file__).resolve().parents[1] / "samples" / "ko_work_request_review.txt").read_text(encoding="utf-8")

KOREAN_SAMPLE_UNITS = [
    "작업 요청 검토 절차",
    "배경",
    "현재 작업 요청을 메일과 메신저로 전달하고 있어 요청 상태와 처리 이력을\n일관되게 확인하기 어렵습니다.",
    "목표",
    "요청자는 작업 내용을 등록하고 검토 결과를 확인할 수 있어야 합니다.",
    "검토자는 검토가 요청된 작업을 승인하거나 보완을 요청할 수 있어야 합니다.",
    "담당자",
    "요청자는 작업 내용을 작성하고 검토를 요청합니다.",
    "검토자는 검토가 요청된 작업 내용을 확인합니다.",
    "처리 절차",
    "요청자가 작업 내용을 작성합니다.",
    "요청자가 검토를 요청합니다.",
    "검토자는 요청을 승인하거나 보완을 요청합니다.",
    "검토자는 처리 결과와 검토 의견을 기록합니다.",
    "업무 규칙",
    "검토를 요청한 작업만 검토할 수 있습니다.",
    "검토 결과에는 처리자와 처리 시각이 포함되어야 합니다.",
]

H, P, L = BlockKind.HEADING, BlockKind.PARAGRAPH, BlockKind.LIST_ITEM
KOREAN_SAMPLE_LAYOUT = [(H, 1), (H, 1), (P, 2), (H, 1), (P, 2), (H, 1), (L, 1), (L, 1), (H, 1)]
KOREAN_SAMPLE_LAYOUT += [(L, 1)] * 4 + [(H, 1), (L, 1), (L, 1)]

_MARKER = re.compile(r"(?:[-*] |\d+\. )")


def document(text: str, blocks: list[Block]) -> Document:
    return Document(path="t", text=text, blocks=blocks, sha256="x", format="txt")


def by_lines(text: str, layout: list[tuple[BlockKind, int]]) -> Document:
    """One block per layout entry, taking that many non-blank lines; list items skip their marker."""
    lines: list[tuple[int, int]] = []
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            lines.append((offset, offset + len(line)))
        offset += len(line) + 1
    blocks: list[Block] = []
    for kind, count in layout:
        (start, _), (_, end) = lines[0], lines[count - 1]
        del lines[:count]
        marker = _MARKER.match(text, start) if kind is BlockKind.LIST_ITEM else None
        blocks.append(Block(len(blocks), kind, start, end, marker.end() if marker else start))
    assert not lines, "layout does not use every line"
    return document(text, blocks)


def paragraphs(text: str) -> Document:
    """One PARAGRAPH block per blank-line-separated group of lines (what a plain-text ingest does)."""
    blocks = [
        Block(index, BlockKind.PARAGRAPH, match.start(), match.end(), match.start())
        for index, match in enumerate(re.finditer(r"\S(?:.|\n(?!\s*\n))*", text))
    ]
    return document(text, blocks)


def units(text: str) -> list[str]:
    return [sentence.text for sentence in segment(paragraphs(text)).sentences]


def assert_no_split_inside_word(doc: Document) -> None:
    """Two units of a block may touch without whitespace only right after sentence punctuation."""
    for left, right in zip(doc.sentences, doc.sentences[1:]):
        if left.block == right.block and left.end == right.start:
            assert left.text.rstrip("\"'”’»)]}")[-1] in ".!?…。！？", (left.text, right.text)
            assert right.text[0].isalpha(), (left.text, right.text)


# --- identity and import cost ------------------------------------------------------------------


def test_segmenter_id_names_every_library_version() -> None:
    assert SEGMENTER_ID.startswith("extractor-seg/")
    for package in ("razdel", "pysbd"):
        assert f"{package}={version(package)}" in SEGMENTER_ID


HEAVY = ("kss", "kiwipiepy", "pecab", "razdel", "pysbd", "numpy", "scipy")
"""Libraries a process that segments Korean must not load (seconds and hundreds of MB: extractor.segment.korean)."""


def test_segmenting_korean_loads_no_library() -> None:
    """Importing the segment stage loads no splitter, and splitting Korean none either: every reader segments
    its first Korean document without an import of seconds (``bench/bench_korean.py`` holds the time)."""
    code = f"""if True:
        import sys, extractor.segment
        before = sorted(name for name in sys.modules if name.split(".")[0] in {HEAVY!r})
        from extractor.ingest import from_text
        units = [s.text for s in extractor.segment.segment(from_text(sys.stdin.read())).sentences]
        after = sorted(name for name in sys.modules if name.split(".")[0] in {HEAVY!r})
        print(before, after, len(units))
    """
    result = subprocess.run([sys.executable, "-c", code], input=KOREAN_SAMPLE, capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "[]", str(len(KOREAN_SAMPLE_UNITS))]


# --- Korean --------------------------------------------------------------------------------------


def test_korean_sample_units_follow_blocks() -> None:
    doc = segment(by_lines(KOREAN_SAMPLE, KOREAN_SAMPLE_LAYOUT))
    assert [s.text for s in doc.sentences] == KOREAN_SAMPLE_UNITS
    assert [s.id for s in doc.sentences] == [f"s{n}" for n in range(1, 18)]
    assert doc.sentences[3].block == 3 and doc.sentences[4].block == doc.sentences[5].block == 4
    assert doc.segmenter == SEGMENTER_ID
    check_invariants(doc)


def test_korean_sample_through_ingest() -> None:
    ingest = pytest.importorskip("extractor.ingest")
    doc = segment(ingest.from_text(KOREAN_SAMPLE))
    check_invariants(doc)
    assert [s.text for s in doc.sentences] == KOREAN_SAMPLE_UNITS


@pytest.mark.parametrize(
    "expected",
    [
        ["요청자가 작업 내용을 작성한다.", "검토자는 결과를 기록해요.", "언제까지 승인할까요?", "바로 승인합니다!"],
        ["요청자가 작업 내용을 작성합니다", "검토자는 요청을 승인합니다."],
        ["정말요?!", "그럴 리가요...", "다시 확인하겠습니다…", "끝났습니다."],
        ["압력은 1.5 bar 이하로 유지한다.", "온도는 36.5도를 넘지 않는다.", "예산은 3,500만 원이다."],
        ["2024. 3. 15. 부터 적용한다.", "v2.3.1 버전은 www.example.co.kr 에서 받는다."],
        ["1. 요청서를 작성한다.", "2. 검토를 요청한다.", "3. 결과를 기록한다."],
        ["가. 요청자는 요청을 수정할 수 있다.", "나. 검토자는 요청을 승인한다.", "Ⅱ. 과업 세부내용을 따른다."],
        ['그는 "내일 오겠다."라고 말했다.', "그러나 오지 않았다."],
        ['팀장은 "검토 완료." 하고 서명했다.', "결재가 끝났다."],
        ["“올해는 최선을 다하겠다.”라며 인사했다.", "요청은 반려됐다.", "사유는 「예산 초과」였다."],
        ["주문 번호: PO-2025-0314.", "아래 품목을 납품해 주십시오."],
        ["필터를 교체한다(2.5시간).", "시즌 5호 2루타.", "J. Kim 기사가 U.S. 규격으로 점검한다.", "담당은 И. И. Иванов 과장이다."],
    ],
    ids=["endings", "formal-ending-without-stop", "marks", "numbers", "dates-versions-addresses", "numbered-list",
         "lettered-list", "quotation-particle", "quotation-spoken-on", "closing-quotes", "code", "noun-initials"],
)
def test_korean_sentence_boundaries(expected: list[str]) -> None:
    assert units(" ".join(expected)) == expected
    assert units("\n".join(expected)) == expected


KOREAN_PIECES = ["요청자는", "검토를", "요청합니다", "합니다", "했다", "이다", "있어요", "하죠", "이", "다", "요", "니다", "가",
                 "까", "Ⅱ", "1", "2024", "A", ".", "!", "?", "…", "~", ",", ":", "(", ")", "[", "]", "「", "」", "“", "”",
                 "‘", "’", "'", '"', "하고", "라며", "①", "😀", " ", "  ", "\n", "\t", "\u3000"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(KOREAN_PIECES) | st.text(max_size=2), max_size=24).map("".join))
def test_korean_sentences_are_trimmed_slices_that_cover_the_text(text: str) -> None:
    """``korean.split`` returns slices of its text, in order, trimmed, together holding every character but the
    whitespace between them: the segmenter's offsets are the slices' (``extractor.segment.align``)."""
    from extractor.segment import korean

    position = 0
    for sentence in korean.split(text):
        assert sentence and sentence == sentence.strip(), sentence
        found = text.index(sentence, position)
        assert not text[position:found].strip(), (text, sentence)
        position = found + len(sentence)
    assert not text[position:].strip(), text


def test_a_splitter_alone_would_glue_a_heading_to_its_paragraph() -> None:
    """Why blocks come first: one paragraph block holding heading + text gives one glued unit."""
    assert units("목표\n요청자는 작업 내용을 등록합니다.") == ["목표\n요청자는 작업 내용을 등록합니다."]


def test_korean_never_split_inside_a_word() -> None:
    sentence = "검토자는 검토가 요청된 작업을 승인하거나 보완을 요청할 수 있어야 합니다."
    doc = segment(paragraphs(f"{sentence} {sentence}"))
    assert [s.text for s in doc.sentences] == [sentence, sentence]
    assert_no_split_inside_word(doc)


def test_glue_guard_repairs_a_mid_word_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A splitter that cuts inside a word (kss's morpheme backend gave ``... 검토가 요`` + ``청된 ...``): the guard
    joins the pieces back."""
    from extractor.segment import korean

    sentence = "검토자는 검토가 요청된 작업을 승인하거나 보완을 요청할 수 있어야 합니다."
    cut = sentence.index("청된")
    monkeypatch.setattr(korean, "split", lambda text: [sentence[:cut], sentence[cut:], sentence])
    doc = segment(paragraphs(f"{sentence} {sentence}"))
    assert [s.text for s in doc.sentences] == [sentence, sentence]


def test_korean_two_sentences_without_space_after_period() -> None:
    """A full stop between two syllables ends a sentence even without a space; the glue guard keeps that
    boundary because the left unit ends with sentence punctuation and a letter follows."""
    doc = segment(paragraphs("요청자가 작업을 작성합니다.검토자가 승인합니다."))
    assert [s.text for s in doc.sentences] == ["요청자가 작업을 작성합니다.", "검토자가 승인합니다."]
    assert doc.sentences[0].end == doc.sentences[1].start


def test_korean_without_final_punctuation_and_with_messy_spaces() -> None:
    text = "  요청자가 작업을   작성합니다.\t검토자가\n승인합니다  "
    assert units(text) == ["요청자가 작업을   작성합니다.", "검토자가\n승인합니다"]


def test_list_item_may_hold_two_sentences() -> None:
    text = "- 요청자가 작성합니다. 검토자가 승인합니다."
    doc = segment(document(text, [Block(0, BlockKind.LIST_ITEM, 0, len(text), 2)]))
    assert [s.text for s in doc.sentences] == ["요청자가 작성합니다.", "검토자가 승인합니다."]


# --- Russian -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Купили бумагу, ручки и т. п. для офиса. Затем проверили.", ["Купили бумагу, ручки и т. п. для офиса."]),
        ("Это, т. е. отчёт, готов. Далее работа.", ["Это, т. е. отчёт, готов."]),
        ("Купили столы и т.д. и всё привезли. Потом ушли.", ["Купили столы и т.д. и всё привезли."]),
        ("Договор подписан в 2023 г. и действует год. Вторая фраза.", ["Договор подписан в 2023 г. и действует год."]),
        ("Отчёт подписал И. И. Иванов. Затем его утвердили.", ["Отчёт подписал И. И. Иванов."]),
    ],
)
def test_russian_abbreviations_stay_inside_a_sentence(text: str, expected: list[str]) -> None:
    result = units(text)
    assert result[: len(expected)] == expected and len(result) == 2


def test_russian_abbreviations_that_end_a_sentence_still_do() -> None:
    """``д.`` (дом) and ``п.`` (пункт) never end a sentence, but ``и т. д.`` and ``и т. п.`` often do."""
    assert units("Купили столы и т. д. Потом всё привезли. Взяли бумагу и т. п. Затем ушли.") == [
        "Купили столы и т. д.",
        "Потом всё привезли.",
        "Взяли бумагу и т. п.",
        "Затем ушли.",
    ]


def test_russian_without_final_punctuation() -> None:
    assert units("Первое предложение!  Второе?\nТретье… Четвёртое без точки") == [
        "Первое предложение!",
        "Второе?",
        "Третье…",
        "Четвёртое без точки",
    ]


# --- English -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, first",
    [
        ("Use a tool, e.g. a hammer, for this. Then stop.", "Use a tool, e.g. a hammer, for this."),
        ("Pick one, i.e. the best one. Done.", "Pick one, i.e. the best one."),
        ("Mr. Smith arrived at 5 p.m. and left. Bye.", "Mr. Smith arrived at 5 p.m. and left."),
        ("The U.S. office is closed. Another one.", "The U.S. office is closed."),
        ("See sec. 4.2 for details. Next.", "See sec. 4.2 for details."),
        ("Item No. 5 is missing. Report it.", "Item No. 5 is missing."),
    ],
)
def test_english_abbreviations_stay_inside_a_sentence(text: str, first: str) -> None:
    result = units(text)
    assert result[0] == first and len(result) == 2


def test_english_without_final_punctuation_and_trailing_space() -> None:
    """pysbd returns sentences with their trailing whitespace; units are trimmed."""
    assert units("  First one!  Second?\nThird line has no stop   ") == [
        "First one!",
        "Second?",
        "Third line has no stop",
    ]


def test_english_wrapped_lines_are_one_sentence() -> None:
    """pysbd alone ends a sentence at every line break; a block's lines are one paragraph or item."""
    assert units("The manager approves the request\nwithin two days. The clerk files\nit.") == [
        "The manager approves the request\nwithin two days.",
        "The clerk files\nit.",
    ]


def test_fenced_code_is_one_unit() -> None:
    doc = _from_text("Run this:\n\n```\nexport A=1. B=2.\n\nmake all\n```\n")
    assert [(s.text, doc.blocks[s.block].kind) for s in doc.sentences] == [
        ("Run this:", BlockKind.PARAGRAPH),
        ("export A=1. B=2.\n\nmake all", BlockKind.CODE),
    ]


@pytest.mark.parametrize(
    ("text", "never_final"),
    [
        ("порядке, т. е.", True), ("т.е.", True), ("Т. е.", True), ("в т. ч.", True), ("см.", True), ("доб.", True),
        ("e.g.", True), ("No.", True), ("отел.", False), ("no.", False), ("и т. д.", False), ("и т.п.", False),
        ("2024 г.", False), ("закупок.", False), ("etc.", False), ("д.", True), ("с.", True),
    ],
)  # fmt: skip
def test_abbreviations_that_never_end_a_sentence(text: str, never_final: bool) -> None:
    from extractor.segment.abbreviations import ends_with_abbreviation, mask

    assert ends_with_abbreviation(text) is never_final
    masked = mask(text)
    assert len(masked) == len(text) and (masked != text) is never_final


def test_units_never_cross_blocks_of_any_kind() -> None:
    heading, paragraph, row = "Goal", "The clerk files it. The lead signs it.", "| Cell one. Cell two |"
    text = f"{heading}\n{paragraph}\n{row}"
    cell = text.index(row)
    blocks = [
        Block(0, BlockKind.HEADING, 0, len(heading), 0),
        Block(1, BlockKind.PARAGRAPH, len(heading) + 1, cell - 1, len(heading) + 1),
        Block(2, BlockKind.TABLE_CELL, cell, len(text), cell + 2),
    ]
    doc = segment(document(text, blocks))
    assert [(s.text, s.block) for s in doc.sentences] == [
        ("Goal", 0),
        ("The clerk files it.", 1),
        ("The lead signs it.", 1),
        ("Cell one.", 2),
        ("Cell two |", 2),
    ]


def test_empty_and_blank_blocks_give_no_units() -> None:
    doc = segment(document(" \n\t", [Block(0, BlockKind.PARAGRAPH, 0, 3, 0), Block(1, BlockKind.HEADING, 1, 1, 1)]))
    assert doc.sentences == [] and doc.segmenter == SEGMENTER_ID


# --- performance ---------------------------------------------------------------------------------


def _generated(words: list[str], count: int, seed: int) -> list[str]:
    chooser = random.Random(seed)
    return [
        " ".join([chooser.choice(words).capitalize()] + [chooser.choice(words) for _ in range(11)]) + "."
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    "words",
    [
        "the clerk will review every request e.g. a note and record the result at noon".split(),
        "отдел рассмотрит каждую заявку т. е. письмо и запишет результат в журнал".split(),
    ],
    ids=["english", "russian"],
)
def test_two_thousand_sentences_in_one_paragraph_are_exact(words: list[str]) -> None:
    """One block of 2,000 sentences is split a window at a time (pysbd alone needs ~11 s on it; the speed
    is measured by bench/bench_segment.py), and no window edge moves a boundary."""
    sentences = _generated(words, 2000, seed=7)
    doc = segment(paragraphs(" ".join(sentences)))
    assert [s.text for s in doc.sentences] == sentences


def test_sentence_longer_than_the_window_stays_whole() -> None:
    long_sentence = " ".join(["word"] * 1500) + "."
    assert units(f"Short one. {long_sentence} Short two.") == ["Short one.", long_sentence, "Short two."]


# --- properties ----------------------------------------------------------------------------------

KOREAN_WORDS = ["요청자는", "검토를", "요청합니다", "합니다.", "작업", "승인", "보완을", "확인할", "ㅋㅋ"]
RUSSIAN_WORDS = ["отдел", "заявку", "т. п.", "т. е.", "и т.д.", "2023 г.", "И. И. Иванов", "Проверил"]
ENGLISH_WORDS = ["The", "clerk", "e.g.", "i.e.", "Mr.", "U.S.", "p.m.", "sec. 4.2", "No. 5", "files"]
MARKS = [".", "!", "?", "…", "...", ",", "»", ")", '"']
SPACES = [" ", "  ", "\t", "\n", "\n\n", " \n "]


def _text(languages: list[list[str]]) -> st.SearchStrategy[str]:
    token = st.sampled_from([word for words in languages for word in words] + MARKS + SPACES)
    return st.lists(token, max_size=40).map("".join)


@st.composite
def documents(draw: st.DrawFn, languages: list[list[str]]) -> Document:
    """Random text with random (possibly gapped, possibly empty) blocks and content offsets."""
    text = draw(_text(languages))
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=6)) | {0, len(text)})
    blocks: list[Block] = []
    for start, end in zip(cuts, cuts[1:]):
        if draw(st.booleans()) or not blocks:
            skip = draw(st.integers(0, min(3, end - start)))
            blocks.append(Block(len(blocks), draw(st.sampled_from(list(BlockKind))), start, end, start + skip))
    return document(text, blocks)


@settings(max_examples=300, deadline=None)
@given(documents([RUSSIAN_WORDS, ENGLISH_WORDS]))
def test_invariants_hold_for_russian_and_english(doc: Document) -> None:
    check_invariants(segment(doc))
    assert_no_split_inside_word(doc)


@settings(max_examples=300, deadline=None)
@given(documents([KOREAN_WORDS, RUSSIAN_WORDS, ENGLISH_WORDS]))
def test_invariants_hold_with_korean(doc: Document) -> None:
    check_invariants(segment(doc))
    assert_no_split_inside_word(doc)


@settings(max_examples=100, deadline=None)
@given(documents([KOREAN_WORDS, RUSSIAN_WORDS, ENGLISH_WORDS]), st.integers(1, 60))
def test_invariants_hold_with_tiny_windows(doc: Document, window: int) -> None:
    """Windows of a few characters force every re-split and window-doubling path."""
    import extractor.segment

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(extractor.segment, "_WINDOW", window)
        check_invariants(segment(doc))
    assert_no_split_inside_word(doc)


def _checked_align(content: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Run ``align`` and check its spans with the same invariants as a segmented document."""
    spans = align(content, pieces)
    sentences = [Sentence(f"s{n}", content[a:b], a, b, 0) for n, (a, b) in enumerate(spans, start=1)]
    doc = document(content, [Block(0, BlockKind.PARAGRAPH, 0, len(content), 0)])
    doc.sentences = sentences
    check_invariants(doc)
    return spans


@st.composite
def split_content(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A text and an honest split of it into consecutive pieces."""
    content = draw(_text([KOREAN_WORDS, RUSSIAN_WORDS, ENGLISH_WORDS]))
    cuts = sorted(draw(st.sets(st.integers(0, len(content)), max_size=8)) | {0, len(content)})
    return content, [content[a:b] for a, b in zip(cuts, cuts[1:])]


def _respace(piece: str, mode: int) -> str:
    return [piece.strip(), re.sub(r"\s+", " ", piece), "".join(piece.split()), f"  {piece}\n", piece][mode]


@settings(max_examples=300, deadline=None)
@given(split_content(), st.lists(st.integers(0, 4), min_size=8, max_size=8))
def test_align_recovers_exact_units_despite_whitespace_changes(
    case: tuple[str, list[str]], modes: list[int]
) -> None:
    content, pieces = case
    spans = _checked_align(content, [_respace(piece, modes[n % 8]) for n, piece in enumerate(pieces)])
    trimmed = [piece.strip() for piece in pieces if piece.strip()]
    # honest cuts inside a word give units that touch; each found piece is exactly one unit
    assert [content[a:b] for a, b in spans] == trimmed


def _mutate(pieces: list[str], edits: list[tuple[int, int, str]]) -> list[str]:
    """Apply splitter misbehaviour: drop, duplicate, alter, insert garbage, swap, respace."""
    result = list(pieces)
    for kind, where, char in edits:
        if not result:
            result.append(char)
            continue
        n = where % len(result)
        piece = result[n]
        if kind == 0:
            del result[n]
        elif kind == 1:
            result.insert(n, piece)
        elif kind == 2 and piece:
            result[n] = piece[: where % len(piece)] + char + piece[where % len(piece) + 1 :]
        elif kind == 3:
            result.insert(n, char * (where % 5 + 1))
        elif kind == 4 and n + 1 < len(result):
            result[n], result[n + 1] = result[n + 1], result[n]
        elif kind == 5:
            result[n] = piece.upper() + char
        else:
            result[n] = _respace(piece, where % 5)
    return result


@settings(max_examples=500, deadline=None)
@given(
    split_content(),
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1000), st.sampled_from(["x", "가", "ё", ".", " ", "ﬁ"]))),
)
def test_align_never_violates_invariants_on_adversarial_pieces(
    case: tuple[str, list[str]], edits: list[tuple[int, int, str]]
) -> None:
    content, pieces = case
    _checked_align(content, _mutate(pieces, edits))


def test_align_keeps_text_a_splitter_dropped_or_altered() -> None:
    content = "One two.  Three four.\nFive six."
    assert _checked_align(content, ["One two.", "Five six."]) == [(0, 8), (10, 21), (22, 31)]
    assert _checked_align(content, ["One two.", "Three ﬁve.", "Five six."]) == [(0, 8), (10, 21), (22, 31)]
    assert _checked_align(content, []) == [(0, 31)]
    assert _checked_align("", ["garbage"]) == []


def test_align_of_a_big_block_with_every_piece_altered() -> None:
    """Every piece altered (the worst case for searching; its speed is in bench/bench_segment.py): no piece
    is found, so the whole 200,000-character block is one unit rather than anything lost."""
    pieces = [f"Sentence number {n} is here." for n in range(7000)]
    content = " ".join(pieces)
    assert _checked_align(content, [piece.replace("is", "IS") for piece in pieces]) == [(0, len(content))]


# --- real Korean and Russian layouts ----------------------------------------------------------

LAYOUTS = ROOT / "tests" / "corpus" / "layouts"

# What a person would quote from tests/corpus/layouts/ko_work_request_procedure.txt, in order.
KOREAN_PROCEDURE_UNITS = [
    "업무 요청 처리 절차서",
    "문서번호: 경영지원-2024-07 / 개정일: 2024. 2. 15.",
    "목적",
    "이 절차서는 부서 간 업무 요청의 접수, 검토, 처리 및 종결 기준을 정하여 요청 누락과\n처리 지연을 방지하는 것을 목적으로 한다.",
    "적용 범위",
    "이 절차서는 본사와 지점의 모든 부서에서 발생하는 업무 요청에 적용한다.",
    "다만, 전산 장애 신고는 별도의 장애 대응 절차를 따른다.",
    "추진 배경",
    "현황 및 문제점",
    "업무 요청이 메일, 메신저, 전화 등으로 분산 접수되어 처리 이력 확인이 어려움",
    "요청 누락과 처리 지연에 대한 책임 소재가 불분명함",
    "2023년 요청 처리 평균 소요 기간 5.2일, 기한 초과 비율 18%",
    "개선 방향",
    "모든 업무 요청은 업무포털 요청 게시판으로 일원화함",
    "요청별 담당자와 처리 기한을 지정하고, 기한 경과 시 알림을\n   자동으로 발송함",
    "처리 절차",
    "제1조(요청 등록)",
    "요청자는 업무포털에 요청 내용, 희망 완료일 및 첨부 자료를\n등록하여야 한다.",
    "긴급한 요청은 제목 앞에 [긴급]을 표시하고 담당 부서장에게 전화로 알린다.",
    "제2조(검토)",
    "검토자는 요청을 접수한 날부터 2일 이내에 검토 결과를 등록한다.",
    "검토자는 요청 내용이 불명확한 경우 보완을 요청할 수 있다.",
    "보완 요청을 받은 요청자는 3일 이내에 보완하여야 하며, 기한 내에 보완하지 않으면\n요청은 자동으로 종결된다.",
    "제3조(처리 및 종결)",
    "처리 담당자는 처리 결과를 등록하고 요청자에게 알린다.",
    "요청자는 처리 결과를 확인한 후 7일 이내에 종결 처리한다.",
    "기한 내에 종결하지\n않으면 시스템이 자동으로 종결한다.",
    "업무 규칙",
    "요청자는 자신이 등록한 요청만 수정하거나 취소할 수 있다.",
    "검토자와 처리 담당자는 같은 사람이 될 수 없다.",
    "처리 기한을 넘긴 요청은 매주 월요일 부서장 회의에 보고한다.",
    "문의처",
    "경영지원팀 김민수 과장(내선 412, minsu.kim@example.co.kr)",
    "시행일",
    "이 절차서는 2024년 3월 1일부터 시행한다.",
]
# The markers no unit holds, in order: numbers, 개조식 bullets, circled clauses, 가나다, ■.
KOREAN_PROCEDURE_MARKERS = "1.2.3.□○○-□○○4.①②①②③①②5.가.나.다.■■"

RUSSIAN_REGLAMENT_UNITS = [
    "РЕГЛАМЕНТ\nсогласования закупок у единственного поставщика\nООО «Северный ветер»",
    "Общие положения",
    "Настоящий регламент устанавливает порядок согласования закупок у единственного\n"
    "поставщика, если стоимость закупки превышает 100 тыс. руб., т. е.\nлюбых закупок, кроме мелких.",
    "Закупка у единственного поставщика допускается только в исключительных случаях,\n"
    "т. к. она не позволяет сравнить цены нескольких поставщиков.",
    "Регламент обязателен для всех подразделений Общества, в т. ч. для филиалов.",
    "Участники",
    "В согласовании участвуют:",
    "инициатор — сотрудник подразделения, которому нужен товар или услуга;",
    "руководитель подразделения инициатора;",
    "специалист отдела закупок;",
    "финансовый директор (при превышении лимита).",
    "Заявки принимает отдел закупок по адресу: 125009,\nг. Москва, ул. Тверская, д. 7, каб. 314.",
    "Контактное лицо: Петрова А. В., тел. +7 (495) 123-45-67, доб. 412.",
    "Порядок согласования",
    "Цель",
    "Согласование подтверждает, что закупка необходима, а цена обоснована.",
    "Инициатор оформляет заявку по форме приложения 1 (образец см. в Положении о закупках,\nс. 5) и прикладывает к ней:",
    "обоснование выбора поставщика;",
    "не менее двух коммерческих предложений либо письмо об их отсутствии.",
    "Руководитель подразделения проверяет заявку в течение двух рабочих дней и\n"
    "согласует её или возвращает инициатору с комментарием.",
    "Если стоимость закупки превышает лимит, установленный в\n"
    "п. 3 Положения о закупках, заявку дополнительно согласует финансовый директор.",
    "Решение фиксируется в системе электронного документооборота (СЭД),\nт. е. в карточке заявки, и становится доступно инициатору.",
    "Сроки",
    "Общий срок согласования не должен превышать 5 рабочих дней с даты регистрации заявки,\n"
    "т. е. с момента присвоения ей номера в СЭД.",
    "Срок продлевается на время доработки\nзаявки инициатором.",
    "Ответственность",
    "Инициатор отвечает за полноту и достоверность сведений в заявке.",
    "Руководитель подразделения отвечает за соблюдение сроков согласования.",
    "Регламент утверждён приказом генерального директора № 12 от 15.01.2024 г. и вступает\nв силу с 1 февраля 2024 г.",
]
RUSSIAN_REGLAMENT_MARKERS = "1.1.1.1.2.1.3.2.2.1.а)б)в)г)2.2.2.3.3.3.1.3.2.а)б)3.3.3.4.3.5.4.5.——"


def outside_units(doc: Document) -> str:
    """Every non-space character of the text that no unit holds (markers, table rules, fences)."""
    covered = bytearray(len(doc.text))
    for sentence in doc.sentences:
        covered[sentence.start : sentence.end] = b"\x01" * (sentence.end - sentence.start)
    return "".join(char for char, inside in zip(doc.text, covered) if not inside and not char.isspace())


def assert_units_at_their_text(doc: Document, expected: list[str]) -> None:
    """The units are the expected strings, each at the offsets where that text stands in the document."""
    assert [s.text for s in doc.sentences] == expected
    cursor = 0
    for sentence in doc.sentences:
        start = doc.text.index(sentence.text, cursor)
        assert (sentence.start, sentence.end) == (start, start + len(sentence.text)), sentence
        cursor = sentence.end


@pytest.mark.parametrize(
    ("name", "expected", "markers", "legacy"),
    [
        ("ko_work_request_procedure.txt", KOREAN_PROCEDURE_UNITS, KOREAN_PROCEDURE_MARKERS, "cp949"),
        ("ru_procurement_reglament.txt", RUSSIAN_REGLAMENT_UNITS, RUSSIAN_REGLAMENT_MARKERS, "cp1251"),
    ],
)
@pytest.mark.parametrize("variant", ["utf-8", "utf-8 with BOM, CRLF", "legacy code page, CRLF"])
def test_real_layouts_give_the_units_a_person_would_quote(
    tmp_path: Path, name: str, expected: list[str], markers: str, legacy: str, variant: str
) -> None:
    from extractor.ingest import load

    source = (LAYOUTS / name).read_text(encoding="utf-8")
    windows = source.replace("\n", "\r\n")
    raw, encoding = {
        "utf-8": (source.encode("utf-8"), "utf-8"),
        "utf-8 with BOM, CRLF": (b"\xef\xbb\xbf" + windows.encode("utf-8"), "utf-8-sig"),
        "legacy code page, CRLF": (windows.encode(legacy), legacy),
    }[variant]
    path = tmp_path / name
    path.write_bytes(raw)
    doc = segment(load(path))
    assert (doc.encoding, doc.text) == (encoding, source)
    assert_units_at_their_text(doc, expected)
    assert outside_units(doc) == markers
    assert doc.segmenter == SEGMENTER_ID


def _from_text(text: str) -> Document:
    from extractor.ingest import from_text

    return segment(from_text(text))


@pytest.mark.parametrize(
    ("text", "expected", "markers"),
    [
        pytest.param(
            "1.2. Закупка у единственного поставщика допускается,\nт. к. аналогов нет; решение принимает директор.\n"
            "1.3. Срок — два дня.",
            ["Закупка у единственного поставщика допускается,\nт. к. аналогов нет; решение принимает директор.",
             "Срок — два дня."],
            "1.2.1.3.",
            id="т. к. starts a wrapped item line",
        ),
        pytest.param(
            "Договор заключён с ООО «Вектор», зарегистрированным по адресу:\nг. Москва, ул. Лесная, д. 5.",
            ["Договор заключён с ООО «Вектор», зарегистрированным по адресу:\nг. Москва, ул. Лесная, д. 5."],
            "",
            id="г. Москва after a colon",
        ),
        pytest.param(
            "Отпуск переносится в том же порядке,\nт. е. через новое заявление.",
            ["Отпуск переносится в том же порядке,\nт. е. через новое заявление."],
            "",
            id="т. е. starts a wrapped paragraph line",
        ),
        pytest.param(
            "- Перенос отпуска согласуется в том же порядке, т. е.\nчерез новое заявление.\n- Отзыв из отпуска оформляется приказом.",
            ["Перенос отпуска согласуется в том же порядке, т. е.\nчерез новое заявление.",
             "Отзыв из отпуска оформляется приказом."],
            "--",
            id="т. е. ends a wrapped item line",
        ),
        pytest.param(
            "Лимит установлен в\nп. 3 Положения о закупках. Его утверждает директор.",
            ["Лимит установлен в\nп. 3 Положения о закупках.", "Его утверждает директор."],
            "",
            id="п. 3 starts a wrapped line",
        ),
        pytest.param(
            "Форма заявки приведена в Положении (см. приложение 1,\nс. 5) и на портале.",
            ["Форма заявки приведена в Положении (см. приложение 1,\nс. 5) и на портале."],
            "",
            id="с. 5 starts a wrapped line",
        ),
        pytest.param(
            "Вопросы: тел. +7 (495) 123-45-67, доб. 412. Ответ в течение дня.",
            ["Вопросы: тел. +7 (495) 123-45-67, доб. 412.", "Ответ в течение дня."],
            "",
            id="доб. 412.",
        ),
        pytest.param(
            "1. 목적\n이 절차는 업무 요청의 처리 기준을 정한다.\n2. 적용 범위\n이 절차는 모든 부서에 적용한다.",
            ["목적", "이 절차는 업무 요청의 처리 기준을 정한다.", "적용 범위", "이 절차는 모든 부서에 적용한다."],
            "1.2.",
            id="numbered Korean headings directly above their paragraphs",
        ),
        pytest.param(
            "■ 문의처\n경영지원팀 김민수 과장(내선 412)",
            ["문의처", "경영지원팀 김민수 과장(내선 412)"],
            "■",
            id="■ heading above its line",
        ),
        pytest.param(
            "3.1. Цель\nСогласование подтверждает, что закупка необходима.\n3.2. Заявку проверяет руководитель.",
            ["Цель", "Согласование подтверждает, что закупка необходима.", "Заявку проверяет руководитель."],
            "3.1.3.2.",
            id="3.1. heading above its paragraph",
        ),
        pytest.param(
            "제2조(검토) ① 검토자는 2일 이내에 검토 결과를 등록한다.\n② 검토자는 보완을 요청할 수 있다.\n제3조(종결)\n"
            "① 요청자는 결과를 확인한 후\n종결 처리한다.",
            ["제2조(검토)", "검토자는 2일 이내에 검토 결과를 등록한다.", "검토자는 보완을 요청할 수 있다.", "제3조(종결)",
             "요청자는 결과를 확인한 후\n종결 처리한다."],
            "①②①",
            id="제N조 articles and circled clauses",
        ),
        pytest.param(
            "1. 요청자가 요청서를 작성한다\n② 검토자는 요청서를 검토한다.",
            ["요청자가 요청서를 작성한다", "검토자는 요청서를 검토한다."],
            "1.②",
            id="a list item does not swallow the next circled clause",
        ),
        pytest.param(
            "이 규정은\n제2조 제1항에 따른 신청에 적용한다.",
            ["이 규정은\n제2조 제1항에 따른 신청에 적용한다."],
            "",
            id="a wrapped line starting with an article reference",
        ),
        pytest.param(
            "Заявки рассматриваются в порядке, установленном пунктом\n3.2. настоящего регламента, в течение пяти дней.",
            ["Заявки рассматриваются в порядке, установленном пунктом\n3.2. настоящего регламента, в течение пяти дней."],
            "",
            id="a section number starting a wrapped line",
        ),
        pytest.param(
            "Ответственный за процесс\n— руководитель отдела кадров.",
            ["Ответственный за процесс\n— руководитель отдела кадров."],
            "",
            id="a dash starting a wrapped line",
        ),
        pytest.param(
            "Заявление должно содержать\nа) фамилию сотрудника;\nб) даты отпуска.",
            ["Заявление должно содержать", "фамилию сотрудника;", "даты отпуска."],
            "а)б)",
            id="а) б) below an unfinished line are a list",
        ),
        pytest.param(
            "□ 현황\n ○ 요청이 분산 접수되어 이력 확인이 어려움\n   - 평균 처리 기간 5.2일\n ○ 책임 소재가 불분명함",
            ["현황", "요청이 분산 접수되어 이력 확인이 어려움", "평균 처리 기간 5.2일", "책임 소재가 불분명함"],
            "□○-○",
            id="개조식 bullets with ~함 endings and a nested dash",
        ),
    ],
)
def test_issue_16_layouts(text: str, expected: list[str], markers: str) -> None:
    doc = _from_text(text)
    assert_units_at_their_text(doc, expected)
    assert outside_units(doc) == markers


# --- boundaries the splitters get wrong (extractor.segment.boundaries) --------------------------------


@pytest.mark.parametrize(
    "expected",
    [
        ["The inspector approves payment for order 2.", "The clerk inspects delivery 3.",
         "The inspector records order 4 in the ledger."],
        ["Инспектор утверждает оплату заказа 2.", "Кладовщик проверяет поставку 3.", "Инспектор записывает заказ 4 в журнал."],
        ["검사관은 주문 2의 대금을 승인한다.", "담당자는 납품 3을 검수한다.", "검사관은 주문 4를 장부에 기록한다."],
    ],
    ids=["en", "ru", "ko"],
)
def test_a_number_that_ends_a_sentence_stays_with_it(expected: list[str]) -> None:
    """pysbd reads ``order 2. The clerk`` as a list item ``2.`` and cuts after ``order``."""
    assert units(" ".join(expected)) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Steps: 1. Fill in the form. 2. Send it. 3. Wait.", ["Steps:", "1. Fill in the form.", "2. Send it.", "3. Wait."]),
        ("Шаги: 1. Заполнить форму. 2. Отправить её.", ["Шаги:", "1. Заполнить форму.", "2. Отправить её."]),
    ],
)
def test_an_inline_numbered_list_still_splits_before_its_numbers(text: str, expected: list[str]) -> None:
    assert units(text) == expected


@pytest.mark.parametrize(
    "expected",
    [
        ["Write off the pump, inv. No. 10457.", "The foreman signs the act."],
        ["Списать насос, инв. № 10457.", "Акт подписывает мастер.", "Учёт ведёт рег. № 5 журнала."],
        ["자산 번호 No. 10457 펌프를 폐기한다.", "반장이 서명한다."],
    ],
    ids=["en", "ru", "ko"],
)
def test_no_split_between_an_abbreviation_and_its_number(expected: list[str]) -> None:
    assert units(" ".join(expected)) == expected


@pytest.mark.parametrize(
    "expected",
    [
        ["Hang the sign “Do not switch on! Men at work.” on the switch.", "Then check the voltage."],
        ["Hang the sign \"Do not switch on! Men at work.\" on the switch.", "Then check the voltage."],
        ["На рубильник повесить плакат «Не включать! Работают люди».", "Затем проверить отсутствие напряжения."],
        ["Плакат „Не включать! Работают люди“ снимает мастер.", "Затем подать напряжение."],
        ["스위치에 「전원 투입 금지! 작업 중」 표지를 건다.", "그다음 전압을 확인한다."],
        ["스위치에 “전원 투입 금지! 작업 중”이라는 표지를 건다.", "그다음 전압을 확인한다."],
    ],
    ids=["en-curly", "en-straight", "ru-guillemets", "ru-low-high", "ko-corner", "ko-curly"],
)
def test_no_split_inside_a_short_quotation(expected: list[str]) -> None:
    assert units(" ".join(expected)) == expected


def test_a_quotation_that_ends_a_sentence_still_ends_it() -> None:
    assert units('He wrote "stop". Then he left. The sign reads “Do not enter.” Then leave.') == [
        'He wrote "stop".', "Then he left.", "The sign reads “Do not enter.”", "Then leave."]


@pytest.mark.parametrize(
    "lines",
    [
        ["Work order: WO-2026-0042", "Requested by: Dana Kim", "Due date: 2026-03-14", "Priority: high"],
        ["Наряд-допуск: НД-0042", "Выдал: Иванов И. И.", "Срок: 17.04.2026", "Место: цех № 3"],
        ["작업지시서 번호: WO-2026-0042", "요청자: 김다나", "완료 기한: 2026년 3월 14일", "우선순위: 높음"],
    ],
    ids=["en", "ru", "ko"],
)
def test_each_field_line_of_a_form_is_its_own_unit(lines: list[str]) -> None:
    doc = _from_text("\n".join(lines) + "\n")
    assert [s.text for s in doc.sentences] == lines


def test_a_field_value_may_wrap_and_hold_sentences_and_one_label_in_prose_changes_nothing() -> None:
    assert units("Description: Replace the bearing. Check the belt\nand the pulley.\nStatus: open") == [
        "Description: Replace the bearing.", "Check the belt\nand the pulley.", "Status: open"]
    assert units("Note: the clerk files the form\nwithin two days. The manager signs it.") == [
        "Note: the clerk files the form\nwithin two days.", "The manager signs it."]


@pytest.mark.parametrize(
    "rows",
    [
        ["No  Task                 Assignee  Hours", "1   Replace bearing.     Kim       2.5",
         "2   Check alignment!     Lee       1.0"],
        ["№   Операция             Исполнитель  Часы", "1   Замена подшипника.   Петров       2,5",
         "2   Проверка соосности   Сидоров      1,0"],
        ["번호  작업          담당자  시간", "1     베어링 교체.  김민수  2.5", "2     정렬 점검     이영희  1.0"],
    ],
    ids=["en", "ru", "ko"],
)
def test_each_row_of_a_fixed_width_table_is_one_unit(rows: list[str]) -> None:
    doc = _from_text("Tasks\n\n" + "\n".join(rows) + "\n")
    assert [s.text for s in doc.sentences] == ["Tasks", *rows]


@pytest.mark.parametrize(
    "lines",
    [
        ["Due: 04/30/2026", "The approved budget is 950 euros."],
        ["Приоритет: срочный", "Работы завершить до 20 марта 2026 г."],
        ["완료 기한: 2026-04-30", "정수진 기사가 단독으로 작업한다."],
    ],
    ids=["en", "ru", "ko"],
)
def test_one_field_line_ends_before_the_sentence_under_it(lines: list[str]) -> None:
    assert units("\n".join(lines)) == lines


def test_a_korean_ending_before_a_parenthesis_still_ends_the_sentence() -> None:
    """A full stop after the parenthesis that follows the ending (``뺀다(0.5시간).``) ends the sentence."""
    expected = ["박지현 기술자가 펌프 하우징의 물을 뺀다(0.5시간).", "최동욱 전기 기사가 모터 전원을 분리한다(1시간).",
                "박지현 기술자가 실을 교체한다(3시간)."]
    assert units("\n".join(expected)) == expected
    assert units(" ".join(expected)) == expected


def test_typewriter_double_spaces_are_not_a_table() -> None:
    assert units("The clerk checks the form.  Then the manager signs it.\nThe clerk files\nit.  Done.") == [
        "The clerk checks the form.", "Then the manager signs it.", "The clerk files\nit.", "Done."]


# --- generated layouts: a marker guess never eats prose ---------------------------------------------

PROSE = {
    "ru": "заявку согласует руководитель отдела закупок в течение двух рабочих дней после регистрации".split(),
    "ko": "요청자는 업무포털에 요청 내용을 등록하고 검토자는 이를 확인하여 처리 결과를 기록한다".split(),
    "en": "the manager approves every request within two business days after it is filed".split(),
}
# Words that look like list markers when a wrap puts them at the start of a line.
LOOKALIKES = ["т. к.", "т. е.", "г. Москва,", "п. 3", "с. 5)", "доб. 412", "см.", "в т. ч.", "e.g.", "No. 5", "제2조 제1항에"]
TITLES = ["목적", "적용 범위", "문의처", "Цель", "Общие положения", "Purpose"]
TITLE_MARKERS = ["1.", "2.", "3.1.", "■", "□"]
LISTS = [
    ["а)", "б)", "в)"], ["1.", "2.", "3."], ["3.1.", "3.2.", "3.3."], ["①", "②", "③"], ["가.", "나.", "다."],
    ["○", "○", "○"], ["-", "-", "-"], ["(1)", "(2)", "(3)"], ["a)", "b)", "c)"], ["а.", "б."],
]  # fmt: skip
SYMBOLS = set("□○■①②③")

Line = tuple[str, str]  # (indent + marker, text): the first part is what no unit may be blamed for holding


@st.composite
def sentence_lines(draw: st.DrawFn, hanging: str = "") -> list[str]:
    """One or two sentences of one language, with look-alike words, wrapped at random word boundaries."""
    language = draw(st.sampled_from(sorted(PROSE)))
    words: list[str] = []
    for _ in range(draw(st.integers(1, 2))):
        sentence = draw(st.lists(st.sampled_from(PROSE[language] + LOOKALIKES), min_size=3, max_size=12))
        sentence[0] = sentence[0][:1].upper() + sentence[0][1:] if sentence[0] in PROSE[language] else sentence[0]
        ending = draw(st.sampled_from([".", ";", "", ","]))
        words += sentence[:-1] + [sentence[-1] + ending]
    lines, line = [], [words[0]]
    for word in words[1:]:
        if draw(st.booleans()):
            lines.append(" ".join(line))
            line = []
        line.append(word)
    lines.append(" ".join(line))
    return [lines[0]] + [draw(st.sampled_from(["", hanging])) + rest for rest in lines[1:]]


@st.composite
def pieces(draw: st.DrawFn) -> list[Line]:
    """A paragraph, a marked title above a paragraph, a list (maybe after an intro line) or an article."""
    kind = draw(st.sampled_from(["paragraph", "title", "list", "article"]))
    if kind == "paragraph":
        return [("", text) for text in draw(sentence_lines())]
    if kind == "title":
        marker = draw(st.sampled_from(TITLE_MARKERS))
        return [(marker + " ", draw(st.sampled_from(TITLES)))] + [("", text) for text in draw(sentence_lines())]
    if kind == "list":
        markers = draw(st.sampled_from(LISTS))
        lines: list[Line] = [("", "В согласовании участвуют:")] if draw(st.booleans()) else []
        for marker in markers[: draw(st.integers(2, len(markers)))]:
            first, *rest = draw(sentence_lines(hanging=" " * (len(marker) + 1)))
            lines += [(marker + " ", first)] + [("", text) for text in rest]
        return lines
    number = draw(st.integers(1, 30))
    first, *rest = draw(sentence_lines())
    lines = [(f"제{number}조(검토) ① ", first)] + [("", text) for text in rest]
    for marker in "②③"[: draw(st.integers(0, 2))]:
        first, *rest = draw(sentence_lines())
        lines += [(marker + " ", first)] + [("", text) for text in rest]
    return lines


@st.composite
def layouts(draw: st.DrawFn) -> tuple[str, list[tuple[int, int, str]]]:
    """A document and the (start, end, marker) of every marker it was written with."""
    text, markers = "", []
    for number, piece in enumerate(draw(st.lists(pieces(), min_size=1, max_size=6))):
        if number:
            text += draw(st.sampled_from(["\n", "\n\n"]))
        for index, (marker, words) in enumerate(piece):
            if index:
                text += "\n"
            markers.append((len(text), len(text) + len(marker), marker.strip()))
            text += marker + words
    return text, markers


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_generated_layouts_keep_every_word_in_a_unit(layout: tuple[str, list[tuple[int, int, str]]]) -> None:
    """Exact units that hold every non-space character except the markers the document was written with;
    symbols and circled clauses are always recognised as markers; Windows line ends change nothing."""
    text, markers = layout
    doc = _from_text(text)  # segment() checks exact text and full coverage of every block's content
    covered = bytearray(len(text))
    for sentence in doc.sentences:
        covered[sentence.start : sentence.end] = b"\x01" * (sentence.end - sentence.start)
    marker_positions = {position for start, end, _ in markers for position in range(start, end)}
    eaten = [(p, text[max(0, p - 10) : p + 10]) for p, char in enumerate(text)
             if not covered[p] and not char.isspace() and p not in marker_positions]  # fmt: skip
    assert not eaten, f"prose outside every unit: {eaten}"
    symbols = [(start, marker) for start, _, marker in markers if marker in SYMBOLS and covered[start]]
    assert not symbols, f"symbol markers inside a unit: {symbols}"
    windows = _from_text(text.replace("\n", "\r\n"))
    assert [(s.text, s.start, s.end) for s in windows.sentences] == [(s.text, s.start, s.end) for s in doc.sentences]


SIMPLE_ENGLISH = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ÀéßøĀž ,/&%+#@=\n-",
                         min_size=1, max_size=120)


@settings(max_examples=600, deadline=None)
@given(SIMPLE_ENGLISH, st.sampled_from(["", ".", "!", "?"]), st.sampled_from(["", " ", "\n", "  \n"]))
def test_text_pysbd_returns_whole_skips_it_with_the_same_unit(body: str, end: str, pad: str) -> None:
    """The fast path for one-sentence English blocks gives exactly what pysbd gives, on text built to tempt it
    (list-like numbers, lone letters, e-mail-like @, hyphens, wrapped lines)."""
    import extractor.segment as segmenting

    content = pad + body + end + pad
    if not content.strip():
        return
    assert segmenting._ONE_ENGLISH_SENTENCE.fullmatch(content)
    slow = segmenting._join_glued(content, segmenting._split_windowed(segmenting.mask(content),
                                                                        segmenting._split_english))
    assert segmenting._block_units(content, BlockKind.PARAGRAPH) == slow


@pytest.mark.parametrize("text", ["Approve it. Then file it.", "e.g. this one", "1. Submit the form", "a) first b) second",
                                  'He said "stop." Then left', "Wait... what", "Costs: see below", "Done!!"])
def test_text_with_any_other_mark_still_goes_through_pysbd(text: str) -> None:
    import extractor.segment as segmenting

    assert not segmenting._ONE_ENGLISH_SENTENCE.fullmatch(text)


def test_the_fast_path_agrees_with_pysbd_on_every_bundled_english_block() -> None:
    import extractor.segment as segmenting
    from extractor.ingest import load

    checked = 0
    for path in [*sorted((ROOT / "samples").rglob("*.md")), *sorted((ROOT / "samples").rglob("*.txt")),
                 *sorted((ROOT / "tests" / "corpus").rglob("*.md"))]:
        try:
            document = load(path)
        except Exception:  # noqa: BLE001 - a deliberately broken corpus file: nothing to segment
            continue
        for block in document.blocks:
            content = document.text[block.content_start:block.end]
            if not content.strip() or segmenting._splitter_for(content) is not segmenting._split_english:
                continue
            slow = segmenting._join_glued(content, segmenting._split_windowed(segmenting.mask(content),
                                                                                segmenting._split_english))
            assert segmenting._block_units(content, block.kind) == slow or block.kind is BlockKind.CODE, content
            checked += 1
    assert checked > 50
