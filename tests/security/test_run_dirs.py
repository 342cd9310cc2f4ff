"""vf-train writes only where it may: new or empty directories, its own runs, never a model.

Before the fix it wrote into any output_dir: a model directory (its config.json replaced),
the repository root, or an earlier run's directory (metrics.jsonl truncated, checkpoints of
two runs mixed) without --resume; `learning_rate = inf` trained NaN weights and exited 0,
`num_generations = 1` trained with zero gradient forever, a truncated newest checkpoint had
no fallback, and a full disk left a partial checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainers.grpo.cli import main
from trainers.grpo.run.checkpoint import load_latest, save_checkpoint
from trainers.grpo.run.outdir import MARKER
from verifiers.models.tiny import TinyModelSpec, save_tiny_model

REPO = Path(__file__).resolve().parents[2]
QUICK = [str(REPO / "examples" / "configs" / "quickstart.toml"), "--max_steps", "1", "--save_every", "0",
         "--progress", "false", "--plot", "false", "--num_sample_completions", "0"]


def train(out: Path, *extra: str) -> int:
    return main([*QUICK, "--output_dir", str(out), *extra])


def test_a_model_directory_is_never_written_into(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = save_tiny_model(tmp_path / "model", TinyModelSpec())
    before = (model / "config.json").read_bytes()
    assert train(model) == 2
    assert train(model, "--overwrite") == 2
    assert "holds a saved model" in capsys.readouterr().err
    assert (model / "config.json").read_bytes() == before and not (model / MARKER).exists()


def test_a_foreign_non_empty_directory_needs_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("mine")
    assert train(repo) == 2
    assert "not empty and was not created by vf-train" in capsys.readouterr().err
    assert sorted(p.name for p in repo.iterdir()) == ["README.md"]


def test_an_earlier_run_needs_resume_or_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert train(out) == 0 and (out / MARKER).is_file()
    metrics = (out / "metrics.jsonl").read_text()
    assert train(out) == 2
    assert "holds an earlier vf-train run: pass --resume" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == metrics  # untouched
    (out / "metrics.jsonl").write_text("from the earlier run\n")
    assert train(out, "--overwrite") == 0
    assert "from the earlier run" not in (out / "metrics.jsonl").read_text()  # the earlier run's files were replaced


@pytest.mark.parametrize(("override", "message"), [
    (["--learning_rate", "inf"], "learning_rate"),
    (["--num_generations", "1"], "num_generations = 1"),
])
def test_settings_that_cannot_train_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                override: list[str], message: str) -> None:
    assert train(tmp_path / "run", *override) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        save_checkpoint(root, step, {"step": step}, keep=3)
    newest = root / "step_0000002" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:40])
    said: list[str] = []
    found = load_latest(root, said.append)
    assert found is not None and found[1]["step"] == 1
    assert "step_0000002" in said[0] and "cannot be read" in said[0]


def test_a_full_disk_leaves_no_partial_checkpoint(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the write fail as a full disk does (EFBIG instead of ENOSPC)."""
    code = (
        "import resource, signal, sys, torch\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "from pathlib import Path\n"
        "from trainers.grpo.run.checkpoint import save_checkpoint\n"
        "from verifiers.errors import ConfigError\n"
        "root = Path(sys.argv[1])\n"
        "save_checkpoint(root, 1, {'w': torch.zeros(4)}, keep=3)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        "    save_checkpoint(root, 2, {'w': torch.zeros(100_000)}, keep=3)\n"
        "except ConfigError as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert "REFUSED" in proc.stdout and "could not be written" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_0000001"]  # no .tmp, no step 2
    assert json.dumps(sorted(p.name for p in (tmp_path / "ckpt" / "step_0000001").iterdir())) == '["state.pt"]'
