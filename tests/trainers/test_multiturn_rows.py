"""Multi-turn tool-use rows as the learner gets them: the server's own tokens, only the model's turns trained.

A tiny model is first taught one correct key-lookup episode (a tool call, then an answer), so
that in a real `vf-train` step it calls the tool, gets the tool's reply and answers: every row
spans two model turns with the environment's tokens between them. The step's batch must then be
the server's token ids, turn after turn, with the loss mask on exactly the tokens the model
sampled and off the prompt, the tool result and the chat markup around it. The same run's
metrics feed the agentic-learning benchmark's summary, whose JSON keys are checked too.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo.config import load_config
from trainers.grpo.trainer import GRPOTrainer

ROOT = Path(__file__).resolve().parents[2]
ENV_ROOT = ROOT / "environments" / "key_lookup"


class RecordingTrainer(GRPOTrainer):
    """Keeps every batch the learner built, with the rollouts it came from."""

    def _build(self, groups: list[list[Any]]) -> Any:
        batch, metrics = super()._build(groups)
        self.built = [*getattr(self, "built", []), ([r for g in groups for r in g], batch)]
        return batch, metrics


@pytest.fixture(scope="module")
def multiturn_run(tmp_path_factory: pytest.TempPathFactory, teach_conversation: Any) -> tuple[RecordingTrainer, Path]:
    pytest.importorskip("transformers")
    from rich.console import Console

    import verifiers as vf
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    sys.path.insert(0, str(ENV_ROOT))  # the package as a checkout has it (the loader's fallback needs the cwd)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; one thread is also the fastest for a model this small
    try:
        # One key per table: every prompt is "look up A", so the taught call is right for each of them
        # (the values differ, so the taught answer mostly is not: rewards vary, as in real training).
        env_args = {"keys": "A", "num_keys": 1, "num_train_examples": 4, "num_eval_examples": 0}
        env = vf.load_environment("key-lookup", **env_args)
        root = tmp_path_factory.mktemp("multiturn")
        model_dir = save_tiny_model(root / "model", TinyModelSpec(hidden_size=32))
        from key_lookup import expert_episode

        episode = expert_episode(env.get_dataset().rows[0], env.oai_tools)
        teach_conversation(model_dir, episode["messages"], episode["tools"], lr=1e-2, max_steps=400, tolerance=1e-2)
        cfg = load_config(None, {
            "model": str(model_dir), "env_id": "key-lookup", "env_args": env_args, "temperature": 0.5,
            "output_dir": str(root / "run"), "algorithm": "grpo", "prompts_per_step": 2, "num_generations": 2,
            "max_steps": 2, "max_tokens": 56, "learning_rate": 1e-4, "progress": False, "plot": False,
            "save_every": 0, "num_sample_completions": 0, "torch_threads": 1,
        })
        trainer = RecordingTrainer(cfg, console=Console(file=io.StringIO()))
        trainer.train()
    finally:
        sys.path.remove(str(ENV_ROOT))
        torch.set_num_threads(threads)
    return trainer, root / "run" / "metrics.jsonl"


def test_the_loss_mask_covers_exactly_the_model_turns(multiturn_run: tuple[RecordingTrainer, Path]) -> None:
    trainer, _ = multiturn_run
    tok = trainer.tokenizer
    checked = 0
    for results, batch in trainer.built:
        assert len(results) == len(batch) and not batch.is_expert.any()
        for i, r in enumerate(results):
            turns = r.tokens
            assert len(turns) >= 2, f"rollout {i} took {len(turns)} turn(s): {r.completion}"
            assert any(m.get("role") == "tool" for m in r.completion)
            length = int(batch.attention_mask[i].sum())
            ids = batch.input_ids[i, :length].tolist()
            # token-exact: the row is the first prompt, then each turn's sampled ids, with the
            # environment's tokens in between, and every later turn's prompt is a prefix of the row
            sampled: set[int] = set()
            for t in turns:
                start = len(t.prompt_ids)
                assert ids[:start] == list(t.prompt_ids), "a turn's prompt is not the row's prefix"
                assert ids[start:start + len(t.completion_ids)] == list(t.completion_ids)
                sampled.update(range(start, start + len(t.completion_ids)))
            assert length == len(turns[-1].prompt_ids) + len(turns[-1].completion_ids)
            # loss mask column c is the target token c + 1: on exactly the sampled positions
            trained = {c + 1 for c in batch.loss_mask[i].nonzero()[:, 0].tolist()}
            assert trained == sampled
            between = ids[len(turns[0].prompt_ids) + len(turns[0].completion_ids): len(turns[1].prompt_ids)]
            text = tok.decode(between, skip_special_tokens=False)
            assert "<tool_response>" in text and str(r.completion[1]["content"]) in text
            checked += 1
    assert checked >= 4


def test_the_benchmark_summarises_the_run(multiturn_run: tuple[RecordingTrainer, Path]) -> None:
    _, metrics = multiturn_run
    spec = importlib.util.spec_from_file_location("agentic_learning", ROOT / "benchmarks" / "agentic_learning.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    out = bench.summarize(rows, wall_s=12.5)
    for key in ("reward_first", "reward_last", "wall_s", "steps", "mean_turns_last", "tool_call_success_last",
                "targets_met"):
        assert key in out, key
    assert out["steps"] == 2 and out["wall_s"] == 12.5
    assert out["mean_turns_last"] >= 2.0  # every episode called the tool, then answered
    assert out["tool_call_success_last"] == pytest.approx(sum(r["rewards/tool_call_ran"] for r in rows) / 2)
    assert out["targets_met"] == (out["reward_first"] <= 0.2 and out["reward_last"] >= 0.8)
    json.dumps(out)
