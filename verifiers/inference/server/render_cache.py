"""Memoised chat-template renders for the embedded server.

The G requests of a GRPO group, every retry and every repeat of an eval send the same
messages, and rendering a Jinja chat template and tokenizing the text is the largest
per-request cost the embedded server has on a small model (more than a decoding step). A
render is a pure function of the messages, the tools, the template's arguments and the
template itself, so the ids are kept and handed out again.

Not cached: templates that read the clock (``strftime_now``: a cached "today" would go
stale), and messages that are not plain JSON (they have no stable key).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class _Pending:
    """A render in progress: the others with the same input wait on ``done``."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ids: tuple[int, ...] | None = None


# Rough bytes an entry holds: its key's characters plus a Python int and a pointer per id.
_BYTES_PER_ID = 36


class RenderCache:
    """``cache.ids(messages, tools, add_generation_prompt, kwargs, render)``: ``render()``'s ids, once per input.

    Bounded by entries and by an estimate of their bytes (an agent's multi-turn prompts are
    long and each is new), least recently used first out; safe to share between threads; a
    change of the tokenizer's template empties it.
    """

    def __init__(self, tokenizer: Any, max_entries: int = 4096, max_bytes: int = 64 << 20) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._pending: dict[str, _Pending] = {}
        self._template: object = None
        self._lock = threading.Lock()

    def ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        template_kwargs: dict[str, Any],
        render: Callable[[], list[int]],
    ) -> list[int]:
        """The ids ``render()`` gives for these inputs. Requests that arrive together with the same
        input (a group's G samples) wait for the first one's render instead of rendering too."""
        key = self._key(messages, tools, add_generation_prompt, template_kwargs)
        if key is None:
            return render()
        template = self._template
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return list(found)
            pending = self._pending.get(key)
            owner = pending is None
            if pending is None:
                pending = self._pending[key] = _Pending()
        if not owner:
            pending.done.wait()
            if pending.ids is None:  # the first render failed: this one raises its own error
                return render()
            with self._lock:
                self.hits += 1
            return list(pending.ids)
        try:
            ids = render()
            pending.ids = tuple(ids)
            with self._lock:
                self.misses += 1
                if self._template is not template:  # the template changed while this rendered
                    return ids
                self._entries[key] = pending.ids
                self.nbytes += _cost(key, pending.ids)
                while self._entries and (len(self._entries) > self.max_entries or self.nbytes > self.max_bytes):
                    old_key, old_ids = self._entries.popitem(last=False)
                    self.nbytes -= _cost(old_key, old_ids)
            return ids
        finally:
            with self._lock:
                self._pending.pop(key, None)
            pending.done.set()

    def _key(self, messages: Any, tools: Any, add_generation_prompt: bool, template_kwargs: dict[str, Any]) -> str | None:
        template = getattr(self.tokenizer, "chat_template", None)
        if not isinstance(template, str) or "strftime_now" in template:
            return None
        with self._lock:
            if template != self._template:  # a new template: nothing rendered before still holds
                self._entries.clear()
                self.nbytes = 0
                self._template = template
        try:
            return json.dumps([messages, tools, add_generation_prompt, template_kwargs], separators=(",", ":"),
                              sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            return None


def _cost(key: str, ids: tuple[int, ...]) -> int:
    return len(key) + _BYTES_PER_ID * len(ids)
