"""The OpenAI-compatible HTTP API over the engine: what `vf-serve` runs and what trainers call.

``app`` builds the FastAPI application (routing, auth, body limits, disconnects, error bodies),
``api`` handles the requests themselves (`api.EmbeddedAPI`, also used in-process without HTTP),
``protocol`` holds the request and error models, ``sse`` the streamed chunks, ``tool_parser``
the tool calls found in generated text, ``render_cache`` the rendered chat prompts,
``connections`` and ``access_log`` the uvicorn connection guard and the request log, and
``runner`` starts the server (`runner.EmbeddedServer`) or an in-process client. The server sits
above the engine (`verifiers.inference.engine`) and never the reverse.

This package was the module ``verifiers/inference/server.py``; its names (the ones below) are
still importable from here. They load on first use, so importing a sibling such as
``protocol`` or ``tool_parser`` does not import FastAPI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifiers.inference.server.app import (
        DEFAULT_MAX_REQUEST_BYTES,
        BodyLimit,
        EmbeddedAPI,
        create_app,
        render_chat,
    )

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "BodyLimit", "EmbeddedAPI", "create_app", "render_chat"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("verifiers.inference.server.app"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
