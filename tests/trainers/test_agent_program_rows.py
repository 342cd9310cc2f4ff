"""vf-train through an agent program: the rows the learner gets are the program's recorded model calls.

`agent-lookup` runs environments/agent_lookup/agent_lookup/lookup_agent.py (the official openai client, nothing from
verifiers) as a subprocess per rollout, pointed at a gateway session answered by the trainer's
embedded engine. A tiny model taught one correct episode makes the program call ``lookup`` and
then answer, so each rollout is two recorded calls with the program's tool result between them.
Each training row must be exactly those calls' token ids (the first call's prompt, then each
call's sampled ids, the program's turn in between), with the loss on the sampled ids only, and
each call's prompt ids must be the chat template of the messages the program sent.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trainers.grpo.config import load_config
from trainers.grpo.trainer import GRPOTrainer

pytestmark = pytest.mark.slow  # 9-23 s on 2 shared cores (load 7-9): 8 program starts, each importing openai

ROOT = Path(__file__).resolve().parents[2]
ENV_ROOT = ROOT / "environments" / "agent_lookup"


class RecordingTrainer(GRPOTrainer):
    """Keeps every batch the learner built, with the rollouts it came from."""

    def _build(self, groups: list[list[Any]]) -> Any:
        batch, metrics = super()._build(groups)
        self.built = [*getattr(self, "built", []), ([r for g in groups for r in g], batch)]
        return batch, metrics


@pytest.fixture(scope="module")
def program_run(tmp_path_factory: pytest.TempPathFactory, teach_conversation: Any) -> RecordingTrainer:
    pytest.importorskip("transformers")
    from rich.console import Console

    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    sys.path.insert(0, str(ENV_ROOT))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from agent_lookup import program_tools

        # One key per table: every task is "look up A", so the taught call is right for each of them.
        env_args = {"keys": "A", "num_keys": 1, "digits": 2, "num_train_examples": 4, "num_eval_examples": 0}
        root = tmp_path_factory.mktemp("agent_program")
        model_dir = save_tiny_model(root / "model", TinyModelSpec(hidden_size=32, tool_format="signature"))
        call = {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "A"}'}}
        teach_conversation(model_dir, [
            {"role": "user", "content": "look up A"}, {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": "42"}, {"role": "assistant", "content": "42"}],
            program_tools(), lr=1e-2, max_steps=400, tolerance=1e-2)  # 3e-2 oscillated (0.006 to 0.24) on another CPU
        cfg = load_config(None, {
            "model": str(model_dir), "env_id": "agent-lookup", "env_args": env_args, "temperature": 0.5,
            "output_dir": str(root / "run"), "algorithm": "grpo", "prompts_per_step": 2, "num_generations": 2,
            "max_steps": 2, "max_tokens": 56, "learning_rate": 1e-4, "progress": False, "plot": False,
            "save_every": 0, "num_sample_completions": 0, "torch_threads": 1,
        })
        trainer = RecordingTrainer(cfg, console=Console(file=io.StringIO()))
        trainer.train()
    finally:
        sys.path.remove(str(ENV_ROOT))
        torch.set_num_threads(threads)
    return trainer


def test_training_rows_are_the_programs_recorded_calls(program_run: RecordingTrainer) -> None:
    from verifiers.data.templating import apply_chat_template

    tok = program_run.tokenizer
    checked = 0
    for results, batch in program_run.built:
        assert len(results) == len(batch) == 4 and not batch.is_expert.any()
        for i, r in enumerate(results):
            calls = r.state["agent"]["calls"]
            assert r.state["agent"]["exit_code"] == 0, r.state["agent"]["stderr"]
            assert len(calls) == 2 == len(r.tokens), f"rollout {i}: {r.completion}"
            assert [c.tokens for c in calls] == list(r.tokens)  # the rollout's tokens are the gateway's record
            for c in calls:  # what the engine was sent is what the program sent, rendered by the template
                rendered = apply_chat_template(tok, c.messages, tools=c.tools, tokenize=True)
                assert list(c.tokens.prompt_ids) == list(rendered)
            length = int(batch.attention_mask[i].sum())
            ids = batch.input_ids[i, :length].tolist()
            sampled: set[int] = set()
            for c in calls:
                start = len(c.tokens.prompt_ids)
                assert ids[:start] == list(c.tokens.prompt_ids), "a call's prompt is not the row's prefix"
                assert ids[start:start + len(c.tokens.completion_ids)] == list(c.tokens.completion_ids)
                sampled.update(range(start, start + len(c.tokens.completion_ids)))
            assert length == len(calls[-1].tokens.prompt_ids) + len(calls[-1].tokens.completion_ids)
            trained = {col + 1 for col in batch.loss_mask[i].nonzero()[:, 0].tolist()}
            assert trained == sampled  # the loss is on the sampled ids, never on the program's turn
            first = calls[0].tokens
            between = tok.decode(ids[len(first.prompt_ids) + len(first.completion_ids):len(calls[1].tokens.prompt_ids)],
                                 skip_special_tokens=False)
            assert "<tool_response>" in between and r.completion[1]["content"] in between
            assert float(r.reward) == float(r.state["agent"]["stdout"].strip() == r.answer)
            checked += 1
    assert checked == 8


def test_the_benchmark_summarises_the_run(program_run: RecordingTrainer) -> None:
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("agent_learning", ROOT / "benchmarks" / "agent_learning.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = [json.loads(line) for line in (program_run.out / "metrics.jsonl").read_text().splitlines()]
    out = bench.summarize(rows, wall_s=12.5, reward_first=0.0, rows_per_step=4)
    assert list(out)[:7] == ["reward_first", "reward_after_warmup", "reward_last", "wall_s", "calls_per_rollout",
                             "rows_per_rollout", "steps"]
    assert out["reward_after_warmup"] == pytest.approx(rows[0]["reward"])  # step 1: before any RL update
    assert out["calls_per_rollout"] == 2.0 and out["rows_per_rollout"] == 1.0  # one token-exact row a rollout
    assert out["reward_last"] == pytest.approx(sum(r["reward"] for r in rows) / 2)
    assert out["targets_met"] == (out["reward_last"] >= 0.8)
    json.dumps(out)
    # agent_program_rl.toml's targets bound the reward after the warm-up instead of the untrained one
    rl = bench.summarize(rows, wall_s=12.5, reward_first=1.0, rows_per_step=4,
                         targets=bench.TARGETS_BY_CONFIG["agent_program_rl.toml"])
    assert rl["targets_met"] == (rl["reward_after_warmup"] <= 0.4 and rl["reward_last"] >= 0.8)
    assert bench._config(["--seed", "1"]) == (bench.CONFIG, ["--seed", "1"])
    config, rest = bench._config(["--config", "examples/configs/agent_program_rl.toml", "--seed", "1"])
    assert config.name == "agent_program_rl.toml" and config.is_file() and rest == ["--seed", "1"]
