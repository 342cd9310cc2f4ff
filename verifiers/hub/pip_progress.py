"""Run pip with its output captured, reporting what it is doing every few seconds.

vf-install keeps pip's output out of the way (it is shown when pip fails, or with ``-v``), but
a resolve and download of a heavy environment can take minutes: a silent terminal cannot be
told from a hang. pip does not know its total work in advance (it resolves as it goes), so the
report is the phase, the packages seen so far and the time taken, not an ETA.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

_COLLECTING = re.compile(r"^\s*Collecting (\S+)")
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+)")
_INSTALLING = re.compile(r"^\s*Installing collected packages: (.*)$")


class PipProgress:
    """Counts pip's phases from its output lines."""

    def __init__(self) -> None:
        self.collected = 0
        self.downloaded = 0
        self.installing: int | None = None

    def feed(self, line: str) -> None:
        if _COLLECTING.match(line):
            self.collected += 1
        elif _DOWNLOADING.match(line):
            self.downloaded += 1
        elif (m := _INSTALLING.match(line)) is not None:
            self.installing = len([p for p in m.group(1).split(",") if p.strip()])

    def line(self, elapsed_s: float) -> str:
        if self.installing is not None:
            what = f"installing {self.installing} packages"
        else:
            what = f"resolving: {self.collected} packages collected, {self.downloaded} downloaded"
        return f"vf-install: pip is {what} ({elapsed_s:.0f} s)"


def run_pip(cmd: Sequence[str], env: Mapping[str, str], report: Callable[[str], None] | None,
            every_s: float = 10.0) -> tuple[int, str]:
    """``(exit status, combined output)``; ``report`` gets a progress line every ``every_s``."""
    started = time.monotonic()
    progress = PipProgress()
    out: list[str] = []
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(env))
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(every_s):
            if report is not None:
                report(progress.line(time.monotonic() - started))

    beat = threading.Thread(target=heartbeat, daemon=True, name="vf-install-progress")
    beat.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            progress.feed(line)
        code = proc.wait()
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, "".join(out)
