"""The batch engine: documents in, validated candidates out, every attempt recorded as it happens.

Per document: skip what this configuration finished -> ingest + segment -> claim -> generate -> validate ->
at most one repair -> validate -> (judge) -> route to exactly one state. Generation calls are bounded to two
per document per run; transport retries live in the provider and are recorded, not hidden. The engine never
approves anything and never writes the approved-records table.

Modules: ``discover`` (which files), ``stop`` (interruption), ``recorder`` (the run log, one writer),
``convert`` (one document's procedure and its model calls; ``windowed``: a long one, window by window),
``route`` (the pure decision of a document's state), ``engine`` (the worker pool, heartbeat, signals),
``summary`` (what a run reports) and ``judge_afterwards`` (``extract judge run``: judging a finished run).
How many model calls run at once is ``AdaptiveLimit`` (``extractor.generate.limit``: the judge shares it).
"""

from __future__ import annotations

from extractor.engine.calls import Conversion, Converter, Job, ModelCalls
from extractor.engine.convert import convert
from extractor.engine.discover import Discovery, discover
from extractor.engine.engine import Engine
from extractor.engine.route import Route, route
from extractor.engine.settings import RunSettings
from extractor.engine.summary import DocumentOutcome, Progress, RunSummary
from extractor.generate.limit import AdaptiveLimit

__all__ = ["AdaptiveLimit", "Conversion", "Converter", "Discovery", "DocumentOutcome", "Engine", "Job", "ModelCalls",
           "Progress", "Route", "RunSettings", "RunSummary", "convert", "discover", "route"]
