"""Text-layer PDF reading against poppler's ``pdftotext`` on the same file, in the same run.

A ``--pages``-page PDF printed by Chromium (a real writer: embedded fonts, glyph runs, table rules as paths):
pages of procedure text in Korean and English, every third page the purchase order with its ruled table.
``extractor.ingest.pdf.parse`` (PDFium: words with boxes; pdfplumber's tables on the pages with ruling lines)
is timed against ``pdftotext`` (text only, no boxes, no tables) reading the whole file; both best of
``--rounds``. Target: <= 5x pdftotext per page. The tables are checked as read before (every cell pdfplumber's
own ``extract_tables`` finds is one block of ours) and the words against pdftotext's (token recall).

    python bench/bench_pdf.py [--pages 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT_PAGE = """<div style="page-break-after: always">
<h1>업무 요청 검토 절차</h1>
<p>이 절차는 업무 요청을 접수하고 검토하여 승인하는 방법을 정한다. 담당자는 요청서를 접수한 날부터 3일 이내에 요청 번호를
부여하고, 팀장은 요청서를 검토한 뒤 2025년 3월 14일까지 승인 여부를 결정한다. 승인된 요청은 총무팀이 처리한다.</p>
<ol><li>요청자는 요청서에 목적, 기한, 예산(예: 1,250,000원)을 적는다.</li>
<li>담당자는 요청서가 빠짐없이 작성되었는지 확인한다.</li><li>팀장은 03/25/2016 이후의 요청만 검토한다.</li></ol>
<h2>Purchase approval</h2>
<p>Every purchase above USD 5,000.00 needs the approval of the finance director before an order is placed.
The requester attaches three quotes; the buyer compares them and records the chosen supplier, the unit
price and the delivery date in the register within two working days.</p>
<p>""" + " ".join(["Orders are reviewed weekly; late deliveries are escalated to the category manager."] * 12) + """</p>
</div>"""


def document_html(pages: int) -> str:
    from tests.support.pdfs import ORDER_TABLE

    head, body = ORDER_TABLE.split("<body>", 1)
    table_page = f'<div style="page-break-after: always">{body.replace("</body></html>", "")}</div>'
    return head + "<body>" + "".join(table_page if number % 3 == 2 else TEXT_PAGE for number in range(pages)) \
        + "</body></html>"


def best(rounds: int, action: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()

    import pdfplumber

    from extractor.ingest import load
    from extractor.ingest.pdf import parse
    from extractor.segment import segment
    from tests.support.pdfs import print_pdf
    from tests.support.reference_readers import recall, squeezed, tokens

    with tempfile.TemporaryDirectory(prefix="bench-pdf-") as folder:
        pdf = print_pdf(document_html(arguments.pages), Path(folder) / "printed.pdf")
        data = pdf.read_bytes()
        poppler = best(arguments.rounds, lambda: subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"],
                                                                 capture_output=True, check=True))
        ours = best(arguments.rounds, lambda: parse(data, str(pdf)))
        reference = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True,
                                   check=True).stdout.decode()
        document = segment(load(pdf))
        with pdfplumber.open(pdf) as plumber:
            count = len(plumber.pages)
            cells = [squeezed(cell) for page in plumber.pages for table in page.extract_tables()
                     for row in table for cell in row if cell]
    blocks = [squeezed(document.text[block.content_start:block.end]) for block in document.blocks
              if block.kind == "table_cell"]
    found = sum(1 for cell in cells if cell in blocks)
    print(f"text-layer PDF, {count} pages printed by Chromium ({count // 3} with a ruled table), best of {arguments.rounds}")
    print(f"  pdftotext (text only):                        {poppler:6.3f} s  {1000 * poppler / count:6.2f} ms/page")
    print(f"  extractor.ingest.pdf (words, boxes, tables):  {ours:6.3f} s  {1000 * ours / count:6.2f} ms/page")
    print(f"  ratio: {ours / poppler:.2f}x pdftotext per page (target <= 5x)")
    print(f"  table cells pdfplumber's extract_tables finds, read as one block each: {found}/{len(cells)}")
    print(f"  token recall against pdftotext: {recall(tokens(reference), tokens(document.text)):.3f}")


if __name__ == "__main__":
    main()
