"""Ingest: real files in every supported format and encoding -> canonical text + blocks, or a one-line InputError."""

from __future__ import annotations

import hashlib
import io
import os
import re
import unicodedata
import zipfile
from pathlib import Path

import docx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypdf import PdfReader, PdfWriter

from extractor.document import BlockKind, Document
from extractor.errors import InputError
from extractor.ingest import from_text, load
from extractor.segment import segment

H, L, P, T, C = BlockKind.HEADING, BlockKind.LIST_ITEM, BlockKind.PARAGRAPH, BlockKind.TABLE_CELL, BlockKind.CODE

RUSSIAN = (
    "Сотрудник заполняет заявку на отпуск в системе учёта. Руководитель отдела проверяет заявку "
    "в течение двух рабочих дней и принимает решение. Если заявка отклонена, сотрудник получает "
    "уведомление с указанием причины отказа."
)
KOREAN = (
    "요청자는 작업 내용을 작성하고 검토를 요청합니다. 검토자는 요청을 승인하거나 보완을 요청합니다. "
    "검토 결과에는 처리자와 처리 시각이 포함되어야 합니다."
)
# The Korean worked example, as bundled in samples/ (its blank lines hold a single space).
KOREAN_SAMPLE = (Path(__file__).resolve().parents[1] / "samples" / "ko_work_request_review.txt").read_text(encoding="utf-8")


def assert_well_formed(doc: Document) -> None:
    """The block invariants every stage relies on."""
    assert doc.text == unicodedata.normalize("NFC", doc.text)
    assert "\r" not in doc.text and not doc.text.startswith("\ufeff")
    assert doc.blocks, "a loaded document has at least one block"
    previous_end = 0
    for index, block in enumerate(doc.blocks):
        span = doc.text[block.start : block.end]
        assert block.index == index
        assert previous_end <= block.start < block.end <= len(doc.text)
        assert span == span.strip()
        assert block.start <= block.content_start <= block.end
        previous_end = block.end
    assert doc.sentences == []


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def load_ok(path: Path) -> Document:
    doc = load(path)
    assert_well_formed(doc)
    assert doc.path == str(path)
    return doc


def spans(doc: Document) -> list[tuple[BlockKind, str]]:
    return [(b.kind, doc.text[b.start : b.end]) for b in doc.blocks]


def contents(doc: Document) -> list[str]:
    return [doc.text[b.content_start : b.end] for b in doc.blocks]


def input_error(path: Path) -> str:
    """Load must fail with a one-line message that starts with the path."""
    with pytest.raises(InputError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return caught.value.problem


# --- encodings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text", "encoding"),
    [
        (RUSSIAN.encode("utf-8"), RUSSIAN, "utf-8"),
        (b"\xef\xbb\xbf" + KOREAN.encode("utf-8"), KOREAN, "utf-8-sig"),
        (RUSSIAN.encode("utf-16"), RUSSIAN, "utf-16-le"),  # Python writes a little-endian BOM
        (b"\xfe\xff" + KOREAN.encode("utf-16-be"), KOREAN, "utf-16-be"),
        (RUSSIAN.encode("utf-32"), RUSSIAN, "utf-32-le"),
        (("Plan: " + RUSSIAN).encode("utf-16-le"), "Plan: " + RUSSIAN, "utf-16-le"),  # no BOM
        (("Plan: " + KOREAN).encode("utf-16-be"), "Plan: " + KOREAN, "utf-16-be"),  # no BOM
        (RUSSIAN.encode("cp1251"), RUSSIAN, "cp1251"),
        (RUSSIAN.encode("koi8_r"), RUSSIAN, "koi8_r"),
        (KOREAN.encode("euc_kr"), KOREAN, "cp949"),
        (("똠얌꿍 가게의 " + KOREAN).encode("cp949"), "똠얌꿍 가게의 " + KOREAN, "cp949"),  # 똠 is not in EUC-KR
        ("Le délai de réponse est de deux jours. Le chef d'équipe valide.".encode("cp1252"), None, "cp1252"),
    ],
)
def test_encodings_decode_to_the_same_text(tmp_path: Path, raw: bytes, text: str | None, encoding: str) -> None:
    doc = load_ok(write(tmp_path, "doc.txt", raw))
    assert doc.text == (text or raw.decode("cp1252"))
    assert doc.encoding == encoding
    assert doc.format == "txt"


@pytest.mark.parametrize(
    "sentence",
    [
        "Заявку утверждает начальник отдела.",
        "Менеджер проверяет договор. Юрист согласует его до пятницы.",
        "Привет, мир.",
        "Оплата в течение 10 дней с момента подписания акта.",
        "ОТЧЁТ ГОТОВ.",
    ],
)
@pytest.mark.parametrize("encoding", ["cp1251", "koi8_r"])
def test_short_russian_in_legacy_code_pages(tmp_path: Path, sentence: str, encoding: str) -> None:
    doc = load_ok(write(tmp_path, "short.txt", sentence.encode(encoding)))
    assert (doc.text, doc.encoding) == (sentence, encoding)


def test_sha256_is_of_the_raw_bytes(tmp_path: Path) -> None:
    raw = RUSSIAN.encode("cp1251")
    assert load_ok(write(tmp_path, "a.txt", raw)).sha256 == hashlib.sha256(raw).hexdigest()
    assert from_text("abc").sha256 == hashlib.sha256(b"abc").hexdigest()


# --- canonicalisation ------------------------------------------------------------------------------------


def test_bom_and_line_endings_are_canonicalised(tmp_path: Path) -> None:
    raw = "\ufeffFirst line.\r\nSecond line.\rThird line.\nFourth\tline.  \r\n".encode("utf-8")
    doc = load_ok(write(tmp_path, "mixed.txt", raw))
    assert doc.text == "First line.\nSecond line.\nThird line.\nFourth\tline.  \n"
    assert from_text("\ufeffa\r\nb").text == "a\nb"


def test_nfc_composes_hangul_jamo_and_cyrillic_short_i(tmp_path: Path) -> None:
    decomposed = unicodedata.normalize("NFD", "검토자는 요청을 승인합니다. Сотрудник пишет заявку на отпуск.")
    assert "\u1100" <= decomposed[0] <= "\u11ff"  # really conjoining jamo
    doc = load_ok(write(tmp_path, "nfd.txt", decomposed + " Мои\u0306 отдел."))
    assert doc.text == "검토자는 요청을 승인합니다. Сотрудник пишет заявку на отпуск. Мой отдел."
    assert "й" in doc.text


# --- plain text and Markdown blocks ---------------------------------------------------------------------


def test_korean_sample_blocks(tmp_path: Path) -> None:
    doc = load_ok(write(tmp_path, "sample.txt", KOREAN_SAMPLE))
    assert [kind for kind, _ in spans(doc)] == [H, H, P, H, P, H, L, L, H, L, L, L, L, H, L, L]
    assert spans(doc)[:3] == [
        (H, "작업 요청 검토 절차"),
        (H, "배경"),
        (P, "현재 작업 요청을 메일과 메신저로 전달하고 있어 요청 상태와 처리 이력을\n일관되게 확인하기 어렵습니다."),
    ]
    assert contents(doc)[4] == (
        "요청자는 작업 내용을 등록하고 검토 결과를 확인할 수 있어야 합니다.\n"
        "검토자는 검토가 요청된 작업을 승인하거나 보완을 요청할 수 있어야 합니다."
    )
    assert contents(doc)[6] == "요청자는 작업 내용을 작성하고 검토를 요청합니다."
    assert spans(doc)[9] == (L, "1. 요청자가 작업 내용을 작성합니다.")
    assert contents(doc)[9] == "요청자가 작업 내용을 작성합니다."
    assert [text for kind, text in spans(doc) if kind is H] == ["작업 요청 검토 절차", "배경", "목표", "담당자", "처리 절차", "업무 규칙"]


def test_markdown_headings_lists_and_tables(tmp_path: Path) -> None:
    markdown = (
        "# Leave request procedure\n\n"
        "The employee files a request. The manager decides.\n\n"
        "## Steps\n"
        "1. The employee fills in the form.\n"
        "2) The manager approves it\n"
        "   or sends it back with a reason.\n"
        "* Urgent requests go to HR.\n\n"
        "| Role | Responsibility |\n"
        "|:-----|---------------:|\n"
        "|  Manager | Approves requests |\n"
        "| HR |  |\n"
    )
    doc = load_ok(write(tmp_path, "proc.md", markdown))
    assert doc.format == "md"
    assert spans(doc) == [
        (H, "# Leave request procedure"),
        (P, "The employee files a request. The manager decides."),
        (H, "## Steps"),
        (L, "1. The employee fills in the form."),
        (L, "2) The manager approves it\n   or sends it back with a reason."),
        (L, "* Urgent requests go to HR."),
        (T, "Role"),
        (T, "Responsibility"),
        (T, "Manager"),
        (T, "Approves requests"),
        (T, "HR"),
    ]
    assert contents(doc)[:6] == [
        "Leave request procedure",
        "The employee files a request. The manager decides.",
        "Steps",
        "The employee fills in the form.",
        "The manager approves it\n   or sends it back with a reason.",
        "Urgent requests go to HR.",
    ]


def test_plain_text_markers_and_headings() -> None:
    text = (
        "  Участники\n"
        "а) Сотрудник подаёт заявку.\n"
        "б) Руководитель её проверяет.\n"
        "• Бухгалтерия начисляет\n"
        "оплату отпуска.\n"
        "Итог процедуры\n"
        "\n"
        "가. 요청자는 작업을 등록합니다.\n"
        "· 검토자는 결과를 기록합니다.\n"
        "– Срок ответа: два дня.\n"
        "Последняя строка без точки\n"
        "\n"
        "the quick note that\n"
        "wraps here.\n"
    )
    doc = from_text(text)
    assert_well_formed(doc)
    assert spans(doc) == [
        (H, "Участники"),
        (L, "а) Сотрудник подаёт заявку."),
        (L, "б) Руководитель её проверяет."),
        (L, "• Бухгалтерия начисляет\nоплату отпуска."),
        (H, "Итог процедуры"),
        (L, "가. 요청자는 작업을 등록합니다."),
        (L, "· 검토자는 결과를 기록합니다."),
        (L, "– Срок ответа: два дня."),
        (H, "Последняя строка без точки"),
        (P, "the quick note that\nwraps here."),
    ]
    assert contents(doc)[1] == "Сотрудник подаёт заявку."


def test_wrapped_paragraph_tail_is_not_a_heading() -> None:
    doc = from_text("Short opening line\ncontinues in lower case and has no period\nat the end\n")
    assert spans(doc) == [(P, "Short opening line\ncontinues in lower case and has no period\nat the end")]


def test_from_text_markdown_and_bad_format() -> None:
    doc = from_text("# Title\n\nBody text.", path="memo.md", fmt="md")
    assert (doc.path, doc.format, doc.encoding) == ("memo.md", "md", "utf-8")
    assert [b.kind for b in doc.blocks] == [H, P]
    with pytest.raises(ValueError):
        from_text("x", fmt="pdf")


def test_markdown_fenced_code_setext_headings_and_rules() -> None:
    markdown = (
        "Leave policy\n"
        "============\n"
        "\n"
        "The employee files a request.\n"
        "\n"
        "Approval steps\n"
        "--------------\n"
        "1. The manager approves it.\n"
        "\n"
        "```sql\n"
        "-- not a list item\n"
        "# not a heading\n"
        "\n"
        "| not | a table |\n"
        "SELECT * FROM leave;\n"
        "```\n"
        "A paragraph of two lines\n"
        "is not a setext heading.\n"
        "---\n"
        "* * *\n"
        "```\n"
        "```\n"
        "~~~~ text\n"
        "unclosed ``` fence\n"
    )
    doc = from_text(markdown, fmt="md")
    assert_well_formed(doc)
    assert spans(doc) == [
        (H, "Leave policy"),
        (P, "The employee files a request."),
        (H, "Approval steps"),
        (L, "1. The manager approves it."),
        (C, "```sql\n-- not a list item\n# not a heading\n\n| not | a table |\nSELECT * FROM leave;"),
        (P, "A paragraph of two lines\nis not a setext heading."),
        (C, "~~~~ text\nunclosed ``` fence"),
    ]
    assert contents(doc)[4] == "-- not a list item\n# not a heading\n\n| not | a table |\nSELECT * FROM leave;"
    assert contents(doc)[6] == "unclosed ``` fence"


LAYOUTS = Path(__file__).resolve().parent / "corpus" / "layouts"


def test_korean_procedure_blocks() -> None:
    """Numbered titles above their text, 개조식 bullets, 제N조 articles split from their ① clause, 가나다, ■."""
    doc = load_ok(LAYOUTS / "ko_work_request_procedure.txt")
    found = spans(doc)
    for expected in [
        (H, "1. 목적"),
        (P, "이 절차서는 부서 간 업무 요청의 접수, 검토, 처리 및 종결 기준을 정하여 요청 누락과\n처리 지연을 방지하는 것을 목적으로 한다."),
        (H, "2. 적용 범위"),
        (H, "3. 추진 배경"),
        (H, "□ 현황 및 문제점"),
        (L, "○ 요청 누락과 처리 지연에 대한 책임 소재가 불분명함"),
        (L, "- 2023년 요청 처리 평균 소요 기간 5.2일, 기한 초과 비율 18%"),
        (L, "○ 요청별 담당자와 처리 기한을 지정하고, 기한 경과 시 알림을\n   자동으로 발송함"),
        (H, "제1조(요청 등록)"),
        (L, "① 요청자는 업무포털에 요청 내용, 희망 완료일 및 첨부 자료를\n등록하여야 한다."),
        (H, "제3조(처리 및 종결)"),
        (L, "가. 요청자는 자신이 등록한 요청만 수정하거나 취소할 수 있다."),
        (H, "■ 문의처"),
    ]:
        assert expected in found
    assert found[found.index((H, "제1조(요청 등록)")) + 1][0] is L


def test_russian_reglament_blocks() -> None:
    """Wrapped lines starting with т. к., г., п., с., т. е. stay in their item; 3.1. titles its paragraph."""
    doc = load_ok(LAYOUTS / "ru_procurement_reglament.txt")
    found = spans(doc)
    for expected in [
        (H, "1. Общие положения"),
        (L, "1.2. Закупка у единственного поставщика допускается только в исключительных случаях,\n"
            "т. к. она не позволяет сравнить цены нескольких поставщиков."),
        (L, "2.2. Заявки принимает отдел закупок по адресу: 125009,\nг. Москва, ул. Тверская, д. 7, каб. 314."),
        (L, "а) инициатор — сотрудник подразделения, которому нужен товар или услуга;"),
        (H, "3.1. Цель"),
        (P, "Согласование подтверждает, что закупка необходима, а цена обоснована."),
        (L, "3.4. Если стоимость закупки превышает лимит, установленный в\n"
            "п. 3 Положения о закупках, заявку дополнительно согласует финансовый директор."),
        (L, "— Инициатор отвечает за полноту и достоверность сведений в заявке."),
    ]:
        assert expected in found
    assert len(found) == 28  # one block per unit but "4. Сроки", whose paragraph holds two sentences


_RULE_LINE = re.compile(r"\s*([-*_=])(?:[ \t]*\1){2,}\s*")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .:-*|#1)`~\n\r\t\u00a0가й\u0306①□")), max_size=80))
def test_any_text_gives_well_formed_blocks_or_empty_error(text: str) -> None:
    try:
        doc = from_text(text)
    except InputError as error:
        assert str(error) == "<text>: empty document (no text)"
        lines = unicodedata.normalize("NFC", text).replace("\r", "\n").split("\n")
        # nothing but table rules, horizontal rules and fences
        assert all(not line.strip() or line.strip()[0] in "|`~" or _RULE_LINE.fullmatch(line) for line in lines)
    else:
        assert_well_formed(doc)


# --- docx ------------------------------------------------------------------------------------------------


def test_docx_blocks_in_document_order(tmp_path: Path) -> None:
    word = docx.Document()
    word.add_heading("Порядок согласования", level=1)
    word.add_paragraph("Документ описывает   согласование договоров.")
    word.add_paragraph("")
    word.add_paragraph("Юрист проверяет договор.", style="List Bullet")
    word.add_paragraph("Директор подписывает договор.", style="List Number")
    table = word.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Роль"
    table.cell(0, 2).text = "Срок"
    table.cell(1, 0).text = "Юрист"
    table.cell(1, 1).text = "проверка"
    table.cell(1, 2).text = "2 дня"
    word.add_paragraph("После таблицы.\tС табуляцией.")
    buffer = io.BytesIO()
    word.save(buffer)
    doc = load_ok(write(tmp_path, "contract.docx", buffer.getvalue()))
    assert (doc.format, doc.encoding) == ("docx", None)
    assert spans(doc) == [
        (H, "Порядок согласования"),
        (P, "Документ описывает   согласование договоров."),
        (L, "Юрист проверяет договор."),
        (L, "Директор подписывает договор."),
        (T, "Роль"),
        (T, "Срок"),
        (T, "Юрист"),
        (T, "проверка"),
        (T, "2 дня"),
        (P, "После таблицы.\tС табуляцией."),
    ]


W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
TEXT_BOX = (  # as Word writes a text box: DrawingML, and the same text again as a VML fallback for old readers
    '<mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" ' + W_NS + '>'
    '<mc:Choice xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" Requires="wps">'
    '<w:drawing><wps:wsp><wps:txbx><w:txbxContent><w:p><w:r><w:t>Срок подачи: 10 дней.</w:t></w:r></w:p>'
    '</w:txbxContent></wps:txbx></wps:wsp></w:drawing></mc:Choice>'
    '<mc:Fallback><w:pict><v:shape xmlns:v="urn:schemas-microsoft-com:vml"><v:textbox><w:txbxContent><w:p><w:r>'
    '<w:t>Срок подачи: 10 дней.</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback>'
    '</mc:AlternateContent>')


def test_docx_nested_tables_text_boxes_notes_headers_and_footers(tmp_path: Path) -> None:
    """Everything a reader of the page sees: a table inside a cell follows that cell, a text box (once, not its
    VML copy) and a footnote follow the paragraph that anchors them, headers first and footers last; each block
    outside the body flow names its place."""
    from docx.opc.constants import CONTENT_TYPE, RELATIONSHIP_TYPE
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part
    from docx.oxml import parse_xml

    word = docx.Document()
    word.sections[0].header.paragraphs[0].text = "ООО «Ромашка»"
    word.sections[0].footer.paragraphs[0].text = "Страница 1"
    paragraph = word.add_paragraph("Заявка подаётся письменно.")
    paragraph.add_run()._r.append(parse_xml(f'<w:footnoteReference {W_NS} w:id="1"/>'))
    paragraph.add_run()._r.append(parse_xml(TEXT_BOX))
    notes = (f'<w:footnotes {W_NS}><w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
             '</w:footnote><w:footnote w:id="1"><w:p><w:r><w:t>См. приказ № 12 от 01.02.2025.</w:t></w:r></w:p>'
             '</w:footnote></w:footnotes>')
    part = Part(PackURI("/word/footnotes.xml"), CONTENT_TYPE.WML_FOOTNOTES, notes.encode(), word.part.package)
    word.part.relate_to(part, RELATIONSHIP_TYPE.FOOTNOTES)
    table = word.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Согласующие"
    inner = table.cell(0, 1).add_table(rows=2, cols=1)
    inner.cell(0, 0).text = "Юрист"
    inner.cell(1, 0).text = "Бухгалтер"
    word.add_paragraph("Конец.")
    buffer = io.BytesIO()
    word.save(buffer)
    doc = segment(load_ok(write(tmp_path, "nested.docx", buffer.getvalue())))
    assert [(b.kind, b.location, doc.text[b.start:b.end]) for b in doc.blocks] == [
        (P, "header", "ООО «Ромашка»"),
        (P, None, "Заявка подаётся письменно."),
        (P, "text box 1", "Срок подачи: 10 дней."),
        (P, "footnote 1", "См. приказ № 12 от 01.02.2025."),
        (T, None, "Согласующие"), (T, None, "Юрист"), (T, None, "Бухгалтер"),
        (P, None, "Конец."),
        (P, "footer", "Страница 1"),
    ]
    assert next(s for s in doc.sentences if s.text.startswith("См. приказ")).location == "footnote 1"


# --- html ------------------------------------------------------------------------------------------------


def test_html_visible_text_only(tmp_path: Path) -> None:
    page = """<!DOCTYPE html>
<html><head><title>Ignored title</title><style>p { color: red }</style></head>
<body>
  <script>var hidden = "no";</script><noscript>Enable JS</noscript><template><p>tpl</p></template>
  <h1>Процедура   согласования</h1>
  <p>Юрист <b>проверяет</b>
     договор.<br>Директор подписывает его.</p>
  <!-- a comment -->
  <div>Текст прямо в div. <span>И его продолжение.</span><p>Вложенный абзац.</p>Хвост div.</div>
  <ul><li>Первый шаг.</li><li>  Второй   шаг. </li></ul>
  <table><tr><th>Роль</th><th>Срок</th></tr><tr><td>Юрист</td><td></td></tr></table>
  Текст в body.
</body></html>"""
    doc = load_ok(write(tmp_path, "page.html", page))
    assert (doc.format, doc.encoding) == ("html", "utf-8")
    assert spans(doc) == [
        (H, "Процедура согласования"),
        (P, "Юрист проверяет договор.\nДиректор подписывает его."),
        (P, "Текст прямо в div. И его продолжение."),
        (P, "Вложенный абзац."),
        (P, "Хвост div."),
        (L, "Первый шаг."),
        (L, "Второй шаг."),
        (T, "Роль"),
        (T, "Срок"),
        (T, "Юрист"),
        (P, "Текст в body."),
    ]


def test_html_meta_charset_is_honoured(tmp_path: Path) -> None:
    page = '<html><head><meta charset="windows-1251"></head><body><p>Да.</p></body></html>'
    doc = load_ok(write(tmp_path, "short.htm", page.encode("cp1251")))
    assert (doc.text, doc.encoding) == ("Да.", "cp1251")


# --- pdf -------------------------------------------------------------------------------------------------


def make_pdf(lines: list[str]) -> bytes:
    """A one-page PDF with a Helvetica text object, xref offsets computed by hand."""
    stream = "BT /F1 12 Tf 72 720 Td 16 TL " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


PDF_LINES = ["Leave request procedure", "The employee files a request.", "The manager approves it."]


def test_pdf_text_layer(tmp_path: Path) -> None:
    doc = load_ok(write(tmp_path, "proc.pdf", make_pdf(PDF_LINES)))
    assert (doc.format, doc.encoding) == ("pdf", None)
    assert spans(doc) == [
        (H, "Leave request procedure"),
        (P, "The employee files a request.\nThe manager approves it."),
    ]


def encrypted_pdf(user_password: str, owner_password: str | None = None) -> bytes:
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(make_pdf(PDF_LINES))))
    writer.encrypt(user_password, owner_password)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def test_pdf_encrypted_with_empty_user_password_opens(tmp_path: Path) -> None:
    doc = load_ok(write(tmp_path, "owner-only.pdf", encrypted_pdf("", "owner")))
    assert "The manager approves it." in doc.text


def test_pdf_encrypted_is_refused(tmp_path: Path) -> None:
    assert input_error(write(tmp_path, "secret.pdf", encrypted_pdf("pw"))) == "encrypted PDF; decrypt it first"


def test_pdf_blank_page_is_refused_after_ocr(tmp_path: Path) -> None:
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    problem = input_error(write(tmp_path, "scan.pdf", buffer.getvalue()))
    assert problem == "PDF has no text layer, and OCR found no text"


def test_broken_pdf_is_refused(tmp_path: Path) -> None:
    assert input_error(write(tmp_path, "broken.pdf", b"%PDF-1.4\nthis is not a pdf\n")).startswith("cannot read PDF")


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        ("empty.txt", b"", "empty document (no text)"),
        ("blank.md", " \n\t\r\n\u3000\n".encode("utf-8"), "empty document (no text)"),
        ("bom-only.txt", b"\xef\xbb\xbf", "empty document (no text)"),
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", "binary file (NUL byte at offset 8)"),
        ("elf.md", b"\x7fELF\x02\x01\x01" + bytes(9) + bytes(range(256)), "binary file (NUL byte at offset 7)"),
        ("empty.html", b"<html><head><title>t</title></head><body> <p> </p></body></html>", "empty document"),
        ("empty.docx", None, "empty document (no text)"),
        ("junk.docx", b"PK\x03\x04 definitely not a zip", "not a valid .docx"),
        ("zip-of-junk.docx", "zip", "not a valid .docx"),
    ],
)
def test_unusable_content_is_an_input_error(tmp_path: Path, name: str, data: bytes | str | None, problem: str) -> None:
    if data is None:
        buffer = io.BytesIO()
        docx.Document().save(buffer)
        data = buffer.getvalue()
    elif data == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("junk.bin", b"\x00\x01 junk")
        data = buffer.getvalue()
    assert input_error(write(tmp_path, name, data)).startswith(problem)


def test_random_bytes_without_nul_are_refused(tmp_path: Path) -> None:
    junk = bytes((i * 7919 + 13) % 255 + 1 for i in range(4000))
    assert "binary file" in input_error(write(tmp_path, "junk.txt", junk))


def test_missing_directory_and_unknown_suffix(tmp_path: Path) -> None:
    assert input_error(tmp_path / "missing.txt") == "file not found"
    (tmp_path / "folder.txt").mkdir()
    assert input_error(tmp_path / "folder.txt") == "is a directory, not a file"
    problem = input_error(write(tmp_path, "notes.rtf", "text"))
    assert problem.startswith("unsupported file type '.rtf'")
    for suffix in (".txt", ".md", ".markdown", ".text", ".docx", ".html", ".htm", ".pdf"):
        assert suffix in problem


def test_uppercase_suffix_is_accepted(tmp_path: Path) -> None:
    assert load_ok(write(tmp_path, "NOTE.TXT", "Hello.")).format == "txt"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, "locked.txt", "secret")
    path.chmod(0)
    assert input_error(path).startswith("permission denied")


def test_size_limit_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "big.txt", "Строка текста.\n" * 200)  # 5400 bytes
    monkeypatch.setenv("EXTRACT_MAX_DOCUMENT_BYTES", "1000")
    problem = input_error(path)
    assert "MB" in problem and "5400 bytes" in problem and "1000 bytes" in problem
    assert "EXTRACT_MAX_DOCUMENT_BYTES" in problem
    monkeypatch.setenv("EXTRACT_MAX_DOCUMENT_BYTES", "lots")
    assert "EXTRACT_MAX_DOCUMENT_BYTES" in input_error(path)
    monkeypatch.setenv("EXTRACT_MAX_DOCUMENT_BYTES", "6000")
    assert load_ok(path).text.startswith("Строка текста.")


def test_default_limit_refuses_a_50_mb_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXTRACT_MAX_DOCUMENT_BYTES", raising=False)
    path = tmp_path / "huge.txt"
    with path.open("wb") as handle:
        handle.truncate(50_000_000)  # sparse: reading it would take 50 MB of zeros
    assert "50.0 MB" in input_error(path)


def test_invalid_utf16_after_bom_is_refused(tmp_path: Path) -> None:
    problem = input_error(write(tmp_path, "bad.txt", b"\xff\xfe" + "ok".encode("utf-16-le") + b"\x00\xd8"))
    assert problem.startswith("invalid utf-16-le text")
