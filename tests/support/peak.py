"""Run a command and write its peak resident memory (KiB) to a file: ``python peak.py OUT -- COMMAND...``.

The kernel's peak for a process (``ru_maxrss``) starts from the resident size of the process it was forked
from, so a command started by a large test process (pytest late in a full suite holds a GB) reports that
size whatever it used itself. Forked from this small launcher instead, it reports its own peak: the largest
of it and the processes below it (``os.wait4``). The launcher is their subreaper (Linux): the fork server of the
command's worker processes outlives the command by a moment and is reaped here, with the workers it reaped, rather
than by init, where their peak would be lost. A SIGTERM to the launcher is passed on to the command (a test stops a
measured worker as it stops any other). Exits with the command's status.
"""

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36

out, separator, *command = sys.argv[1:]
assert separator == "--" and command, __doc__
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
pid = os.fork()
if pid == 0:
    try:
        os.execvp(command[0], command)
    finally:
        os._exit(127)
signal.signal(signal.SIGTERM, lambda number, frame: os.kill(pid, number))
_, status, usage = os.wait4(pid, 0)
peak = usage.ru_maxrss
while True:  # whatever the command left behind ends once the command is gone (extractor.offload._leave_with_the_run)
    try:
        _, _, usage = os.wait4(-1, 0)
    except ChildProcessError:
        break
    peak = max(peak, usage.ru_maxrss)
with open(out, "w") as written:
    written.write(str(peak))
sys.exit(os.waitstatus_to_exitcode(status))
