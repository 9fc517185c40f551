"""PDFs with a text layer, printed by Debian's Chromium from HTML (a real PDF writer: fonts embedded, text as
glyph runs, table rules as paths), for the PDF reader's tests and benchmark."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")

ORDER_TABLE = """<!doctype html><html lang="ko"><meta charset="utf-8"><style>
body { font-family: 'Noto Sans CJK KR', sans-serif; font-size: 11pt; margin: 2cm; }
table { border-collapse: collapse; margin: 12pt 0; } td, th { border: 1px solid #000; padding: 4pt 8pt; }
</style><body>
<h1>구매 주문서</h1>
<p>주문 번호: PO-2025-0314. 아래 품목을 3월 14일까지 납품해 주십시오.</p>
<table>
<tr><th rowspan="2">품목</th><th colspan="2">수량</th><th rowspan="2">단가</th></tr>
<tr><th>주문</th><th>재고</th></tr>
<tr><td>A4 용지</td><td>10</td><td>3</td><td>4,500원</td></tr>
<tr><td>토너 카트리지</td><td>2</td><td>0</td><td>89,000원</td></tr>
</table>
<p>납품 장소는 본사 3층 총무팀입니다.</p>
</body></html>"""


def print_pdf(html: str, path: Path, pages_of: int = 1) -> Path:
    """``html`` printed to ``path`` by headless Chromium (A4); ``pages_of`` copies of the body, one per page."""
    from playwright.sync_api import sync_playwright

    if pages_of > 1:
        head, body = html.split("<body>", 1)
        body = body.replace("</body></html>", "")
        html = head + "<body>" + "".join(f'<div style="page-break-after: always">{body}</div>'
                                         for _ in range(pages_of)) + "</body></html>"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_content(html)
            path.write_bytes(page.pdf(format="A4"))
        finally:
            browser.close()
    return path
