"""extractor: documents in, evidence-checked structured candidates out; only people approve.

The Python API (docs/python-api.md) is what ``__all__`` lists. Each name is imported the first time it is used (a
module ``__getattr__``): ``import extractor`` alone imports nothing else, so the commands that only read the run log,
which import this package too, start as fast as before, and no model client, Celery or FastAPI is imported until a call
needs it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["CLI_RUN_LOG", "Attempt", "Batch", "Contract", "ContractError", "Document", "Evidence", "ExtractorError",
           "FieldResult", "Finding", "InputError", "Interrupted", "Place", "Progress", "Report", "Result", "RunLog",
           "RunOptions", "Sentence", "SentenceState", "Source", "Tokens", "UsageError", "__version__", "aextract_many",
           "approve", "export_records", "extract", "extract_many", "reject", "split", "validate"]
_ELSEWHERE = {"ExtractorError": "extractor.errors", "InputError": "extractor.errors",
              "ContractError": "extractor.errors", "UsageError": "extractor.errors", "RunOptions": "extractor.options",
              "Document": "extractor.document"}
"""Where the names ``extractor.api`` does not define live; every other name of ``__all__`` is ``extractor.api``'s."""

if TYPE_CHECKING:  # what type checkers and editors see; at run time ``__getattr__`` imports it on first use
    from extractor.api import (
        CLI_RUN_LOG,
        Attempt,
        Batch,
        Contract,
        Evidence,
        FieldResult,
        Finding,
        Interrupted,
        Place,
        Progress,
        Report,
        Result,
        RunLog,
        Sentence,
        SentenceState,
        Source,
        Tokens,
        aextract_many,
        approve,
        export_records,
        extract,
        extract_many,
        reject,
        split,
        validate,
    )
    from extractor.document import Document
    from extractor.errors import ContractError, ExtractorError, InputError, UsageError
    from extractor.options import RunOptions


class _Package(types.ModuleType):
    """This package, whose ``validate`` stays the API's function: importing the stage of the same name
    (``extractor.validate``, a subpackage) would set the attribute to the subpackage, whenever it first happens.
    The subpackage stays in ``sys.modules``, so ``from extractor.validate import ...`` is unchanged."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "validate" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _ELSEWHERE.get(name) or ("extractor.api" if name in __all__ else None)
    if module is None:  # (``from extractor import offload`` then imports the submodule)
        raise AttributeError(f"module 'extractor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
