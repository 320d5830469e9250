"""harness/starve.py: a command runs beside CPU hogs, which are gone when it ends (make test-stress)."""

from __future__ import annotations

import os
import sys

from harness import starve


def test_the_command_runs_beside_twice_the_cores_of_hogs_and_they_stop_with_it() -> None:
    # The command sees the hogs running (busy processes named after the harness), then they are gone.
    probe = (
        "import os,sys\n"
        "def hog(p):\n"
        "    try:\n"
        "        cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
        "        ppid = open(f'/proc/{p}/status').read().split('PPid:')[1].split()[0]\n"
        "    except OSError:\n"
        "        return False\n"
        f"    return b'spawn_' + b'main' in cmd and ppid == '{os.getpid()}'\n"
        "sys.exit(sum(1 for p in os.listdir('/proc') if p.isdigit() and p != str(os.getpid()) and hog(p)))\n"
    )
    assert starve.run([sys.executable, "-c", probe], hogs=3) == 3
    assert starve.hogs_for(2) == 4


def test_usage_errors() -> None:
    assert starve.main(["--hogs"]) == 2
    assert (
        starve.main(
            [
                "--",
            ]
        )
        == 2
    )
    assert starve.main(["--hogs", "1", "--", sys.executable, "-c", "raise SystemExit(7)"]) == 7
