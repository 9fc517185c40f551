"""Run a command and write its peak resident memory (KiB) to a file: ``python peak.py OUT -- COMMAND...``.

The kernel's peak for a process (``ru_maxrss``) starts from the resident size of the process it was forked
from, so a command started by a large test process (pytest late in a full suite holds a GB) reports that
size whatever it used itself. Forked from this small launcher instead, it reports its own peak: the largest
of it and the children it reaped (``os.wait4``). Exits with the command's status.
"""

import os
import sys

out, separator, *command = sys.argv[1:]
assert separator == "--" and command, __doc__
pid = os.fork()
if pid == 0:
    try:
        os.execvp(command[0], command)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as peak:
    peak.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
