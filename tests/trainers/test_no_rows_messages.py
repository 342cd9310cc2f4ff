"""vf-train names the real cause when a step has nothing to train on (not always "token ids")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")


def test_max_tokens_beyond_the_context_is_named(tmp_path: Path, train_config: Any, run_training: Any) -> None:
    from verifiers.errors import ConfigError

    cfg = train_config(tmp_path / "run", max_tokens=100_000, max_seq_len=200_000, max_steps=1)
    with pytest.raises(ConfigError) as err:
        run_training(cfg)
    message = str(err.value)
    assert "token ids" not in message, message
    assert "prompt_too_long" in message and "lower max_tokens" in message, message

