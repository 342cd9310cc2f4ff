"""Model responses in ``state["responses"]`` that also read like the openai SDK's objects.

`ResponseView` lives in `verifiers.clients.response`; this 0.1.x-era path re-exports
the same class (old pickles that name it here still load).
"""

from __future__ import annotations

from verifiers.clients.response import ResponseView

__all__ = ["ResponseView"]
