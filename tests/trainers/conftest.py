"""Fixtures for running the GRPO trainer end to end on a tiny random model, on a CPU.

Runs use a small dense-reward environment (written to a temp dir and imported by name,
like any installed environment): a random tiny model almost never earns a reward in
``letter-repeat``, so its groups have equal rewards, zero advantages and zero gradients,
and a test could not tell "trained" from "did nothing". Here the reward is the mean code
point of the reply, which differs between samples, so every step has a learning signal.

Conftest modules are not importable by name (``--import-mode=importlib``), so helpers are
handed out as fixtures.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

from trainers.grpo.config import TrainConfig, load_config

if TYPE_CHECKING:  # the trainer is imported by the fixtures that run it, not by every test here
    from trainers.grpo.trainer import GRPOTrainer, TrainSummary

DENSE_ENV_ID = "vf-trainer-dense-env"
DENSE_ENV_SOURCE = '''\
"""Test environment: reward = mean code point of the reply / 127 (dense for a random model)."""
import asyncio

import verifiers as vf


def load_environment(num_examples: int = 16, score_delay_s: float = 0.0, broken: str = "", **kwargs):
    """``score_delay_s`` makes scoring slow, to keep a generation batch in flight; ``broken``
    adds a reward function that raises ("raises") or names an argument that does not exist
    ("misspelled"), as careless environments do, or makes the reward constant ("constant")."""

    async def mean_code_point(completion, answer):
        if score_delay_s:
            await asyncio.sleep(score_delay_s)
        text = "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
        return sum(ord(c) for c in text) / (127 * len(text)) if text else 0.0

    def exact(completion, answer):
        raise KeyError("content")

    def exact_typo(completion, answr):
        return 1.0

    def constant(completion):
        return 0.5

    funcs = [mean_code_point] + {"": [], "raises": [exact], "misspelled": [exact_typo]}.get(broken, [])
    if broken == "constant":  # every group's rewards equal: no learning signal at all
        funcs = [constant]
    rows = [{"question": f"Say {c}", "answer": c} for c in "abcdefghijklmnopqrstuvwxyz"[:num_examples]]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=funcs), **kwargs)
'''

# Small and fast: 2 prompts x 4 samples, 4 tokens each, one torch thread (the machine is shared).
TINY_SETTINGS: dict[str, Any] = {
    "env_id": DENSE_ENV_ID,
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_tokens": 4,
    "max_steps": 3,
    "learning_rate": 3e-3,
    "tiny_model": {"hidden_size": 32},
    "progress": False,
    "plot": False,
    "save_every": 0,
    "num_sample_completions": 0,
    "torch_threads": 1,
}


@dataclass
class Run:
    trainer: GRPOTrainer
    summary: TrainSummary
    rows: list[dict[str, Any]]


@pytest.fixture(autouse=True)
def _restore_torch_threads() -> Iterator[None]:
    """``torch_threads`` sets a process-wide value; give other tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def dense_env_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory holding the dense-reward environment module, on ``sys.path`` for the session."""
    root = tmp_path_factory.mktemp("envs")
    (root / f"{DENSE_ENV_ID.replace('-', '_')}.py").write_text(DENSE_ENV_SOURCE)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop(DENSE_ENV_ID.replace("-", "_"), None)


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny model (hidden 32) built once; runs copy nothing, they load it read-only."""
    pytest.importorskip("transformers")
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", TinyModelSpec(hidden_size=32))


@pytest.fixture
def train_config(dense_env_dir: Path, base_model_dir: Path) -> Callable[..., TrainConfig]:
    """``train_config(output_dir, **overrides)``: the tiny settings plus overrides, validated."""

    def make(output_dir: Path, **overrides: Any) -> TrainConfig:
        data = {**TINY_SETTINGS, "model": str(base_model_dir), "output_dir": str(output_dir), **overrides}
        return load_config(None, data)

    return make


@pytest.fixture
def generated_groups(train_config: Callable[..., TrainConfig], tmp_path: Path) -> Callable[..., tuple[Any, Any]]:
    """``generated_groups(**overrides)``: a set-up trainer (output in ``tmp_path/gen``) and one step's rollout groups.

    Generation is stopped afterwards, so the caller builds and trains batches by hand.
    """
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer

    def make(**overrides: Any) -> tuple[Any, Any]:
        trainer = GRPOTrainer(train_config(tmp_path / "gen", **overrides), console=Console(file=io.StringIO()))
        trainer.setup()
        try:
            groups, _, _ = trainer._take_batch()
        finally:
            trainer.sync.close()
            trainer.generator.close()
        return trainer, groups

    return make


@pytest.fixture
def generated_batch(generated_groups: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
    """``generated_batch(**overrides)``: `generated_groups`' trainer and the batch it builds from them."""

    def make(**overrides: Any) -> tuple[Any, Any]:
        trainer, groups = generated_groups(**overrides)
        batch, _ = trainer._build(groups)
        return trainer, batch

    return make


@pytest.fixture
def run_training() -> Callable[..., Run]:
    """``run_training(cfg, resume=False, trainer_cls=GRPOTrainer)``: train and read metrics.jsonl."""

    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer

    def run(cfg: TrainConfig, *, resume: str | bool = False, trainer_cls: type[GRPOTrainer] | None = None) -> Run:
        trainer = (trainer_cls or GRPOTrainer)(cfg, console=Console(file=io.StringIO(), width=120))
        summary = trainer.train(resume=resume)
        return Run(trainer, summary, read_rows(Path(cfg.output_dir) / "metrics.jsonl"))

    return run


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def metrics_rows() -> Callable[[Path], list[dict[str, Any]]]:
    return read_rows


@pytest.fixture(scope="session")
def vf_train() -> list[str]:
    """The ``vf-train`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "vf-train"
    if script.is_file():
        return [str(script)]
    found = shutil.which("vf-train")
    if found is None:
        pytest.skip("vf-train is not installed: pip install -e . --no-deps")
    return [found]


@pytest.fixture
def subprocess_env(dense_env_dir: Path) -> dict[str, str]:
    """Environment for child processes: the dense env importable, quiet progress bars."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(dense_env_dir), env.get("PYTHONPATH", "")) if p)
    env["TQDM_DISABLE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@pytest.fixture(scope="session")
def restore_environ() -> Callable[[dict[str, str | None]], None]:
    """``restore_environ(saved)``: put back environment variables saved as ``{name: value or None}``."""

    def restore(saved: dict[str, str | None]) -> None:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    return restore
