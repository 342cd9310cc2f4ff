"""Bounded capture of a child process's stdout and stderr, for sandboxed code and agent programs.

Both keep only the head and tail of what a child prints, so a program that floods its
output cannot exhaust the parent's memory, and both must see the child's own exit even
when a background process it started still holds the pipes.
"""

from __future__ import annotations

import asyncio
import codecs


class OutputCapture:
    """Keeps the head and tail of a stream, counting (not storing) everything between.

    Decoding incrementally lets the truncation marker give an exact character count
    and never splits a UTF-8 sequence.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._head_max = max_chars - max_chars // 2
        self._tail_max = max_chars // 2
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self._head_max - self._head_len
        if room > 0 and text:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text and self._tail_max:
            self._tail = (self._tail + text)[-self._tail_max :]

    def text(self) -> str:
        head = "".join(self._head)
        if self.total <= self.max_chars:
            return head + self._tail
        cut = self.total - len(head) - len(self._tail)
        return f"{head}\n... [truncated {cut} chars] ...\n{self._tail}"


class CapturingProtocol(asyncio.SubprocessProtocol):
    """Pushes output straight into bounded captures and reports the child's own exit.

    A protocol rather than `create_subprocess_exec` streams: nothing is buffered beyond
    the captures, and `process_exited` fires when the child exits even if a background
    process still holds its pipes (on 3.11 `Process.wait()` waits for those too).
    """

    def __init__(self, max_chars: int) -> None:
        self.stdout = OutputCapture(max_chars)
        self.stderr = OutputCapture(max_chars)
        self.exited = asyncio.Event()
        self.finished = asyncio.Event()  # exited and every pipe closed

    def _capture(self, fd: int) -> OutputCapture | None:
        return {1: self.stdout, 2: self.stderr}.get(fd)

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        capture = self._capture(fd)
        if capture is not None and isinstance(data, bytes):
            capture.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        capture = self._capture(fd)
        if capture is not None:
            capture.feed(b"", final=True)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.finished.set()
