"""vf-train on SmolLM2-135M-Instruct: the sampler-versus-learner logprob gap is reported and tiny.

The embedded engine shares the learner's float32 weights, so the logprobs it reports for the
tokens it sampled (its own decoding step, KV cache, batch of rows) must equal the learner's
(a padded training forward over prompt + completion) to float32 rounding, on 30 layers and a
49,152-token vocabulary as on the tiny model. Two steps: the second batch is sampled after the
first optimizer step, through the engine's rebuilt packed copy of the changed weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GAP_TOL = 1e-4  # float32
ENV_ID = "vf-real-model-dense-env"
# Reward = mean code point of the reply: differs between samples, so every group has a learning
# signal (an all-equal group would have zero advantages and a step with nothing to compare).
ENV_SOURCE = '''\
import verifiers as vf


def load_environment(**kwargs):
    def mean_code_point(completion):
        text = "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
        return sum(ord(c) for c in text) / (127 * len(text)) if text else 0.0

    rows = [{"question": q, "answer": ""} for q in ("Name a fruit.", "Say something kind.")]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[mean_code_point]), **kwargs)
'''


def test_two_steps_report_a_sampler_gap_within_float32_rounding(real_model_dir: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "envs"
    env_dir.mkdir()
    (env_dir / f"{ENV_ID.replace('-', '_')}.py").write_text(ENV_SOURCE)
    out_dir = tmp_path / "run"
    args = ["--model", str(real_model_dir), "--env_id", ENV_ID, "--output_dir", str(out_dir), "--max_steps", "2",
            "--prompts_per_step", "2", "--num_generations", "2", "--max_tokens", "16", "--temperature", "1.0",
            "--learning_rate", "1e-5", "--dtype", "float32", "--torch_threads", "1", "--engine_max_batch_size", "4",
            "--progress", "false", "--plot", "false", "--num_sample_completions", "0"]
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(env_dir), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-m", "trainers.grpo.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        gap = {k: v for k, v in row.items() if k.startswith("sampler/")}
        assert set(gap) >= {"sampler/logp_diff_mean", "sampler/logp_diff_max", "sampler/ratio_min",
                            "sampler/ratio_max"}, sorted(row)
        print(f"step {row['step']}: " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(gap.items())))
        assert 0 <= row["sampler/logp_diff_mean"] <= row["sampler/logp_diff_max"] <= GAP_TOL, gap
        assert row["completions/mean_length"] > 0
    assert rows[0]["grad_norm"] > 0  # the first step changed the weights the second batch was sampled from
    assert [r["policy_version"] for r in rows] == [1.0, 2.0]
