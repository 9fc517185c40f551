"""Office formats: HWP 5.0 and HWPX written by python-hwpx, .xlsx by openpyxl, .eml by the standard library.

Each file is made by a real writer of the format, read back through ``extractor.ingest.load``, and its blocks
compared with what a reader of the document sees.
"""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest
from hwpx import HwpxDocument
from openpyxl import Workbook

from extractor import offload
from extractor.document import BlockKind, Document
from extractor.engine.discover import discover
from extractor.errors import InputError
from extractor.ingest import load, load_bytes
from extractor.segment import segment
from tests.support.hostile import attachment_header, deep_comment, many_parts

H, L, P, T = BlockKind.HEADING, BlockKind.LIST_ITEM, BlockKind.PARAGRAPH, BlockKind.TABLE_CELL
REAL_FILES = Path(__file__).resolve().parents[1].parent / "shared" / "real-files"
"""Public files from other projects' test suites (their README lists source and licence); CI has the folder
beside the clone."""


def blocks(document: Document) -> list[tuple[BlockKind, str, str]]:
    """``(kind, marker, content)`` per block: the marker is what precedes the content (a generated number)."""
    return [(b.kind, document.text[b.start:b.content_start].strip(), document.text[b.content_start:b.end])
            for b in document.blocks]


def procedure(path: Path) -> Path:
    """A Korean procedure as Hancom users write one: outline headings, numbered steps, a table."""
    document = HwpxDocument.new()
    document.add_paragraph("업무 요청 검토 절차", style="개요 1")
    document.add_paragraph("이 절차는 업무 요청을 검토하는 방법을 정한다.", style="바탕글")
    document.add_paragraph("담당자는 요청서를 접수하고 요청 번호를 부여한다.", style="개요 2")
    document.add_paragraph("팀장은 요청서를 검토한 뒤 승인 여부를 결정한다.", style="개요 2")
    document.add_paragraph("처리 기한", style="개요 1")
    table = document.add_table(2, 2)
    for row, column, text in ((0, 0, "구분"), (0, 1, "기한"), (1, 0, "긴급 요청"), (1, 1, "접수 후 1일 이내")):
        table.set_cell_text(row, column, text)
    document.add_paragraph("문의처", style="개요 1")
    document.save_to_path(str(path))
    return path


PROCEDURE_BLOCKS = [
    (H, "1.", "업무 요청 검토 절차"),
    (P, "", "이 절차는 업무 요청을 검토하는 방법을 정한다."),
    (L, "가.", "담당자는 요청서를 접수하고 요청 번호를 부여한다."),
    (L, "나.", "팀장은 요청서를 검토한 뒤 승인 여부를 결정한다."),
    (H, "2.", "처리 기한"),
    (T, "", "구분"), (T, "", "기한"), (T, "", "긴급 요청"), (T, "", "접수 후 1일 이내"),
    (H, "3.", "문의처"),
]


@pytest.mark.parametrize("suffix", [".hwpx", ".hwp"])
def test_hwp_and_hwpx_paragraphs_numbering_and_table_cells(tmp_path: Path, suffix: str) -> None:
    path = procedure(tmp_path / f"procedure{suffix}")
    assert path.read_bytes()[:4] == (b"PK\x03\x04" if suffix == ".hwpx" else b"\xd0\xcf\x11\xe0")  # the real formats
    document = segment(load(path))
    assert blocks(document) == PROCEDURE_BLOCKS
    assert document.format == "hwp"
    # the generated number is not part of any sentence: evidence quotes the words
    assert [s.text for s in document.sentences][:3] == ["업무 요청 검토 절차", "이 절차는 업무 요청을 검토하는 방법을 정한다.",
                                                         "담당자는 요청서를 접수하고 요청 번호를 부여한다."]


def test_hwpx_merged_cell_is_one_block(tmp_path: Path) -> None:
    document = HwpxDocument.new()
    table = document.add_table(2, 3)
    table.set_cell_text(0, 0, "신청 정보")
    table.merge_cells(0, 0, 0, 2)
    for column, text in enumerate(("성명", "부서", "연락처")):
        table.set_cell_text(1, column, text)
    document.save_to_path(str(tmp_path / "form.hwpx"))
    assert [text for _, _, text in blocks(load(tmp_path / "form.hwpx"))] == ["신청 정보", "성명", "부서", "연락처"]


def test_broken_hwp_files_are_input_errors(tmp_path: Path) -> None:
    (tmp_path / "a.hwp").write_bytes(b"\xd0\xcf\x11\xe0" + b"\x00" * 600)
    (tmp_path / "b.hwpx").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "c.hwp").write_bytes(b"plain text named .hwp")
    for name, problem in (("a.hwp", "cannot read HWP"), ("b.hwpx", "not a valid .hwpx"), ("c.hwp", "not an HWP 5.0 file")):
        with pytest.raises(InputError) as error:
            load(tmp_path / name)
        assert problem in str(error.value) and "\n" not in str(error.value)


def located(document: Document) -> list[tuple[BlockKind, str | None, str]]:
    return [(b.kind, b.location, document.text[b.content_start:b.end]) for b in document.blocks]


@pytest.mark.parametrize("suffix", [".hwpx", ".hwp"])
def test_hwp_text_outside_the_body_flow_is_read_as_blocks_naming_their_place(tmp_path: Path, suffix: str) -> None:
    """Headers, footers, notes, text boxes, captions and a table inside a cell: each where it stands, and every
    block outside the body flow says what it is, so ``show`` and evidence can name it."""
    document = HwpxDocument.new()
    first = document.add_paragraph("본문 첫 문단입니다.")
    box = document.shapes.add_rectangle(paragraph=first)
    box.set_draw_text("글상자 안의 글입니다.")
    box.set_caption("그림 설명입니다.", side="BOTTOM")
    document.notes.add_footnote("각주 내용입니다.", first)
    document.notes.add_endnote("미주 내용입니다.", first)
    document.page.set_header(text="머리말 내용")
    document.page.set_footer(text="꼬리말 내용")
    table = document.add_table(1, 2)
    table.set_caption("표 제목입니다.", side="TOP")
    table.cell(0, 0).set_text("바깥 칸")
    inner = table.cell(0, 1).add_table(1, 2)
    inner.cell(0, 0).set_text("안쪽 칸 1")
    inner.cell(0, 1).set_text("안쪽 칸 2")
    document.add_paragraph("2025년\u3000요약과\u00a0끝 문단입니다.")
    document.save_to_path(str(tmp_path / f"objects{suffix}"))
    read = segment(load(tmp_path / f"objects{suffix}"))
    assert located(read) == [
        (P, "header", "머리말 내용"), (P, "footer", "꼬리말 내용"),
        (P, None, "본문 첫 문단입니다."),
        (P, "text box 1", "글상자 안의 글입니다."), (P, "caption of figure 1", "그림 설명입니다."),
        (P, "footnote 1", "각주 내용입니다."), (P, "endnote 1", "미주 내용입니다."),
        (P, "caption of table 1", "표 제목입니다."),
        (T, None, "바깥 칸"), (T, None, "안쪽 칸 1"), (T, None, "안쪽 칸 2"),  # the inner table follows its cell
        (P, None, "2025년 요약과 끝 문단입니다."),  # full-width and no-break spaces are spaces
    ]
    footnote = next(s for s in read.sentences if s.text == "각주 내용입니다.")
    assert footnote.location == "footnote 1"  # what `extract show` prints before it


@pytest.mark.skipif(not (REAL_FILES / "hwp" / "pyhwp-viewtext.hwp").is_file(), reason=f"no {REAL_FILES} beside the clone")
def test_hwp_distribution_document_is_decrypted(tmp_path: Path) -> None:
    """A distribution (read-only) document, as pyhwp's own test suite has it: its body is in ViewText, AES-encrypted
    with a key masked in its first record; it reads like any document. One whose key record is damaged is refused
    with the reason."""
    from hwpx.hwp5.cfb import CompoundFile, build_compound_file, read_all_streams

    source = REAL_FILES / "hwp" / "pyhwp-viewtext.hwp"
    assert [s.text for s in segment(load(source)).sentences] == ["pyhwp 테스트를 위한 배포 문서 예제입니다."]
    streams = dict(read_all_streams(CompoundFile(source.read_bytes())))
    streams["ViewText/Section0"] = b"\x00" * 4 + streams["ViewText/Section0"][4:]  # not the key record's header
    (tmp_path / "damaged.hwp").write_bytes(build_compound_file(sorted(streams.items())))
    with pytest.raises(InputError) as error:
        load(tmp_path / "damaged.hwp")
    assert "distribution document" in str(error.value) and "key record" in str(error.value)


def test_hwpx_numbering_is_drawn_within_what_hancom_draws(tmp_path: Path) -> None:
    """A numbering that starts at 10^10 in Roman numerals (10 MB of text per paragraph as written) is drawn as
    Hancom can: from its largest start, in digits past the last Roman numeral."""
    import zipfile

    path = procedure(tmp_path / "procedure.hwpx")
    with zipfile.ZipFile(path) as package:
        parts = {name: package.read(name) for name in package.namelist()}
    header = parts["Contents/header.xml"].decode("utf-8")
    first = header.index('<hh:paraHead start="1" level="1"')
    end = header.index(">", first)
    parts["Contents/header.xml"] = (header[:first] + header[first:end].replace('start="1"', 'start="10000000000"')
                                    .replace('numFormat="DIGIT"', 'numFormat="ROMAN_CAPITAL"') + header[end:]).encode()
    with zipfile.ZipFile(tmp_path / "huge.hwpx", "w") as package:
        for name, data in parts.items():
            package.writestr(name, data)
    assert blocks(load(tmp_path / "huge.hwpx"))[0][:2] == (H, "65535.")


def test_xlsx_one_block_per_non_empty_cell_with_its_address(tmp_path: Path) -> None:
    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "주문"
    sheet.append(["품목", "수량", "단가"])
    sheet.append(["A4 용지", 10, 4500.0])
    sheet.append(["토너", None, 89000.5])
    notes = workbook.create_sheet("메모")
    notes["B2"] = "납기: 2025-03-14"
    workbook.save(tmp_path / "order.xlsx")
    document = segment(load(tmp_path / "order.xlsx"))
    cells = [(b.kind, b.location, document.text[b.start:b.end]) for b in document.blocks]
    assert cells == [
        (H, "주문", "주문"),
        (T, "주문!A1", "품목"), (T, "주문!B1", "수량"), (T, "주문!C1", "단가"),
        (T, "주문!A2", "A4 용지"), (T, "주문!B2", "10"), (T, "주문!C2", "4500"),
        (T, "주문!A3", "토너"), (T, "주문!C3", "89000.5"),  # B3 is empty: no block
        (H, "메모", "메모"), (T, "메모!B2", "납기: 2025-03-14"),
    ]


def test_xlsx_declaring_every_cell_of_a_sheet_reads_the_cells_it_has(tmp_path: Path) -> None:
    """Gnumeric declares a sheet's range as the whole sheet (``A1:XFD1048576``, 17 billion cells); the reader
    reads the cells the sheet holds, through the CLI, in seconds (walking the declared range never ends)."""
    import json
    import subprocess
    import zipfile

    from tests.support.batch import extract_command

    workbook = Workbook()
    workbook.active.append(["품목", "수량"])
    workbook.active["C1048576"] = "합계"
    workbook.save(tmp_path / "plain.xlsx")
    with zipfile.ZipFile(tmp_path / "plain.xlsx") as package, \
            zipfile.ZipFile(tmp_path / "gnumeric.xlsx", "w", zipfile.ZIP_DEFLATED) as patched:
        for name in package.namelist():
            data = package.read(name)
            if name == "xl/worksheets/sheet1.xml":
                assert b'<dimension ref="A1:C1048576"/>' in data
                data = data.replace(b'<dimension ref="A1:C1048576"/>', b'<dimension ref="A1:XFD1048576"/>')
            patched.writestr(name, data)
    done = subprocess.run(extract_command("split", str(tmp_path / "gnumeric.xlsx"), "--format", "json"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [(s["text"], s["location"]) for s in json.loads(done.stdout)] == [
        ("품목", "Sheet!A1"), ("수량", "Sheet!B1"), ("합계", "Sheet!C1048576")]


def mail(tmp_path: Path, attachments: list[tuple[str, bytes]], html: bool = False) -> Path:
    message = EmailMessage()
    message["From"] = "김민수 <minsu.kim@example.com>"
    message["To"] = "purchasing@example.com"
    message["Subject"] = "구매 요청: 사무용품"
    message["Date"] = "Mon, 10 Mar 2025 09:00:00 +0900"
    body = "안녕하세요.\n\n첨부한 주문서대로 구매를 요청합니다.\n납기는 3월 14일입니다."
    if html:
        message.set_content("<p>안녕하세요.</p><ul><li>첨부한 주문서대로 구매를 요청합니다.</li></ul>", subtype="html")
    else:
        message.set_content(body)
    for name, data in attachments:
        message.add_attachment(data, maintype="application", subtype="octet-stream", filename=name)
    path = tmp_path / "request.eml"
    path.write_bytes(bytes(message))
    return path


def test_eml_headers_body_and_attachments_as_their_own_documents(tmp_path: Path) -> None:
    workbook = Workbook()
    workbook.active.append(["품목", "수량"])
    workbook.save(tmp_path / "order.xlsx")
    path = mail(tmp_path, [("order.xlsx", (tmp_path / "order.xlsx").read_bytes()), ("../../etc/passwd.zip", b"PK")])
    document = load(path)
    assert [document.text[b.start:b.end] for b in document.blocks] == [
        "From: 김민수 <minsu.kim@example.com>\nTo: purchasing@example.com\nDate: Mon, 10 Mar 2025 09:00:00 +0900\n"
        "Subject: 구매 요청: 사무용품",
        "안녕하세요.",
        "첨부한 주문서대로 구매를 요청합니다.\n납기는 3월 14일입니다.",
        "Attachments: order.xlsx (attachment 1), passwd.zip (attachment 2)",
    ]
    # discovery lists the e-mail alone; a sandboxed reader takes each attachment of a supported type from it,
    # named after the e-mail, with its bytes
    attached = Path(f"{path}#attachment1/order.xlsx")
    assert discover([str(path)]).files == [path]
    found = offload.attachments_now(str(path), path.read_bytes())
    assert found == ((str(attached), (tmp_path / "order.xlsx").read_bytes()),)
    assert load_bytes(str(attached), found[0][1]) == load(attached)
    order = load(attached)
    assert order.path == str(attached) and order.text == "품목\n수량"
    with pytest.raises(InputError, match="unsupported attachment type '.zip'"):
        load(f"{path}#attachment2/passwd.zip")
    with pytest.raises(InputError, match="has no attachment 3"):
        load(f"{path}#attachment3/x.pdf")


def test_eml_attachments_are_bounded(tmp_path: Path) -> None:
    """The first 100 attachments are documents of their own and the e-mail says how many more it has; an e-mail
    of more than 1,000 MIME parts is refused (each attachment read parses its e-mail again), counted before it is
    parsed: the parser builds each part first."""
    path = mail(tmp_path, [(f"note{number}.txt", f"메모 {number}".encode()) for number in range(1, 151)])
    document = load(path)
    assert document.text.endswith("note100.txt (attachment 100), and 50 more not read (limit 100)")
    found = offload.attachments_now(str(path), path.read_bytes())  # what a run reads after the e-mail
    assert len(found) == 100 and found[-1] == (f"{path}#attachment100/note100.txt", "메모 100".encode())
    assert load(f"{path}#attachment100/note100.txt").text == "메모 100"
    with pytest.raises(InputError, match="has no attachment 101"):
        load(f"{path}#attachment101/note101.txt")
    crowded = mail(tmp_path, [(f"n{number}.txt", b"x") for number in range(1_000)])
    with pytest.raises(InputError) as error:
        load(crowded)
    assert str(error.value) == f"{crowded}: e-mail has over 1000 MIME parts (limit 1000); refused"
    path = mail(tmp_path, [(f"n{number}.txt", b"x") for number in range(998)])  # 1,000 with the e-mail and its body
    assert load(path).text.endswith("and 898 more not read (limit 100)")
    dense = many_parts(tmp_path / "dense.eml")  # 860,000 parts: minutes of a reader's time had they been parsed
    with pytest.raises(InputError) as error:
        load(dense)
    assert str(error.value) == f"{dense}: e-mail has over 1000 MIME parts (limit 1000); refused"


def test_eml_headers_the_parser_recurses_on_are_the_files_fault(tmp_path: Path) -> None:
    """The ``email`` package parses a header when it is first asked for, and recurses into nested comments: a header
    of 20,000 ``(`` passed the recursion limit wherever it was read (the e-mail's From, an attachment's type, name or
    transfer encoding), and the RecursionError ended the whole run. Each is one line naming the file now, reading
    the e-mail, taking its attachments from it in a reader, or reading an attachment."""
    says = "not a valid e-mail (RecursionError: maximum recursion depth exceeded"
    top = tmp_path / "from.eml"
    top.write_bytes(deep_comment(b"From", b"buyer@example.com") + b"\r\nSubject: order\r\n\r\nThe order.\r\n")
    for path in [top, attachment_header(tmp_path / "type.eml", deep_comment(b"Content-Type", b"text/plain;")),
                 attachment_header(tmp_path / "name.eml", deep_comment(b"Content-Disposition", b"attachment;"))]:
        with pytest.raises(InputError) as error:
            load(path)
        assert str(error.value).startswith(f"{path}: {says}") and "\n" not in str(error.value)
        assert offload.attachments_now(str(path), path.read_bytes()) == ()  # reading it says why
    encoding = attachment_header(tmp_path / "encoding.eml", deep_comment(b"Content-Transfer-Encoding", b"base64"))
    assert load(encoding).text.endswith("Attachments: order.txt (attachment 1)")  # readable without its attachment
    for taken in (lambda: offload.attachments_now(str(encoding), encoding.read_bytes()),
                  lambda: load(f"{encoding}#attachment1/order.txt")):
        with pytest.raises(InputError) as error:
            taken()
        assert str(error.value).startswith(f"{encoding}: {says}"), error.value


def test_eml_html_body_and_non_mail(tmp_path: Path) -> None:
    document = load(mail(tmp_path, [], html=True))
    assert [document.text[b.content_start:b.end] for b in document.blocks][1:] == [
        "안녕하세요.", "첨부한 주문서대로 구매를 요청합니다."]
    (tmp_path / "notes.eml").write_text("just some words\nwithout headers\n")
    with pytest.raises(InputError, match="not an e-mail"):
        load(tmp_path / "notes.eml")
