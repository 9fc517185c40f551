"""Long-lived objects kept out of the garbage collector's full passes.

A full collection of CPython's oldest generation walks every object the collector tracks, and the process
stops meanwhile. Measured in a batch at 64 calls in flight: the ingest worker, which holds kss's
dictionaries, stopped for 0.3-0.5 s per full collection, and the run's own process for 0.09-0.26 s. While a
worker stops no file is read; while the run's process stops no answer is read and no call is sent, and every
model slot waiting on it is idle. Objects made by imports and by a run's setup live as long as the process
or the run, so walking them frees nothing. ``gc.freeze`` moves the objects that exist to a generation no
collection walks; objects made afterwards are collected as before.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_runs = 0
_modules_seen = 0


def settle_imports() -> None:
    """Freeze what exists, if modules were imported since the last call (a worker process, after each step:
    its modules, kss's dictionaries among them, are imported on first use and kept for good)."""
    global _modules_seen
    with _lock:
        if len(sys.modules) != _modules_seen:
            _modules_seen = len(sys.modules)
            gc.freeze()


@contextmanager
def frozen_during_run() -> Iterator[None]:
    """What exists when a run starts is frozen while it lasts; when the last run of the process ends, it goes
    back to the oldest generation, so garbage made before the run can still be collected."""
    global _runs
    with _lock:
        _runs += 1
        gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if not _runs:
                gc.unfreeze()


@contextmanager
def collector_off() -> Iterator[None]:
    """A process's start-up (its imports and set-up) without the collector, then what it made frozen and the
    collector on again. Imports make hundreds of thousands of objects that live as long as the process, and every
    collection they trigger meanwhile walks them for nothing: about 0.1 s of the 1 s of CPU the imports of
    ``extract worker`` or ``extract run --queue`` take (measured: 0.96-1.06 s with it, 0.85-0.88 s without),
    paid by each process of a batch as it starts on shared cores (docs/queue-and-api.md#how-it-behaves)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
