"""Hancom HWP 5.0 (.hwp) and HWPX (.hwpx): paragraphs, headings, list numbering and tables (docs/formats.md#hwp-and-hwpx).

HWPX is a zip of OWPML XML parts; an HWP 5.0 file (an OLE compound file of binary records) is converted into
the same parts by python-hwpx, so one walk reads both. The walk takes, in reading order: each paragraph with
the number Hancom would draw before it (outline ``1.``/``가.``, numbered and bulleted paragraphs: the number is
not in the text, Hancom generates it from the header's numbering definitions), and one TABLE_CELL block per
table cell, a merged cell once (as for .docx). An outline paragraph that reads as a title is a heading, one
that is a sentence is a list item; title, heading and outline styles are headings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

from extractor.document import Block, BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler
from extractor.ingest.contain import open_zip, read_member, refuse_entities
from extractor.ingest.text import looks_like_title

_HP = "{http://www.hancom.co.kr/hwpml/2011/paragraph}"
_HH = "{http://www.hancom.co.kr/hwpml/2011/head}"
_HEADING_STYLES = ("제목", "title", "heading", "머리글 제목")
_HANGUL = "가나다라마바사아자차카타파하"
_JAMO = "ㄱㄴㄷㄹㅁㅂㅅㅇㅈㅊㅋㅌㅍㅎ"
_CIRCLED_HANGUL = "㉮㉯㉰㉱㉲㉳㉴㉵㉶㉷㉸㉹㉺㉻"
_CIRCLED_JAMO = "㉠㉡㉢㉣㉤㉥㉦㉧㉨㉩㉪㉫㉬㉭"
_ROMAN = ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"), (40, "xl"),
          (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i"))


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Canonical text and blocks of an .hwpx (``data`` starts as a zip) or an HWP 5.0 .hwp file."""
    if data.startswith(b"PK"):
        parts = _hwpx_parts(data, path)
    else:
        parts = _hwp5_parts(data, path)
    header = _Header(_xml(parts, "Contents/header.xml", path))
    assembler = Assembler()
    numbers = _Counters()
    for name in _sections(parts):
        section = _xml(parts, name, path)
        outline = section.find(f".//{_HP}secPr")
        outline_id = outline.get("outlineShapeIDRef", "1") if outline is not None else "1"
        for paragraph in section.iterchildren(f"{_HP}p"):
            _paragraph(paragraph, header, numbers, outline_id, assembler)
    text, blocks, _ = assembler.result()
    return text, blocks, None


def _hwpx_parts(data: bytes, path: str) -> dict[str, bytes]:
    package = open_zip(data, path, ".hwpx")  # sizes and DTDs checked before a part is inflated
    names = set(package.namelist())
    if "Contents/header.xml" not in names:
        raise InputError(path, "not a valid .hwpx (no Contents/header.xml in the package)")
    return {name: read_member(package, name, path, ".hwpx") for name in names
            if name.startswith("Contents/") and name.endswith(".xml")}


def _hwp5_parts(data: bytes, path: str) -> dict[str, bytes]:
    """The OWPML parts python-hwpx converts an HWP 5.0 file into (it bounds every stream it inflates)."""
    from hwpx.hwp5.errors import Hwp5Error
    from hwpx.hwp5.package import convert

    if not data.startswith(b"\xd0\xcf\x11\xe0"):
        raise InputError(path, "not an HWP 5.0 file (no OLE compound file signature) nor an HWPX package")
    try:
        converted = convert(data)
    except Hwp5Error as error:
        raise InputError(path, " ".join(f"cannot read HWP ({error})".split())) from None
    except Exception as error:  # a damaged file fails deep in the record decoder with many exception types
        raise InputError(path, " ".join(f"cannot read HWP ({type(error).__name__}: {error})".split())) from None
    for name, part in converted.files.items():
        if name.endswith(".xml"):
            refuse_entities(part, path, f"HWP part {name}")
    return dict(converted.files)


def _sections(parts: dict[str, bytes]) -> list[str]:
    """``Contents/section0.xml``, ``section1.xml``, ... in number order."""
    found = [name for name in parts if name.startswith("Contents/section") and name.endswith(".xml")]
    return sorted(found, key=lambda name: int("".join(filter(str.isdigit, name)) or 0))


def _xml(parts: dict[str, bytes], name: str, path: str) -> etree._Element:
    """One part parsed without DTDs, entities or network (``open_zip`` refused any that declares them)."""
    if name not in parts:
        raise InputError(path, f"not a valid HWP/HWPX document (no {name})")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False)
    try:
        return etree.fromstring(parts[name], parser)
    except etree.XMLSyntaxError as error:
        raise InputError(path, f"not a valid HWP/HWPX document ({name}: {error})") from None


@dataclass(frozen=True)
class _Style:
    name: str
    english: str


@dataclass(frozen=True)
class _Head:
    """How one paragraph shape numbers its paragraphs: ``OUTLINE``, ``NUMBER`` or ``BULLET``, which definition,
    and the level (0-based)."""

    kind: str
    ref: str
    level: int


@dataclass(frozen=True)
class _Level:
    start: int
    template: str  # "^1." draws this level's number followed by a dot; "^1.^2." both levels
    format: str


@dataclass
class _Header:
    """What Contents/header.xml defines that the walk needs: styles, paragraph shapes, numberings, bullets."""

    root: etree._Element
    styles: dict[str, _Style] = field(default_factory=dict)
    heads: dict[str, _Head] = field(default_factory=dict)
    numberings: dict[str, dict[int, _Level]] = field(default_factory=dict)
    bullets: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for style in self.root.iter(f"{_HH}style"):
            self.styles[style.get("id", "")] = _Style(style.get("name", ""), style.get("engName", ""))
        for shape in self.root.iter(f"{_HH}paraPr"):
            heading = shape.find(f".//{_HH}heading")
            if heading is not None and heading.get("type", "NONE") != "NONE":
                self.heads[shape.get("id", "")] = _Head(heading.get("type", ""), heading.get("idRef", "0"),
                                                         _int(heading.get("level")))
        for numbering in self.root.iter(f"{_HH}numbering"):
            levels = {}
            for head in numbering.iter(f"{_HH}paraHead"):
                levels[_int(head.get("level"))] = _Level(_int(head.get("start"), 1), head.text or "",
                                                         head.get("numFormat", "DIGIT"))
            self.numberings[numbering.get("id", "")] = levels
        for bullet in self.root.iter(f"{_HH}bullet"):
            self.bullets[bullet.get("id", "")] = bullet.get("char", "")


class _Counters:
    """The running numbers of each numbering definition: a level counts on, deeper levels start again."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}

    def next(self, ref: str, level: int, levels: dict[int, _Level]) -> dict[int, int]:
        counts = self._counts.setdefault(ref, {})
        start = levels[level].start if level in levels else 1
        counts[level] = counts[level] + 1 if level in counts else start
        for deeper in [number for number in counts if number > level]:
            del counts[deeper]
        return counts


def _paragraph(paragraph: etree._Element, header: _Header, numbers: _Counters, outline: str,
               assembler: Assembler) -> None:
    """One paragraph as a block (with the number Hancom draws before it), then the cells of its tables."""
    text = "".join(_texts(paragraph))
    style = header.styles.get(paragraph.get("styleIDRef", ""), _Style("", ""))
    head = header.heads.get(paragraph.get("paraPrIDRef", ""))
    kind, marker = BlockKind.PARAGRAPH, ""
    if head is not None and text.strip():
        ref = outline if head.kind == "OUTLINE" else head.ref
        if head.kind == "BULLET":
            marker = header.bullets.get(head.ref, "•")
        else:
            levels = header.numberings.get(ref, {})
            marker = _marker(levels, numbers.next(ref, head.level + 1, levels), head.level + 1)
        kind = BlockKind.HEADING if head.kind == "OUTLINE" and looks_like_title(text.strip()) else BlockKind.LIST_ITEM
    if style.name.lower().startswith(_HEADING_STYLES) or style.english.lower().startswith(_HEADING_STYLES):
        kind = BlockKind.HEADING
    assembler.block(kind, text, marker=marker)
    for table in paragraph.iter(f"{_HP}tbl"):
        if _owner(table) is paragraph:
            _table(table, header, numbers, outline, assembler)


def _owner(element: etree._Element) -> etree._Element | None:
    """The paragraph an element belongs to (the nearest ``hp:p`` above it)."""
    parent = element.getparent()
    while parent is not None and parent.tag != f"{_HP}p":
        parent = parent.getparent()
    return parent


def _table(table: etree._Element, header: _Header, numbers: _Counters, outline: str, assembler: Assembler) -> None:
    """Each cell once (OWPML writes a merged cell once, with its span), its paragraphs as one block; a table
    inside a cell follows that cell."""
    for row in table.iterchildren(f"{_HP}tr"):
        for cell in row.iterchildren(f"{_HP}tc"):
            paragraphs = [p for p in cell.iter(f"{_HP}p") if _owner_cell(p) is cell]
            assembler.block(BlockKind.TABLE_CELL, "\n".join("".join(_texts(p)).strip() for p in paragraphs))
            for paragraph in paragraphs:
                for inner in paragraph.iter(f"{_HP}tbl"):
                    if _owner(inner) is paragraph:
                        _table(inner, header, numbers, outline, assembler)


def _owner_cell(paragraph: etree._Element) -> etree._Element | None:
    parent = paragraph.getparent()
    while parent is not None and parent.tag != f"{_HP}tc":
        parent = parent.getparent()
    return parent


def _texts(paragraph: etree._Element) -> Iterator[str]:
    """The paragraph's own text: ``hp:t`` of its runs (tabs and line breaks as characters), not the text of
    tables, footnotes or other objects anchored in it."""
    for run in paragraph.iterchildren(f"{_HP}run"):
        for item in run.iterchildren(f"{_HP}t"):
            if item.text:
                yield item.text
            for child in item:
                if child.tag == f"{_HP}tab":
                    yield "\t"
                elif child.tag == f"{_HP}lineBreak":
                    yield "\n"
                if child.tail:
                    yield child.tail


def _marker(levels: dict[int, _Level], counts: dict[int, int], level: int) -> str:
    """The number drawn before a paragraph: the level's template with each ``^N`` replaced by level N's count."""
    definition = levels.get(level)
    if definition is None:
        return f"{counts.get(level, 1)}."
    marker = definition.template
    for number in sorted(counts, reverse=True):  # ^10 before ^1
        shown = levels[number].format if number in levels else "DIGIT"
        marker = marker.replace(f"^{number}", _format(counts[number], shown))
    return marker.strip()


def _format(value: int, kind: str) -> str:
    """A count as Hancom draws it in ``kind`` (OWPML numFormat); an unknown kind as digits."""
    if kind == "HANGUL_SYLLABLE":
        return _cycle(_HANGUL, value)
    if kind == "HANGUL_JAMO":
        return _cycle(_JAMO, value)
    if kind == "CIRCLED_DIGIT":
        return chr(0x2460 + value - 1) if 1 <= value <= 20 else str(value)
    if kind == "CIRCLED_HANGUL_SYLLABLE":
        return _cycle(_CIRCLED_HANGUL, value)
    if kind == "CIRCLED_HANGUL_JAMO":
        return _cycle(_CIRCLED_JAMO, value)
    if kind in ("LATIN_SMALL", "LATIN_CAPITAL"):
        letter = chr(ord("a") + (value - 1) % 26)
        return letter.upper() if kind == "LATIN_CAPITAL" else letter
    if kind in ("ROMAN_SMALL", "ROMAN_CAPITAL"):
        roman = _roman(value)
        return roman.upper() if kind == "ROMAN_CAPITAL" else roman
    return str(value)


def _cycle(series: str, value: int) -> str:
    return series[(value - 1) % len(series)]


def _roman(value: int) -> str:
    found = []
    for amount, letters in _ROMAN:
        while value >= amount:
            found.append(letters)
            value -= amount
    return "".join(found)


def _int(raw: str | None, default: int = 0) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default
