"""Imported by the fork server of the worker processes (``extractor.workers._context``) before it forks them, and
nowhere else: importing it changes how the process takes SIGTERM.

The modules every worker process needs (reading, segmenting, validating, the contracts) are imported here once,
and a few sentences are read and validated with the default contract as the workers' warm-up does (without
Korean, which only the ingest worker segments: ``extractor.workers.warm_process``); both workers forked from this process
start with all of it, CPU they no longer spend each while an ``extract worker`` and ``extract run --queue`` start
together on shared cores (docs/queue-and-api.md#how-it-behaves). What exists then is frozen (``gc.freeze``): no
full collection walks it, and the forked workers share its memory pages instead of copying them as the collector
touches them; the collector is then on (off in ``extract worker``'s start-up, which forked this process).

The fork server ignores SIGTERM as it ignores SIGINT: both reach the run's whole process group, and the run stops
its workers itself (``extractor.workers._start_worker``); the fork server leaves when the run and its workers are
gone. Killed anyway, the workers it forked would look dead to the run (their exit is reported through it).
"""

import gc
import logging
import signal

from extractor.contracts import get_contract
from extractor.vocab import DEFAULT_CONTRACT
from extractor.workers import warm_process

signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    warm_process(get_contract(DEFAULT_CONTRACT).ref, False)
except Exception as error:  # noqa: BLE001 - never fatal: each worker warms up on its own (extractor.workers.warm_up)
    logging.getLogger(__name__).warning("the fork server could not warm up: %s: %s", type(error).__name__, error)
gc.freeze()
gc.enable()  # forked by extract worker during its start-up, with the collector off (extractor.heap)
