"""`benchmarks/examples_learn.py`: the target lines of the example configs, their windows, and the JSON line.

The training runs themselves are the benchmark (minutes); here the parser is checked on lines
that must and must not read, every config the benchmark would run is checked to carry exactly
one readable target, and ``main`` is run with the training replaced, so the last stdout line's
shape and the met / not met verdicts are fixed without training anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def bench(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("examples_learn")


def test_a_target_line_reads_into_conditions(bench: Any) -> None:
    t = bench.parse_target("first10 <= 0.2 and last10% >= 0.8")
    assert [(c.end, c.n, c.percent, c.op, c.value) for c in t.conditions] == [
        ("first", 10, False, "<=", 0.2), ("last", 10, True, ">=", 0.8)]
    assert str(t) == "first10 <= 0.2 and last10% >= 0.8"
    assert str(bench.parse_target("last5>.75")) == "last5 > 0.75"
    for bad in ("last10 => 0.8", "final10 >= 0.8", "last10% >= high", "last0 >= 0.8", "last150% >= 0.8",
                "last10% >= 0.8 or first10 <= 0.2", ""):
        with pytest.raises(ValueError, match="cannot read target condition"):
            bench.parse_target(bad)


def test_windows_count_steps_or_a_share_rounded_up(bench: Any) -> None:
    rewards = [0.0] * 9 + [1.0] * 6  # 15 steps: 10% of them is 1.5 steps, rounded up to 2
    last10pct = bench.parse_target("last10% >= 1.0").conditions[0]
    assert last10pct.window(rewards) == [1.0, 1.0]
    assert bench.parse_target("first3 <= 0").conditions[0].window(rewards) == [0.0, 0.0, 0.0]
    assert bench.parse_target("last1% >= 0").conditions[0].window(rewards) == [1.0]  # at least one step
    assert bench.parse_target("first10 <= 0.0 and last10% >= 1.0").met(rewards) is False  # first10 has a 1.0
    assert bench.parse_target("first9 <= 0.0 and last10% >= 1.0").met(rewards) is True
    assert bench.parse_target("last10% >= 0.0").met([]) is False  # a run that logged nothing met nothing


def test_every_config_the_benchmark_runs_carries_one_target(bench: Any) -> None:
    names = bench.eligible(None)
    assert set(names) == {"quickstart", "dapo", "mix", "lora_kl"}
    configs = {p.stem for p in bench.CONFIGS.glob("*.toml")}
    assert set(bench.EXCLUDED) | set(bench.SLOW) <= configs  # the exclusions name shipped configs
    assert configs == set(names) | set(bench.EXCLUDED) | set(bench.SLOW)  # a new config is decided on
    for name in [*names, *bench.SLOW]:
        target = bench.config_target(bench.CONFIGS / f"{name}.toml")
        assert any(c.end == "last" and c.op in (">=", ">") for c in target.conditions), name
    assert bench.eligible(["agentic", "mix", "agentic"]) == ["agentic", "mix"]
    with pytest.raises(SystemExit, match="vLLM"):
        bench.eligible(["quickstart_vllm"])
    with pytest.raises(SystemExit, match=r"no examples/configs/nope\.toml"):
        bench.eligible(["nope"])


def test_a_config_without_or_with_two_target_lines_is_an_error(bench: Any, tmp_path: Path) -> None:
    none = tmp_path / "none.toml"
    none.write_text("# the reward rises, we hope\nmodel = 'tiny'\n")
    two = tmp_path / "two.toml"
    two.write_text("# target: last10% >= 0.8\n#   Target : first10 <= 0.2\nmodel = 'tiny'\n")
    for path in (none, two):
        with pytest.raises(ValueError, match=r"expected one '# target: \.\.\.' line"):
            bench.config_target(path)


def test_skipped_steps_count_with_their_reward(bench: Any, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 1.0, "skipped": 1.0}, {"step": 3, "loss": 0.1}]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert bench.rewards_of(metrics) == [0.5, 1.0]
    assert bench.rewards_of(tmp_path / "missing.jsonl") == []


def test_main_prints_one_row_per_run_and_the_json_last(bench: Any, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    curves = {("mix", 0): [0.0] * 10 + [1.0] * 10, ("mix", 1): [0.0] * 20, ("dapo", 0): [0.0] * 10 + [1.0] * 10}
    calls = []

    def fake_train(name: str, seed: int, out: Path, max_steps: int | None, timeout: float,
                   threads: int | None, precision: str | None = None,
                   overrides: tuple[str, ...] = ()) -> tuple[list[float], float, str | None]:
        calls.append((name, seed, max_steps))
        return curves.get((name, seed), [1.0] * 20), 2.5, "exit 1: boom" if (name, seed) == ("dapo", 1) else None

    monkeypatch.setattr(bench, "train", fake_train)
    code = bench.main(["--configs", "mix", "dapo", "--seeds", "2", "--max-steps", "20"])
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert code == 1 and calls == [("mix", 0, 20), ("mix", 1, 20), ("dapo", 0, 20), ("dapo", 1, 20)]
    assert len(lines) == 7 and "NOT MET" in lines[1] and "boom" in lines[3]
    assert lines[4] == "met per config: mix 1/2, dapo 1/2" and out["met_per_config"] == {"mix": "1/2", "dapo": "1/2"}
    assert [(r["config"], r["seed"], r["met"]) for r in out["runs"]] == [
        ("mix", 0, True), ("mix", 1, False), ("dapo", 0, True), ("dapo", 1, False)]
    first = out["runs"][0]
    assert (first["first"], first["last"], first["seconds"], first["steps"]) == (0.0, 1.0, 2.5, 20)
    assert first["target"] == "first10 <= 0.2 and last10% >= 0.8"
    assert out["runs"][3]["error"] == "exit 1: boom"  # a failed run is not met, even with good rewards
    assert (out["targets_met"], out["all_met"], out["max_steps"]) == ("2/4", False, 20)
    # the worst seed: the lowest last-10% reward, and a failed run below any reward it logged
    assert out["worst_per_config"] == {"mix": {"seed": 1, "last": 0.0},
                                       "dapo": {"seed": 1, "last": 1.0, "error": "exit 1: boom"}}
    assert lines[5] == "worst seed per config: mix seed 1 0.0, dapo seed 1 1.0"


def test_every_config_runs_ten_seeds_by_default_from_the_first_seed_given(
        bench: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def fake_train(name: str, seed: int, out: Path, max_steps: int | None, timeout: float,
                   threads: int | None, precision: str | None = None,
                   overrides: tuple[str, ...] = ()) -> tuple[list[float], float, str | None]:
        calls.append((name, seed, precision, *overrides))
        return [0.0] * 10 + [1.0] * 10, 1.0, None

    monkeypatch.setattr(bench, "train", fake_train)
    assert bench.main(["--configs", "quickstart", "mix", "--mixed-precision", "bf16"]) == 0
    assert calls == [("quickstart", s, "bf16") for s in range(10)] + [("mix", s, "bf16") for s in range(10)]
    calls.clear()
    assert bench.main(["--configs", "quickstart", "--seeds", "2", "--first-seed", "10", "--",
                       "--num_generations", "16"]) == 0
    assert calls == [("quickstart", 10, None, "--num_generations", "16"),
                     ("quickstart", 11, None, "--num_generations", "16")]
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["met_per_config"] == {"quickstart": "2/2"} and out["mixed_precision"] is None
    assert out["worst_per_config"] == {"quickstart": {"seed": 10, "last": 1.0}}
