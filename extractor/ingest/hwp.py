"""Hancom HWP 5.0 (.hwp) and HWPX (.hwpx): paragraphs, headings, list numbering and tables (docs/formats.md#hwp-and-hwpx).

HWPX is a zip of OWPML XML parts; an HWP 5.0 file (an OLE compound file of binary records) is converted into
the same parts by python-hwpx, so one walk reads both. The walk takes, in reading order: each paragraph with
the number Hancom would draw before it (outline ``1.``/``가.``, numbered and bulleted paragraphs: the number is
not in the text, Hancom generates it from the header's numbering definitions), and one TABLE_CELL block per
table cell, a merged cell once (as for .docx). An outline paragraph that reads as a title is a heading, one
that is a sentence is a list item; title, heading and outline styles are headings.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

from extractor.document import Block, BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler
from extractor.ingest.contain import open_zip
from extractor.ingest.text import looks_like_title

_HP = "{http://www.hancom.co.kr/hwpml/2011/paragraph}"
_HH = "{http://www.hancom.co.kr/hwpml/2011/head}"
_HEADING_STYLES = ("제목", "title", "heading", "머리글 제목")
_HANGUL = "가나다라마바사아자차카타파하"
_JAMO = "ㄱㄴㄷㄹㅁㅂㅅㅇㅈㅊㅋㅌㅍㅎ"
_CIRCLED_HANGUL = "㉮㉯㉰㉱㉲㉳㉴㉵㉶㉷㉸㉹㉺㉻"
_CIRCLED_JAMO = "㉠㉡㉢㉣㉤㉥㉦㉧㉨㉩㉪㉫㉬㉭"
MAX_NUMBER = 65_535
"""The largest number a numbering starts at: HWP 5.0 stores a level's start in 16 bits, so Hancom draws no
larger one; an OWPML ``start`` of 10^10 would otherwise be drawn (10 MB of Roman numerals per paragraph)."""
_ROMAN_LIMIT = 3_999
"""Roman numerals have no letter past M: a count above this is drawn in digits."""
_ROMAN = ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"), (40, "xl"),
          (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i"))


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Canonical text and blocks of an .hwpx (``data`` starts as a zip) or an HWP 5.0 .hwp file."""
    if data.startswith(b"PK"):
        parts = _hwpx_parts(data, path)
    else:
        parts = _hwp5_parts(data, path)
    walk = _Walk(_Header(_xml(parts, "Contents/header.xml", path)))
    for name in _sections(parts):
        section = _xml(parts, name, path)
        outline = section.find(f".//{_HP}secPr")
        walk.outline = outline.get("outlineShapeIDRef", "1") if outline is not None else "1"
        for paragraph in section.iterchildren(f"{_HP}p"):
            walk.paragraph(paragraph)
    text, blocks, _ = walk.assembler.result()
    return text, blocks, None


def _hwpx_parts(data: bytes, path: str) -> dict[str, bytes]:
    """The package's XML under ``Contents/``, each part inflated by streaming within its declared size."""
    _, parts = open_zip(data, path, ".hwpx", keep=lambda name: name.startswith("Contents/") and name.endswith(".xml"))
    if "Contents/header.xml" not in parts:
        raise InputError(path, "not a valid .hwpx (no Contents/header.xml in the package)")
    return parts


def _hwp5_parts(data: bytes, path: str) -> dict[str, bytes]:
    """The OWPML parts python-hwpx converts an HWP 5.0 file into (it bounds every stream it inflates); a
    distribution document's body is decrypted first (``_distributed``)."""
    from hwpx.hwp5.errors import Hwp5Error
    from hwpx.hwp5.package import convert

    if not data.startswith(b"\xd0\xcf\x11\xe0"):
        raise InputError(path, "not an HWP 5.0 file (no OLE compound file signature) nor an HWPX package")
    try:
        converted = convert(_distributed(data))
    except Hwp5Error as error:
        raise InputError(path, " ".join(f"cannot read HWP ({error})".split())) from None
    except Exception as error:  # a damaged file fails deep in the record decoder with many exception types
        raise InputError(path, " ".join(f"cannot read HWP ({type(error).__name__}: {error})".split())) from None
    return dict(converted.files)


_DISTRIBUTION_FLAG = 1 << 2
"""Bit 2 of the FileHeader's properties: a distribution (read-only) document."""
_DISTRIBUTE_DOC_DATA = 0x10 + 12
"""HWPTAG_DISTRIBUTE_DOC_DATA: the 256-byte record that opens each ViewText section of such a document."""


def _distributed(data: bytes) -> bytes:
    """An HWP 5.0 file with a distribution document's body readable, else ``data`` as it is.

    Hancom publishes the scheme (HWP 5.0 format, "distribution documents"): the body is in ``ViewText/SectionN``
    instead of ``BodyText``, each stream a DISTRIBUTE_DOC_DATA record and then the section's (compressed)
    records in AES-128 ECB. The record's 256 bytes are masked by Microsoft C's ``rand()`` seeded with their first
    four; unmasked, the key is the 16 bytes at offset 4 + (seed mod 16). pyhwp and hwplib read them the same
    way. The decrypted sections replace the ``BodyText`` stand-ins and the flag is cleared, so python-hwpx reads
    the file as any other; a stream that does not decrypt to records is the file's fault (``Hwp5Error``).
    """
    from hwpx.hwp5.cfb import CompoundFile, build_compound_file, read_all_streams
    from hwpx.hwp5.errors import Hwp5Error

    compound = CompoundFile(data)
    if not compound.has_stream("FileHeader"):
        return data
    header = bytearray(compound.read("FileHeader"))
    if len(header) < 40 or not struct.unpack_from("<I", header, 36)[0] & _DISTRIBUTION_FLAG:
        return data
    struct.pack_into("<I", header, 36, struct.unpack_from("<I", header, 36)[0] & ~_DISTRIBUTION_FLAG)
    streams = {name: stream for name, stream in read_all_streams(compound)}
    views = [name for name in streams if name.startswith("ViewText/Section")]
    if not views:
        raise Hwp5Error("The HWP distribution document has no ViewText section to decrypt.")
    for name in views:
        streams[name.replace("ViewText/", "BodyText/")] = _decrypt_section(streams.pop(name), name)
    streams["FileHeader"] = bytes(header)
    return build_compound_file(sorted(streams.items()))


def _decrypt_section(stream: bytes, name: str) -> bytes:
    """One ViewText section: its DISTRIBUTE_DOC_DATA record unmasked into the AES key, the rest decrypted."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from hwpx.hwp5.errors import Hwp5Error

    if len(stream) < 260:
        raise Hwp5Error(f"The distribution document's {name} is too short to hold its key.")
    record = struct.unpack_from("<I", stream)[0]
    body = stream[260:]
    if record & 0x3FF != _DISTRIBUTE_DOC_DATA or record >> 20 != 256 or len(body) % 16:
        raise Hwp5Error(f"The distribution document's {name} does not start with its key record.")
    masked = bytearray(stream[4:260])
    seed = state = struct.unpack_from("<I", masked)[0]
    mask, left = 0, 0
    for index in range(256):
        if not left:  # each rand() pair gives a mask byte and how many bytes it covers (1-16)
            state = (state * 214013 + 2531011) & 0xFFFFFFFF
            mask = (state >> 16) & 0xFF
            state = (state * 214013 + 2531011) & 0xFFFFFFFF
            left = ((state >> 16) & 0xF) + 1
        if index >= 4:
            masked[index] ^= mask
        left -= 1
    offset = 4 + (seed & 0xF)
    decryptor = Cipher(algorithms.AES(bytes(masked[offset:offset + 16])), modes.ECB()).decryptor()
    return decryptor.update(body) + decryptor.finalize()


def _sections(parts: dict[str, bytes]) -> list[str]:
    """``Contents/section0.xml``, ``section1.xml``, ... in number order."""
    found = [name for name in parts if name.startswith("Contents/section") and name.endswith(".xml")]
    return sorted(found, key=lambda name: int("".join(filter(str.isdigit, name)) or 0))


def _xml(parts: dict[str, bytes], name: str, path: str) -> etree._Element:
    """One part parsed by lxml with entities, DTDs and network off (``open_zip`` refused a part declaring any)."""
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
                start = min(max(_int(head.get("start"), 1), 0), MAX_NUMBER)
                levels[_int(head.get("level"))] = _Level(start, head.text or "", head.get("numFormat", "DIGIT"))
            self.numberings[numbering.get("id", "")] = levels
        for bullet in self.root.iter(f"{_HH}bullet"):
            self.bullets[bullet.get("id", "")] = bullet.get("char", "")


_NOTES = {f"{_HP}footNote": "footnote", f"{_HP}endNote": "endnote"}
_MARGINS = {f"{_HP}header": "header", f"{_HP}footer": "footer"}
_SHAPES = frozenset(f"{_HP}{name}" for name in ("rect", "ellipse", "arc", "polygon", "curve", "connectLine", "line",
                                                  "textart", "container", "pic", "ole", "equation", "chart", "video"))
"""Drawing objects: a shape may hold a text box (``hp:drawText``), any of them a caption; a container holds shapes."""
_FIGURES = {"TABLE": "table", "PICTURE": "figure", "EQUATION": "equation"}
"""What a caption's ``numberingType`` counts, as its location names it."""
_INLINE = {f"{_HP}tab": "\t", f"{_HP}lineBreak": "\n", f"{_HP}nbSpace": " ", f"{_HP}fwSpace": " ", f"{_HP}hyphen": "-"}
"""Characters OWPML writes as elements inside ``hp:t``: a no-break or full-width space is a space between words."""


class _Walk:
    """Reads the paragraphs of a section in reading order into one ``Assembler``.

    Body paragraphs get the numbers Hancom draws before them; the objects anchored in a paragraph follow it, in
    the order they stand: a table's cells (one block each, a table inside a cell after that cell), a caption
    (above or below its object, as Hancom places it), a text box's paragraphs, a footnote's or an endnote's,
    a header's or a footer's. Each block outside the body flow names what it is in ``Block.location``
    (``footnote 1``, ``text box 2``, ``caption of table 3``, ``header``), so ``extract show`` marks it and
    evidence quoting it says where it came from (docs/formats.md#hwp-and-hwpx).
    """

    def __init__(self, header: _Header) -> None:
        self.header = header
        self.assembler = Assembler()
        self.outline = "1"
        self._numbers = _Counters()
        self._counts: dict[str, int] = {}

    def paragraph(self, paragraph: etree._Element, location: str | None = None) -> None:
        """One paragraph as a block, then the objects anchored in it. Body paragraphs (no ``location``) are
        numbered and styled; those of a text box, a note or a header are paragraphs of their place."""
        text = "".join(_texts(paragraph))
        kind, marker = BlockKind.PARAGRAPH, ""
        if location is None:
            kind, marker = self._shape(paragraph, text)
        self.assembler.block(kind, text, marker=marker, location=location)
        self.objects(paragraph)

    def _shape(self, paragraph: etree._Element, text: str) -> tuple[BlockKind, str]:
        """The kind of a body paragraph and the number drawn before it."""
        header = self.header
        style = header.styles.get(paragraph.get("styleIDRef", ""), _Style("", ""))
        head = header.heads.get(paragraph.get("paraPrIDRef", ""))
        kind, marker = BlockKind.PARAGRAPH, ""
        if head is not None and text.strip():
            ref = self.outline if head.kind == "OUTLINE" else head.ref
            if head.kind == "BULLET":
                marker = header.bullets.get(head.ref, "•")
            else:
                levels = header.numberings.get(ref, {})
                marker = _marker(levels, self._numbers.next(ref, head.level + 1, levels), head.level + 1)
            kind = BlockKind.HEADING if head.kind == "OUTLINE" and looks_like_title(text.strip()) else BlockKind.LIST_ITEM
        if style.name.lower().startswith(_HEADING_STYLES) or style.english.lower().startswith(_HEADING_STYLES):
            kind = BlockKind.HEADING
        return kind, marker

    def objects(self, element: etree._Element) -> None:
        """The objects anchored in ``element`` (a paragraph, or a container of shapes), in document order."""
        for child in element.iterchildren():
            tag = child.tag
            if tag == f"{_HP}tbl":
                self.table(child)
            elif tag in _SHAPES:
                self.shape(child)
            elif tag in _NOTES:
                self.sublist(child, f"{_NOTES[tag]} {_int(child.get('number'), 1)}")
            elif tag in _MARGINS:
                self.sublist(child, _MARGINS[tag])
            elif tag in (f"{_HP}run", f"{_HP}ctrl", f"{_HP}switch", f"{_HP}case", f"{_HP}default"):
                self.objects(child)  # objects stand in runs and controls (and a compatibility switch's cases)

    def sublist(self, owner: etree._Element, location: str) -> None:
        """The paragraphs of an object's ``hp:subList`` (a note, a header, a text box, a caption)."""
        for sub in owner.iterchildren(f"{_HP}subList"):
            for paragraph in sub.iterchildren(f"{_HP}p"):
                self.paragraph(paragraph, location)

    def shape(self, shape: etree._Element) -> None:
        """A drawing object: its text box, its caption, and the shapes it groups."""
        caption = shape.find(f"{_HP}caption")
        above = caption is not None and caption.get("side", "BOTTOM") in ("TOP", "LEFT")
        what = self._figure(shape)
        if above and caption is not None:
            self.sublist(caption, f"caption of {what}")
        for text in shape.iterchildren(f"{_HP}drawText"):
            self.sublist(text, f"text box {self._next('text box')}")
        if caption is not None and not above:
            self.sublist(caption, f"caption of {what}")
        self.objects(shape)  # a container's shapes

    def table(self, table: etree._Element) -> None:
        """Each cell once (OWPML writes a merged cell once, with its span), its paragraphs as one block; what a
        cell anchors (a table inside it, a text box) follows that cell; the caption above or below."""
        caption = table.find(f"{_HP}caption")
        above = caption is not None and caption.get("side", "BOTTOM") in ("TOP", "LEFT")
        what = self._figure(table)
        if above and caption is not None:
            self.sublist(caption, f"caption of {what}")
        for row in table.iterchildren(f"{_HP}tr"):
            for cell in row.iterchildren(f"{_HP}tc"):
                paragraphs = [p for sub in cell.iterchildren(f"{_HP}subList") for p in sub.iterchildren(f"{_HP}p")]
                self.assembler.block(BlockKind.TABLE_CELL, "\n".join("".join(_texts(p)).strip() for p in paragraphs))
                for paragraph in paragraphs:
                    self.objects(paragraph)
        if caption is not None and not above:
            self.sublist(caption, f"caption of {what}")

    def _figure(self, element: etree._Element) -> str:
        """``table 3``, ``figure 1``: what an object with a caption is, numbered in document order."""
        kind = _FIGURES.get(element.get("numberingType", ""), "figure" if element.tag != f"{_HP}tbl" else "table")
        return f"{kind} {self._next(kind)}"

    def _next(self, kind: str) -> int:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return self._counts[kind]


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


def _texts(paragraph: etree._Element) -> Iterator[str]:
    """The paragraph's own text: ``hp:t`` of its runs (tabs, line breaks and spaces written as elements as
    characters) and the numbers of its captions (``표 3``), not the text of tables, notes or other objects
    anchored in it: each of those is a space where it stands."""
    for run in paragraph.iterchildren(f"{_HP}run"):
        for item in run.iterchildren():
            if item.tag == f"{_HP}ctrl":
                yield from _caption_numbers(item)
                if any(child.tag in _NOTES or child.tag in _MARGINS for child in item):
                    yield " "  # a note's mark: its text is a block of its own
                continue
            if item.tag == f"{_HP}tbl" or item.tag in _SHAPES:
                yield " "  # an object standing in the line parts the words on either side of it
                continue
            if item.tag != f"{_HP}t":
                continue
            if item.text:
                yield item.text
            for child in item:
                yield _INLINE.get(child.tag, "")
                if child.tail:
                    yield child.tail


def _caption_numbers(control: etree._Element) -> Iterator[str]:
    """The number a caption's automatic numbering draws (``그림 1``); page and note numbers are not text."""
    for number in control.iterchildren(f"{_HP}autoNum"):
        if number.get("numType") in _FIGURES:
            shape = number.find(f"{_HP}autoNumFormat")
            yield _format(_int(number.get("num"), 1), shape.get("type", "DIGIT") if shape is not None else "DIGIT")


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
    if kind in ("ROMAN_SMALL", "ROMAN_CAPITAL") and value <= _ROMAN_LIMIT:
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
