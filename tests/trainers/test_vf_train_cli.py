"""``vf-train`` as users run it: a real process on the Quickstart config."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "configs" / "quickstart.toml"


def test_one_step_prints_the_summary_and_writes_the_run(
    tmp_path: Path, vf_train: list[str], subprocess_env: dict[str, str]
) -> None:
    out_dir = tmp_path / "run"
    args = [
        str(QUICKSTART), "--max_steps", "1", "--output_dir", str(out_dir), "--prompts_per_step", "2",
        "--num_generations", "2", "--tiny_model.hidden_size=32", "--progress", "false", "--torch_threads", "1",
    ]
    done = subprocess.run([*vf_train, *args], capture_output=True, text=True, env=subprocess_env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 1 and summary["interrupted"] is False
    assert Path(summary["output_dir"]) == out_dir
    saved = json.loads((out_dir / "config.json").read_text())
    assert saved["env_id"] == "letter-repeat" and saved["max_steps"] == 1  # the TOML plus overrides
    assert saved["tiny_model"]["hidden_size"] == 32
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert (out_dir / "checkpoints" / "step_0000001" / "state.pt").is_file()
    assert (out_dir / "final_model" / "config.json").is_file()
    assert (out_dir / "curves.png").stat().st_size > 0  # plot = true by default


def test_unknown_key_exits_2_with_the_key_on_stderr(vf_train: list[str], subprocess_env: dict[str, str]) -> None:
    done = subprocess.run([*vf_train, str(QUICKSTART), "--learning_rat", "1e-3"], capture_output=True, text=True,
                          env=subprocess_env, timeout=120)
    assert done.returncode == 2
    assert "unknown key 'learning_rat'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_usage(vf_train: list[str], subprocess_env: dict[str, str]) -> None:
    bare = subprocess.run(vf_train, capture_output=True, text=True, env=subprocess_env, timeout=60)
    assert bare.returncode == 2 and "usage: vf-train" in bare.stdout
    helped = subprocess.run([*vf_train, "--help"], capture_output=True, text=True, env=subprocess_env, timeout=60)
    assert helped.returncode == 0 and "usage: vf-train" in helped.stdout
