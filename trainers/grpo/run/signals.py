"""SIGINT and SIGTERM during training, and the commit window.

The first Ctrl-C stops at the next step boundary, where the checkpoint is exact (a resumed run
then equals an uninterrupted one); a second one, or SIGTERM, stops at once. Stopping at once
abandons a step whose weights are not updated yet (the checkpoint holds the state it started
from), but a step already updating is finished first: the window opens right before the first
optimizer step (`commit`) and closes once the new weights reached the server (`settled`).
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any


class StopSignals:
    """Installs the run's handlers (`install`/`restore`) and tells the loop when to stop."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.requested = False  # a stop was asked for: the loop stops at the next step boundary
        self.committing = False  # the weights of the step in progress have been updated
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on (only the main thread may; elsewhere nothing happens)."""
        self.requested = False
        self.committing = False
        self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        with contextlib.suppress(ValueError):  # only the main thread may install handlers
            signal.signal(signal.SIGTERM, self._on_term)
            signal.signal(signal.SIGINT, self._on_int)

    def restore(self) -> None:
        """Put the handlers back that were there before `install`."""
        with contextlib.suppress(ValueError):
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def commit(self) -> None:
        """The step starts changing the weights: from here on it is finished, not abandoned."""
        self.committing = True

    def settled(self) -> None:
        """The step's weights reached the server: a stop may interrupt again."""
        self.committing = False

    def _on_term(self, signum: int, frame: Any) -> None:
        # Stop now. A step whose weights are not updated yet is abandoned (the checkpoint
        # holds the state it started from); one already updating is finished first.
        self.requested = True
        if not self.committing:
            raise KeyboardInterrupt

    def _on_int(self, signum: int, frame: Any) -> None:
        # The first Ctrl-C stops at the next step boundary, where the checkpoint is exact
        # (a resumed run then equals an uninterrupted one); a second one stops at once.
        if self.requested:
            self._on_term(signum, frame)
            return
        self.requested = True
        self.console.print("[yellow]Ctrl-C: stopping after this step (press again to stop now)[/yellow]")
