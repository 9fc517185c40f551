"""Clean scans rendered from known text: an A4 page at a scanner's resolution, in Debian's Noto CJK font.

Tests and ``bench/bench_ocr.py`` OCR these pages and compare with the text that was drawn, so character
accuracy is measured against ground truth rather than against another OCR engine. Korean procedure pages use
the marks Korean offices write with (□ ○ ■ - ①), which Tesseract's models do not know.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"
SERIF = "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc"
A4_INCHES = (8.27, 11.69)

KOREAN_PROCEDURE = """작업 요청 검토 절차
1. 목적
이 절차는 부서 간 작업 요청을 접수하고 검토하는 방법과 책임을 정한다.
2. 적용 범위
본 절차는 본사와 지사의 모든 작업 요청에 적용한다.
3. 처리 절차
□ 요청자는 작업 요청서를 작성하여 담당 부서에 제출한다.
○ 요청서에는 작업 내용, 희망 완료일, 예산 코드를 적는다.
○ 긴급 요청은 사유를 함께 적는다.
□ 담당자는 요청서를 접수하고 요청 번호를 부여한다.
□ 검토자는 접수된 요청을 3일 이내에 승인하거나 보완을 요청한다.
① 승인된 요청은 작업 일정에 등록한다.
② 보완 요청은 요청자에게 사유와 함께 돌려보낸다.
■ 처리 결과와 검토 의견은 작업 관리 시스템에 기록한다.
4. 문의처
운영지원팀 김민수 과장 (내선 2417)"""

RUSSIAN_PROCEDURE = """Порядок согласования отпуска
1. Общие положения
Настоящий порядок определяет правила оформления и согласования ежегодного отпуска.
2. Порядок действий
- Сотрудник заполняет заявление на отпуск в системе учёта не позднее чем за 14 дней.
- Руководитель отдела рассматривает заявление в течение двух рабочих дней.
- Отдел кадров проверяет остаток дней отпуска и готовит приказ.
3. Ответственность
Руководитель отдела отвечает за соблюдение графика отпусков.
Контакт: Иванова Мария Петровна, доб. 315."""

ENGLISH_PROCEDURE = """Purchase Request Approval Procedure
1. Purpose
This procedure sets out how purchase requests are submitted, reviewed and approved.
2. Steps
- The requester fills in the purchase request form and attaches two quotes.
- The budget owner checks the cost centre and approves requests up to 5,000 EUR.
- Requests above 5,000 EUR also need the approval of the finance director.
- The purchasing team places the order within three working days.
3. Contact
Questions go to the purchasing team at purchasing@example.com."""

KOREAN_WITH_LATIN = """구매 요청 처리 기준
1. 목적
이 기준은 ERP 시스템에서 구매 요청을 처리하는 방법을 정한다.
2. 처리 방법
□ 요청자는 SAP 자재 코드와 견적서 PDF 파일을 첨부하여 요청한다.
○ 요청 금액이 USD 5,000 이상이면 CFO 승인이 필요하다.
○ 납품 조건은 FOB 부산항 기준으로 적는다.
□ 구매팀은 요청을 접수하고 PO 번호를 부여한다.
■ 처리 결과는 ERP 시스템의 Purchase Order 화면에 기록한다.
3. 문의처
구매팀 이지은 대리 (purchasing@example.com)"""
"""A Korean page with the Latin words Korean offices write (system names, codes, file types, an address)."""

PROCEDURES = {"kor": KOREAN_PROCEDURE, "rus": RUSSIAN_PROCEDURE, "eng": ENGLISH_PROCEDURE}


@dataclass(frozen=True)
class Scan:
    image: Image.Image
    text: str  # the lines as drawn, joined by "\n"


def render(text: str, dpi: int = 300, points: float = 11.0, font: str = FONT) -> Scan:
    """``text`` drawn on a white A4 page at ``dpi``, ``points`` high, wrapped at the margins like a word processor;
    a line that starts with a list mark keeps its continuation lines indented under the text."""
    width, height = (round(inches * dpi) for inches in A4_INCHES)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    face = ImageFont.truetype(font, round(points / 72 * dpi))
    margin = round(dpi * 0.9)
    line_height = round(points / 72 * dpi * 1.7)
    y = margin
    drawn: list[str] = []
    for line in _wrapped(text.split("\n"), face, width - 2 * margin):
        draw.text((margin, y), line, font=face, fill=0)
        drawn.append(line)
        y += line_height
        if y > height - margin:
            raise ValueError("text does not fit on one page")
    return Scan(page, "\n".join(drawn))


def _wrapped(lines: Iterable[str], face: ImageFont.FreeTypeFont, width: int) -> Iterable[str]:
    for line in lines:
        words = line.split(" ")
        current = ""
        for word in words:
            candidate = f"{current} {word}" if current else word
            if current and face.getlength(candidate) > width:
                yield current
                current = word
            else:
                current = candidate
        yield current


def save_pdf(scans: list[Scan], path: Path, dpi: int = 300) -> Path:
    """The pages as an image-only PDF, as a scanner writes one (no text layer)."""
    first, *rest = [scan.image.convert("RGB") for scan in scans]
    first.save(path, "PDF", resolution=dpi, save_all=True, append_images=rest)
    return path
