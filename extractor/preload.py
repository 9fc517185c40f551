"""Imported by the fork server of the CPU pool's processes (``extractor.offload._context``) before it forks them,
and nowhere else: importing it changes how the process takes SIGTERM.

The modules every reader and the checker need (reading, segmenting, validating, the contracts) are imported here
once, and a few sentences are read and validated with the default contract as each process's warm-up does
(``extractor.offload.warm_process``); every process forked from this one starts with all of it, CPU it no longer
spends itself while an ``extract worker`` and ``extract run --queue`` start together on shared cores.

The fork server ignores SIGTERM as it ignores SIGINT: both reach the run's whole process group, and the run stops
the pool's processes itself; the fork server leaves when the run is gone. Killed anyway, the processes it forked
would look dead to the run (their exit is reported through it) and the files they read would end INPUT_ERROR.
"""

import logging
import signal

from extractor.contracts import get_contract
from extractor.offload import warm_process
from extractor.vocab import DEFAULT_CONTRACT

signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    warm_process(get_contract(DEFAULT_CONTRACT).ref)
except Exception as error:  # noqa: BLE001 - never fatal: each process warms up on its own (extractor.offload.warm_up)
    logging.getLogger(__name__).warning("the fork server could not warm up: %s: %s", type(error).__name__, error)
