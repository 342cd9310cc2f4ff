"""summarize / render_summary: the numbers vf-eval prints, checked against independent computations."""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest
from rich.console import Console

from verifiers.errors import ConfigError
from verifiers.eval.summary import EvalSummary, pass_at_k, render_summary, summarize
from verifiers.types import RolloutError, RolloutResult, Timing, Usage


def _fixtures() -> ModuleType:
    name = "vf_tests_eval_fixtures_b"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_fixtures_b.py"))
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


fx = _fixtures()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory):
    return fx.build_run(tmp_path_factory.mktemp("out"))


def result(example_id: int, idx: int, reward: float, **kw) -> RolloutResult:
    return RolloutResult(
        example_id=example_id,
        group_id=example_id,
        rollout_index=idx,
        prompt=[{"role": "user", "content": f"q{example_id}"}],
        completion=[{"role": "assistant", "content": "a"}],
        reward=reward,
        **kw,
    )


def brute_pass_at_k(flags: list[bool], k: int) -> float:
    """Share of the k-subsets of the rollouts that contain a correct one (the definition of pass@k)."""
    subsets = list(itertools.combinations(flags, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_the_subset_definition() -> None:
    for n in range(1, 7):
        for c in range(n + 1):
            flags = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(flags, k)), (n, c, k)
    with pytest.raises(ConfigError, match="k <= n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ConfigError, match="c <= n"):
        pass_at_k(3, 4, 1)


def test_hand_computed_vector() -> None:
    rewards = {0: [1.0, 0.0, 0.0], 1: [1.0, 1.0, 0.5]}
    results = [result(e, i, r, metrics={"m": r * 2}) for e, rs in rewards.items() for i, r in enumerate(rs)]
    s = summarize(results, 3)
    flat = [r for rs in rewards.values() for r in rs]
    assert s.n == 6 and s.n_examples == 2 and s.rollouts_per_example == 3
    assert s.reward is not None
    assert s.reward.mean == pytest.approx(statistics.fmean(flat))
    assert s.reward.std == pytest.approx(statistics.pstdev(flat))  # population std, as documented
    assert s.std_kind == "population"
    assert s.metrics["m"].mean == pytest.approx(2 * statistics.fmean(flat))
    # example 0: 1 of 3 correct; example 1: 2 of 3 (0.5 is not correct at the default threshold)
    assert s.pass_at_k == pytest.approx({1: (1 / 3 + 2 / 3) / 2, 2: (2 / 3 + 1.0) / 2, 3: 1.0})
    assert s.pass_at_k_examples == {1: 2, 2: 2, 3: 2}
    # A lower threshold counts the 0.5 rollout as correct.
    low = summarize(results, 3, pass_threshold=0.5)
    assert low.pass_at_k[1] == pytest.approx((1 / 3 + 1.0) / 2)


def test_pass_at_k_skips_examples_with_too_few_rollouts() -> None:
    results = [result(0, 0, 1.0), result(0, 1, 0.0), result(0, 2, 0.0), result(1, 0, 0.0), result(1, 1, 1.0)]
    s = summarize(results, 3)
    assert s.pass_at_k_examples == {1: 2, 2: 2, 3: 1}
    assert s.pass_at_k[3] == pytest.approx(1.0)  # only example 0, which has a correct rollout
    assert s.pass_at_k[2] == pytest.approx((2 / 3 + 1.0) / 2)
    # Without r the largest group size is used.
    assert summarize(results).rollouts_per_example == 3


def test_errors_stop_reasons_timing_and_tokens() -> None:
    err = RolloutError(type="ServerError", message="HTTP 500", where="model")
    bad_judge = RolloutError(type="JudgeError", message="judge down", where="reward:judge")
    results = [
        result(0, 0, 0.0, error=err, stop_reason="error"),
        result(0, 1, 1.0, scoring_errors=[bad_judge, bad_judge]),
        result(1, 0, 1.0, stop_reason="length", is_truncated=True),
        result(1, 1, 0.0, error=RolloutError(type="RolloutTimeoutError", message="t"), stop_reason="timeout"),
    ]
    gen = [0.5, 1.0, 2.0, 4.0]
    for r, g in zip(results, gen, strict=True):
        r.timing = Timing(generation_s=g, scoring_s=g / 10, total_s=g * 1.1)
        r.usage = Usage(prompt_tokens=int(g * 10), completion_tokens=int(g * 100))
    s = summarize(results, 2, wall_s=2.0)
    assert s.n_errored == 2
    assert s.errors_by_type == {"ServerError": 1, "RolloutTimeoutError": 1}
    assert s.n_with_scoring_errors == 1
    assert s.scoring_errors_by_type == {"JudgeError": 2}
    assert s.scoring_errors_by_where == {"reward:judge": 2}
    assert s.stop_reasons == {"error": 1, "completed": 1, "length": 1, "timeout": 1}
    assert s.n_truncated == 1
    assert s.reward_without_errors is not None and s.reward_without_errors.mean == pytest.approx(1.0)
    assert s.timing.generation_s.mean == pytest.approx(statistics.fmean(gen))
    assert s.timing.generation_s.p50 == pytest.approx(statistics.median(gen))
    assert s.timing.generation_s.p95 == pytest.approx(statistics.quantiles(gen, n=20, method="inclusive")[18])
    assert s.timing.generation_s.max == 4.0
    assert s.timing.wall_s == 2.0 and s.timing.rollouts_per_s == pytest.approx(2.0)
    assert s.tokens.prompt_total == sum(int(g * 10) for g in gen)
    assert s.tokens.completion_mean == pytest.approx(sum(int(g * 100) for g in gen) / 4)


def test_accepts_results_jsonl_dicts_and_round_trips_as_json() -> None:
    results = [result(0, i, float(i % 2), metrics={"x": 0.25 * i}) for i in range(4)]
    rows = [json.loads(r.model_dump_json()) for r in results]
    from_dicts = summarize(rows, 4)
    assert from_dicts == summarize(results, 4)
    again = EvalSummary.model_validate_json(from_dicts.model_dump_json())
    assert again.pass_at_k == from_dicts.pass_at_k
    with pytest.raises(ConfigError, match="RolloutResult objects or dicts"):
        summarize([42], 1)  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="rollouts_per_example"):
        summarize(results, 0)


def test_several_tasks_get_their_own_reward() -> None:
    results = [result(0, 0, 1.0, task="math"), result(1, 0, 0.0, task="code"), result(2, 0, 1.0, task="math")]
    s = summarize(results, 1)
    assert set(s.reward_by_task) == {"math", "code"}
    assert s.reward_by_task["math"].mean == 1.0 and s.reward_by_task["code"].n == 1
    assert summarize(results[:1], 1).reward_by_task == {}  # one task: nothing extra


def test_empty_run() -> None:
    s = summarize([], 3)
    assert s.n == 0 and s.reward is None and s.pass_at_k == {}
    buf = io.StringIO()
    render_summary(s, Console(file=buf, width=100))
    assert "n/a" in buf.getvalue()


def test_real_run_agrees_with_the_saved_metadata(real_run) -> None:
    """The summary of a run made by run_eval matches what the run store wrote independently."""
    meta = json.loads((real_run.run_dir / "metadata.json").read_text())
    s = summarize(real_run.results, meta["rollouts_per_example"], wall_s=meta["duration_s"])
    assert s.n == meta["counts"]["saved"] == 12
    assert s.reward is not None and s.reward.mean == pytest.approx(meta["avg_reward"])
    assert {k: v.mean for k, v in s.metrics.items()} == pytest.approx(meta["avg_metrics"])
    assert s.errors_by_type == meta["errors_by_type"]
    assert s.scoring_errors_by_where == {"reward:fragile": 3}  # the example whose answer is "2"
    by_example: dict[int, list[bool]] = {}
    for r in real_run.results:
        by_example.setdefault(r.example_id, []).append(r.reward >= 1.0)
    for k in (1, 2, 3):
        expected = statistics.fmean(brute_pass_at_k(flags, k) for flags in by_example.values())
        assert s.pass_at_k[k] == pytest.approx(expected)
    assert s.tokens.prompt_total == sum(r.usage.prompt_tokens for r in real_run.results) > 0


def test_render_summary_prints_numbers_and_names_literally(real_run) -> None:
    results = [
        r.model_copy(update={"metrics": {**r.metrics, "[bold]odd[/bold]": 1.0}}) for r in real_run.results
    ]
    s = summarize(results, 3)
    buf = io.StringIO()
    render_summary(s, Console(file=buf, width=120, color_system=None))
    text = buf.getvalue()
    assert s.reward is not None
    assert f"{s.reward.mean:.4f} ± {s.reward.std:.4f}" in text
    assert "[bold]odd[/bold]" in text  # a metric name is text, not markup
    assert "ServerError" in text and "reward:fragile" in text
    for k, v in s.pass_at_k.items():
        assert f"{v:.4f}" in text, k
    assert "population" in text
