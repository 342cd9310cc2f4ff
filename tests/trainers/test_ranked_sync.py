"""The checks around one writer's weight sync (`trainers.grpo.sync.ranked`) that need no second process.

The launched runs (tests/vllm/test_vllm_ddp.py) show the ranks agreeing; here, what happens when
they do not: a replica with other weights or a rank at another version stops the run with an
error naming it, and rank 0's failure reaches another rank as the same error class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo.dist.ranks import Dist, rank_zero_error
from trainers.grpo.sync.ranked import OneWriterSync, weights_fingerprint
from verifiers.errors import ConfigError, ServerError, WeightSyncError


class TwoRanks(Dist):
    """Rank 0 of 2, whose gather returns what the test says the other rank sent (no process group)."""

    def __init__(self, other: Any) -> None:
        super().__init__(rank=0, world_size=2)
        self.other = other

    def gather(self, obj: Any) -> list[Any]:
        return [obj, self.other(obj)]


class Inner:
    model_name = "policy"
    last: dict[str, float] = {}

    def after_step(self, version: int) -> dict[str, float]:
        return {"sync/probe_max_abs_diff": 0.0}


def test_fingerprint_sees_one_changed_weight() -> None:
    model = torch.nn.Linear(4, 3)
    before = weights_fingerprint(model)
    assert before == weights_fingerprint(model)
    with torch.no_grad():
        model.weight[1, 2] += 1e-6
    assert weights_fingerprint(model) != before


def test_fingerprint_of_a_peft_model_sees_every_trained_weight(base_model_dir: Path) -> None:
    """With ``weight_sync = 'lora'`` only the adapter is pushed: the replica check must see a rank
    whose adapter (or trained embedding copy) drifted, not only the frozen base weights."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_model_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                      modules_to_save=["embed_tokens"], ensure_weight_tying=True))
    before = weights_fingerprint(model)
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    kinds = {k for n, _ in trained for k in ("lora_A", "lora_B", "modules_to_save") if f".{k}." in n}
    assert kinds == {"lora_A", "lora_B", "modules_to_save"}, [n for n, _ in trained]
    for name, p in trained:
        saved = p.detach().clone()
        with torch.no_grad():
            p.view(-1)[0] += 1e-6
        assert weights_fingerprint(model) != before, name
        with torch.no_grad():
            p.copy_(saved)


def test_a_diverged_replica_or_version_stops_the_sync() -> None:
    model = torch.nn.Linear(4, 3)
    same = OneWriterSync(Inner(), TwoRanks(lambda obj: obj), model)
    assert same._check_replicas(3) == 0.0
    other = [x + 1e-3 for x in weights_fingerprint(model) or []]
    with pytest.raises(WeightSyncError, match=r"weights of rank\(s\) \[1\] differ from rank 0's"):
        OneWriterSync(Inner(), TwoRanks(lambda obj: (obj[0], other)), model)._check_replicas(3)
    with pytest.raises(WeightSyncError, match=r"disagree on the policy version.*\[3, 2\]"):
        OneWriterSync(Inner(), TwoRanks(lambda obj: (2, obj[1])), model)._check_replicas(3)


def test_rank_zero_failure_keeps_its_class_on_other_ranks() -> None:
    assert type(rank_zero_error("WeightSyncError", "x")) is WeightSyncError
    assert type(rank_zero_error("ConfigError", "x")) is ConfigError
    for name in ("OSError", "KeyError", "NoSuchError"):  # not ours: a ServerError, which stops the run cleanly
        assert type(rank_zero_error(name, "x")) is ServerError
