"""Excel .xlsx: one TABLE_CELL block per non-empty cell, row by row, each with its sheet and cell address."""

from __future__ import annotations

import datetime as dt
from io import BytesIO

from extractor.document import Block, BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler
from extractor.ingest.contain import open_zip


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Cells in sheet order, then row by row; a workbook of several sheets gets each sheet's name as a heading.

    The cells read are the ones the sheet holds: the range its ``dimension`` declares is not trusted (a
    workbook declaring all 17 billion cells of a sheet would be walked cell by cell). Values are the ones the
    file stores: a formula's last computed value (what Excel shows), numbers as
    written without the cell's display format (``0.15``, not ``15%``), dates as ISO dates.
    """
    from openpyxl import load_workbook

    open_zip(data, path, ".xlsx")  # every part inflates to what it declares, no DTD: openpyxl (with defusedxml) reads it
    try:
        workbook = load_workbook(BytesIO(data), read_only=True, data_only=True)
    except Exception as error:  # a broken package fails in zipfile, lxml or openpyxl, each with its own type
        raise InputError(path, " ".join(f"not a valid .xlsx ({type(error).__name__}: {error})".split())) from None
    assembler = Assembler()
    try:
        sheets = workbook.worksheets
        for sheet in sheets:
            if len(sheets) > 1:
                assembler.block(BlockKind.HEADING, sheet.title, location=sheet.title)
            sheet.reset_dimensions()  # a declared range (Gnumeric writes A1:XFD1048576) is not walked cell by cell
            for row in sheet.iter_rows():
                for cell in row:
                    value = getattr(cell, "value", None)
                    if value is None or not hasattr(cell, "coordinate"):
                        continue
                    assembler.block(BlockKind.TABLE_CELL, _shown(value), location=f"{sheet.title}!{cell.coordinate}")
    except Exception as error:  # a sheet that breaks mid-read is the file's fault, not a crash of the batch
        raise InputError(path, " ".join(f"not a valid .xlsx ({type(error).__name__}: {error})".split())) from None
    finally:
        workbook.close()
    text, blocks, _ = assembler.result()
    return text, blocks, None


def _shown(value: object) -> str:
    """A cell value as text: whole floats without ``.0``, midnight datetimes as dates."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)
