"""The Python API (docs/python-api.md): what ``import extractor`` offers, defined here and re-exported lazily by the
package's ``__init__`` so that importing the package costs nothing until a name is used."""

from __future__ import annotations

from extractor.api.calls import (
    CLI_RUN_LOG,
    Interrupted,
    Progress,
    RunLog,
    aextract_many,
    approve,
    export_records,
    extract,
    extract_many,
    reject,
    split,
    validate,
)
from extractor.api.contract import Contract
from extractor.api.models import (
    Attempt,
    Batch,
    Evidence,
    FieldResult,
    Finding,
    Place,
    Report,
    Result,
    Sentence,
    SentenceState,
    Tokens,
)
from extractor.api.sources import Source

__all__ = ["CLI_RUN_LOG", "Attempt", "Batch", "Contract", "Evidence", "FieldResult", "Finding", "Interrupted", "Place",
           "Progress", "Report", "Result", "RunLog", "Sentence", "SentenceState", "Source", "Tokens", "aextract_many",
           "approve", "export_records", "extract", "extract_many", "reject", "split", "validate"]
