"""``min_p`` in a vf-train config reaches the server and changes what is sampled.

At min_p close to 1 only the likeliest token survives the filter, so every sample of a prompt
is the same; without it a random tiny model at temperature 1 writes different completions.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")


def completions(groups: Any) -> list[set[tuple[int, ...]]]:
    return [{tuple(r.tokens[0].completion_ids) for r in g} for g in groups]


def test_min_p_is_sent_and_applied(generated_groups: Any) -> None:
    trainer, greedy = generated_groups(min_p=0.999, temperature=1.0, max_tokens=8)
    assert trainer.sampling_args["extra_body"]["min_p"] == 0.999
    assert all(len(c) == 1 for c in completions(greedy))  # one distinct completion per prompt
    trainer, free = generated_groups(temperature=1.0, max_tokens=8)
    assert "min_p" not in trainer.sampling_args["extra_body"]
    assert any(len(c) > 1 for c in completions(free))
