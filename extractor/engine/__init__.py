"""The batch engine: documents in, validated candidates out, every attempt recorded as it happens.

Per document: skip what this configuration finished -> ingest + segment -> claim -> generate -> validate ->
at most one repair -> validate -> (judge) -> route to exactly one state. Generation calls are bounded to two
per document per run; transport retries live in the provider and are recorded, not hidden. The engine never
approves anything and never writes the approved-records table.

Modules: ``discover`` (which files), ``limit`` (how many model calls at once), ``stop`` (interruption),
``recorder`` (the run log, one writer), ``convert`` (one document's procedure and its model calls),
``route`` (the pure decision of a document's state), ``engine`` (the worker pool, heartbeat, signals) and
``summary`` (what a run reports).
"""

from __future__ import annotations

from extractor.engine.calls import Conversion, Converter, Job, ModelCalls
from extractor.engine.convert import convert
from extractor.engine.discover import Discovery, discover
from extractor.engine.engine import Engine
from extractor.engine.limit import AdaptiveLimit
from extractor.engine.route import Route, route
from extractor.engine.settings import RunSettings
from extractor.engine.summary import DocumentOutcome, Progress, RunSummary

__all__ = ["AdaptiveLimit", "Conversion", "Converter", "Discovery", "DocumentOutcome", "Engine", "Job", "ModelCalls",
           "Progress", "Route", "RunSettings", "RunSummary", "convert", "discover", "route"]
