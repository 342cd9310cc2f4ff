"""Every example config learns: each runs, as shipped, for a short budget and its reward must rise.

A config that cannot learn (a masked-out signal, adapters that cannot move the output) looks like
a working run until someone stares at its curve; this catches it in CI. Each run is the shipped
file with only ``max_steps``, the output directory and quiet output overridden, so the
algorithm, model, learning rate and batch are exactly what a user gets. (``quickstart_vllm.toml``
needs a vLLM server and is trained in ``tests/vllm``; ``agentic.toml`` starts with a 1,000-step SFT
warm-up and shows its first rewards after about 80 RL steps, 2 to 3 minutes of CI: its warm-up is
tested in ``test_sft_warmup.py``, its two-turn rows in ``test_multiturn_rows.py`` and its learning by
``benchmarks/agentic_learning.py``.)
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# quickstart_vllm needs a vLLM server (tests/vllm); quickstart_ray starts a Ray cluster and is measured
# by benchmarks/scale.py --learn (its samples equal the in-process ones: tests/trainers/test_ray.py);
# agentic is measured by benchmarks/agentic_learning.py (minutes per run); agent_program starts an agent
# program per rollout after a 700-step warm-up that already solves the task (benchmarks/agent_learning.py;
# its rows are tested in test_agent_program_rows.py, its warm-up phases in test_sft_warmup.py).
SKIPPED = {"quickstart_vllm", "quickstart_ray", "agentic", "agent_program"}
CONFIGS = [pytest.param(p, id=p.stem) for p in sorted((ROOT / "examples" / "configs").glob("*.toml"))
           if p.stem not in SKIPPED]
STEPS = 60
WINDOW = 10


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_the_reward_rises(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from rich.console import Console

    from trainers.grpo.config import load_config
    from trainers.grpo.trainer import GRPOTrainer

    monkeypatch.chdir(ROOT)  # configs name their data files relative to the repository
    cfg = load_config(config, ["--max_steps", str(STEPS), "--output_dir", str(tmp_path / "run"),
                               "--plot", "false", "--num_sample_completions", "0", "--save_every", "0",
                               "--report_to", '["jsonl"]'])
    GRPOTrainer(cfg, console=Console(file=io.StringIO())).train()
    rewards = [json.loads(line)["reward"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first, last = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    assert last >= first + 0.05, f"{config.name}: reward {first:.3f} over the first {WINDOW} steps, {last:.3f} over the last"
