"""SmolLM2-135M-Instruct's chat template has no tool support: vf-serve's check finds it (docs/agents.md)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow


def test_smollm2s_template_drops_tools(real_tokenizer: Any) -> None:
    from verifiers.inference.server.api import template_drops_tools

    assert template_drops_tools(real_tokenizer)
