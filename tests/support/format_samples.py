"""Writes ``samples/formats/``: one file per office format, each made by a real writer of the format.

``python -m tests.support.format_samples samples/formats`` writes them again (the committed files came from
this). The scan is a Korean procedure page drawn at 300 dpi and saved as a black-and-white image-only PDF,
as an office scanner's "document" mode does; the PDF with a table is printed by Chromium; the HWPX file by
python-hwpx; the workbook by openpyxl; the e-mail by the standard library, with the workbook attached.
"""

from __future__ import annotations

import sys
from email.message import EmailMessage
from pathlib import Path

from hwpx import HwpxDocument
from openpyxl import Workbook

from tests.support.pdfs import ORDER_TABLE, print_pdf
from tests.support.scans import KOREAN_PROCEDURE, render

SCAN = "ko_scanned_procedure.pdf"
HWPX = "ko_work_request_review.hwpx"
TABLE_PDF = "ko_purchase_order.pdf"
XLSX = "ko_purchase_order.xlsx"
EML = "ko_purchase_request.eml"


def write_scan(folder: Path) -> Path:
    path = folder / SCAN
    render(KOREAN_PROCEDURE).image.convert("1").save(path, resolution=300)
    return path


def write_hwpx(folder: Path) -> Path:
    document = HwpxDocument.new()
    document.add_paragraph("작업 요청 검토 절차", style="개요 1")
    document.add_paragraph("이 절차는 작업 요청을 등록하고 검토하는 방법을 정한다.", style="바탕글")
    document.add_paragraph("담당자", style="개요 1")
    document.add_paragraph("요청자는 작업 내용을 작성하고 검토를 요청한다.", style="개요 2")
    document.add_paragraph("검토자는 검토가 요청된 작업 내용을 확인한다.", style="개요 2")
    document.add_paragraph("처리 기한", style="개요 1")
    table = document.add_table(3, 2)
    for row, column, text in ((0, 0, "구분"), (0, 1, "기한"), (1, 0, "일반 요청"), (1, 1, "접수 후 3일 이내"),
                              (2, 0, "긴급 요청"), (2, 1, "접수 후 1일 이내")):
        table.set_cell_text(row, column, text)
    path = folder / HWPX
    document.save_to_path(str(path))
    return path


def write_xlsx(folder: Path) -> Path:
    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "주문"
    for row in (["품목", "수량", "단가", "납기"], ["A4 용지", 10, 4500, "2025-03-14"], ["토너 카트리지", 2, 89000, "2025-03-14"]):
        sheet.append(row)
    path = folder / XLSX
    workbook.save(path)
    return path


def write_eml(folder: Path, attachment: Path) -> Path:
    message = EmailMessage()
    message["From"] = "김민수 <minsu.kim@example.com>"
    message["To"] = "purchasing@example.com"
    message["Subject"] = "구매 요청: 사무용품"
    message["Date"] = "Mon, 10 Mar 2025 09:00:00 +0900"
    message.set_content("안녕하세요.\n\n첨부한 주문서대로 사무용품 구매를 요청합니다.\n납기는 3월 14일입니다.\n\n김민수 드림")
    message.add_attachment(attachment.read_bytes(), maintype="application",
                           subtype="vnd.openxmlformats-officedocument.spreadsheetml.sheet", filename=attachment.name)
    path = folder / EML
    path.write_bytes(bytes(message))
    return path


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_scan(folder)
    write_hwpx(folder)
    print_pdf(ORDER_TABLE, folder / TABLE_PDF)
    write_eml(folder, write_xlsx(folder))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
