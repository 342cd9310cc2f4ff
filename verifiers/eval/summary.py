"""Aggregate statistics of an evaluation run, and their rendering as rich tables.

`summarize` turns the rollouts of a run (live `RolloutResult`s, or the dicts read
back from results.jsonl) into one `EvalSummary`: the numbers vf-eval prints at the
end of a run, the viewer shows for a saved run and the HTML report embeds. Keeping
one function for all three means they never disagree.

Conventions, stated once:

- Standard deviations are *population* standard deviations (divide by n), as
  upstream verifiers prints them; they describe the rollouts at hand, not an
  estimate for a larger population.
- Rollouts that ended with an error still count in the reward mean (their reward
  is 0, exactly as the rubric recorded it); ``reward_without_errors`` shows the
  mean over the rollouts that finished, so infrastructure failures cannot hide in
  a low score.
- pass@k uses the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` per example (n
  rollouts of which c are correct, i.e. reward >= ``pass_threshold``), averaged
  over the examples that have at least k rollouts.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table

from verifiers.errors import ConfigError
from verifiers.terminal import plain_text
from verifiers.types import RolloutResult

__all__ = [
    "DEFAULT_PASS_THRESHOLD",
    "EvalSummary",
    "Stat",
    "TimingStat",
    "TimingSummary",
    "TokenSummary",
    "as_results",
    "fmt_stat",
    "pass_at_k",
    "render_summary",
    "summarize",
]

DEFAULT_PASS_THRESHOLD = 1.0 - 1e-9
"""A rollout is "correct" for pass@k when its reward is at least this (i.e. reward 1.0, allowing rounding)."""


class Stat(BaseModel):
    """Mean and population standard deviation of ``n`` values."""

    mean: float
    std: float
    n: int


class TimingStat(BaseModel):
    """Mean, median and 95th percentile (linear interpolation) of per-rollout seconds."""

    mean: float = 0.0
    p50: float = 0.0
    p95: float = 0.0
    max: float = 0.0


class TimingSummary(BaseModel):
    generation_s: TimingStat = Field(default_factory=TimingStat)
    scoring_s: TimingStat = Field(default_factory=TimingStat)
    total_s: TimingStat = Field(default_factory=TimingStat)
    wall_s: float | None = None
    """Wall-clock seconds of the whole run, when the caller knows it (metadata ``duration_s``)."""
    rollouts_per_s: float | None = None


class TokenSummary(BaseModel):
    """Token usage as reported by the server (``usage`` of every model call, summed per rollout)."""

    prompt_total: int = 0
    completion_total: int = 0
    prompt_mean: float = 0.0
    completion_mean: float = 0.0
    follow_up_calls: int = 0
    """Agent-program calls that extended an earlier call of their rollout (`TurnTokens.follow_up`)."""
    token_in_share: float | None = None
    """Share of those that went token-in, i.e. continued the earlier call's exact ids (None: no follow-ups)."""


class EvalSummary(BaseModel):
    """Everything vf-eval reports about a run. Serialisable (``model_dump(mode="json")``)."""

    n: int
    """Number of rollouts summarised."""
    n_examples: int
    rollouts_per_example: int
    std_kind: Literal["population"] = "population"
    reward: Stat | None = None
    """None when there are no rollouts."""
    reward_without_errors: Stat | None = None
    """Reward over the rollouts that did not end with an error (None if all errored)."""
    reward_by_task: dict[str, Stat] = Field(default_factory=dict)
    """Only filled when the run has more than one task (EnvGroup)."""
    metrics: dict[str, Stat] = Field(default_factory=dict)
    pass_threshold: float = DEFAULT_PASS_THRESHOLD
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    pass_at_k_examples: dict[int, int] = Field(default_factory=dict)
    """How many examples entered each pass@k average (those with at least k rollouts)."""
    n_errored: int = 0
    """Rollouts that ended with an error (``RolloutResult.error``)."""
    errors_by_type: dict[str, int] = Field(default_factory=dict)
    n_with_scoring_errors: int = 0
    """Rollouts on which at least one reward function failed."""
    scoring_errors_by_type: dict[str, int] = Field(default_factory=dict)
    scoring_errors_by_where: dict[str, int] = Field(default_factory=dict)
    """Scoring error counts by origin, e.g. ``reward:judge_score``."""
    stop_reasons: dict[str, int] = Field(default_factory=dict)
    n_truncated: int = 0
    mean_turns: float = 0.0
    timing: TimingSummary = Field(default_factory=TimingSummary)
    tokens: TokenSummary = Field(default_factory=TokenSummary)


# -- statistics --------------------------------------------------------------------------


def _stat(values: Sequence[float]) -> Stat | None:
    if not values:
        return None
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / n
    return Stat(mean=mean, std=math.sqrt(var), n=n)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def _timing_stat(values: Sequence[float]) -> TimingStat:
    if not values:
        return TimingStat()
    s = sorted(values)
    return TimingStat(
        mean=math.fsum(s) / len(s), p50=_percentile(s, 0.5), p95=_percentile(s, 0.95), max=s[-1]
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one example: probability that k of n samples include a correct one.

    ``1 - C(n-c, k) / C(n, k)``; exact integer arithmetic, so large n does not overflow.
    """
    if k < 1 or k > n:
        raise ConfigError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if c < 0 or c > n:
        raise ConfigError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# -- input normalisation -------------------------------------------------------------------


def as_results(items: Iterable[RolloutResult | Mapping[str, Any]]) -> list[RolloutResult]:
    """Accept live results or dicts read from results.jsonl (validated into `RolloutResult`)."""
    out: list[RolloutResult] = []
    for item in items:
        if isinstance(item, RolloutResult):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(RolloutResult.model_validate(dict(item)))
        else:
            raise ConfigError(
                f"summarize() takes RolloutResult objects or dicts from results.jsonl, got {type(item).__name__}"
            )
    return out


def summarize(
    results: Sequence[RolloutResult | Mapping[str, Any]],
    rollouts_per_example: int | None = None,
    *,
    pass_threshold: float = DEFAULT_PASS_THRESHOLD,
    wall_s: float | None = None,
) -> EvalSummary:
    """Summarise a run's rollouts.

    Args:
        results: The rollouts, as `RolloutResult`s or results.jsonl dicts.
        rollouts_per_example: r of the run; pass@k is reported for k = 1..r. None: the
            largest number of rollouts any example has.
        pass_threshold: Reward at or above which a rollout counts as correct for pass@k.
        wall_s: Wall-clock duration of the run, if known (adds throughput).
    """
    rs = as_results(results)
    if rollouts_per_example is not None and rollouts_per_example < 1:
        raise ConfigError(f"rollouts_per_example must be >= 1, got {rollouts_per_example}")

    by_example: dict[int, list[RolloutResult]] = defaultdict(list)
    for r in rs:
        by_example[r.example_id].append(r)
    r_max = max((len(v) for v in by_example.values()), default=0)
    r_used = rollouts_per_example if rollouts_per_example is not None else max(r_max, 1)

    rewards = [r.reward for r in rs]
    ok_rewards = [r.reward for r in rs if r.error is None]

    metric_values: dict[str, list[float]] = {}
    for r in rs:
        for name, value in r.metrics.items():
            metric_values.setdefault(name, []).append(value)

    tasks: dict[str, list[float]] = defaultdict(list)
    for r in rs:
        tasks[r.task].append(r.reward)
    reward_by_task = {t: s for t, v in sorted(tasks.items()) if (s := _stat(v))} if len(tasks) > 1 else {}

    pass_k: dict[int, float] = {}
    pass_k_examples: dict[int, int] = {}
    for k in range(1, r_used + 1):
        values = []
        for group in by_example.values():
            if len(group) >= k:
                c = sum(1 for r in group if r.reward >= pass_threshold)
                values.append(pass_at_k(len(group), c, k))
        if values:
            pass_k[k] = math.fsum(values) / len(values)
            pass_k_examples[k] = len(values)

    errors = Counter(r.error.type for r in rs if r.error is not None)
    scoring_types: Counter[str] = Counter()
    scoring_where: Counter[str] = Counter()
    for r in rs:
        for e in r.scoring_errors:
            scoring_types[e.type] += 1
            scoring_where[e.where] += 1

    timing = TimingSummary(
        generation_s=_timing_stat([r.timing.generation_s for r in rs]),
        scoring_s=_timing_stat([r.timing.scoring_s for r in rs]),
        total_s=_timing_stat([r.timing.total_s for r in rs]),
        wall_s=wall_s,
        rollouts_per_s=(len(rs) / wall_s) if wall_s and wall_s > 0 else None,
    )
    n = len(rs)
    return EvalSummary(
        n=n,
        n_examples=len(by_example),
        rollouts_per_example=r_used,
        reward=_stat(rewards),
        reward_without_errors=_stat(ok_rewards),
        reward_by_task=reward_by_task,
        metrics={name: s for name, v in metric_values.items() if (s := _stat(v))},
        pass_threshold=pass_threshold,
        pass_at_k=pass_k,
        pass_at_k_examples=pass_k_examples,
        n_errored=sum(errors.values()),
        errors_by_type=dict(errors.most_common()),
        n_with_scoring_errors=sum(1 for r in rs if r.scoring_errors),
        scoring_errors_by_type=dict(scoring_types.most_common()),
        scoring_errors_by_where=dict(scoring_where.most_common()),
        stop_reasons=dict(Counter(r.stop_reason for r in rs).most_common()),
        n_truncated=sum(1 for r in rs if r.is_truncated),
        mean_turns=(sum(r.turns for r in rs) / n) if n else 0.0,
        timing=timing,
        tokens=_token_summary(rs),
    )


def _token_summary(rs: Sequence[RolloutResult]) -> TokenSummary:
    """Usage totals and means per rollout, and the share of agent programs' follow-ups sent token-in."""
    n = len(rs)
    prompt_total = sum(r.usage.prompt_tokens for r in rs)
    completion_total = sum(r.usage.completion_tokens for r in rs)
    follow_ups = sum(1 for r in rs for t in r.tokens if t.follow_up)
    token_in = sum(1 for r in rs for t in r.tokens if t.follow_up and t.token_in)
    return TokenSummary(
        prompt_total=prompt_total,
        completion_total=completion_total,
        prompt_mean=prompt_total / n if n else 0.0,
        completion_mean=completion_total / n if n else 0.0,
        follow_up_calls=follow_ups,
        token_in_share=token_in / follow_ups if follow_ups else None,
    )


# -- rendering ---------------------------------------------------------------------------


def fmt_stat(s: Stat | None, digits: int = 4) -> str:
    """``mean ± std`` as printed everywhere (terminal and HTML use the same text)."""
    if s is None:
        return "n/a"
    return f"{s.mean:.{digits}f} ± {s.std:.{digits}f}"


def _counts_table(title: str, counts: Mapping[str, int], total: int, style: str = "") -> Table:
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("name", style=style)
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    for name, count in counts.items():
        share = f"{100 * count / total:.1f}%" if total else "-"
        table.add_row(plain_text(str(name)), str(count), share)
    return table


def render_summary(summary: EvalSummary, console: Console) -> None:
    """Print the summary as rich tables. All names are printed as plain text, never as markup."""
    head = Table(title="Evaluation summary", title_justify="left", show_header=False, show_edge=False)
    head.add_column("field", style="bold")
    head.add_column("value")
    head.add_row("rollouts", f"{summary.n} ({summary.n_examples} examples, r={summary.rollouts_per_example})")
    head.add_row("reward (mean ± std)", fmt_stat(summary.reward))
    if summary.n_errored:
        head.add_row("reward without errored", fmt_stat(summary.reward_without_errors))
    head.add_row(
        "errored rollouts",
        plain_text(str(summary.n_errored), style="bold red" if summary.n_errored else ""),
    )
    if summary.n_with_scoring_errors:
        head.add_row(
            "rollouts with scoring errors", plain_text(str(summary.n_with_scoring_errors), style="bold red")
        )
    head.add_row("truncated", str(summary.n_truncated))
    head.add_row("mean turns", f"{summary.mean_turns:.2f}")
    console.print(head)
    console.print(plain_text("std: population standard deviation over rollouts", style="dim"))

    if summary.metrics or summary.reward_by_task:
        mt = Table(title="Metrics", title_justify="left", show_edge=False)
        mt.add_column("name")
        mt.add_column("mean", justify="right")
        mt.add_column("std", justify="right")
        mt.add_column("n", justify="right")
        for name, s in summary.metrics.items():
            mt.add_row(plain_text(name), f"{s.mean:.4f}", f"{s.std:.4f}", str(s.n))
        for task, s in summary.reward_by_task.items():
            mt.add_row(plain_text(f"reward[task={task}]"), f"{s.mean:.4f}", f"{s.std:.4f}", str(s.n))
        console.print(mt)

    if summary.pass_at_k:
        pk = Table(
            title="pass@k",
            title_justify="left",
            caption=f"correct: reward >= {summary.pass_threshold:.6g}",
            caption_justify="left",
            show_edge=False,
        )
        pk.add_column("k", justify="right")
        pk.add_column("pass@k", justify="right")
        pk.add_column("examples", justify="right")
        for k, v in summary.pass_at_k.items():
            pk.add_row(str(k), f"{v:.4f}", str(summary.pass_at_k_examples.get(k, "")))
        console.print(pk)

    if summary.stop_reasons:
        console.print(_counts_table("Stop reasons", summary.stop_reasons, summary.n))
    if summary.errors_by_type:
        console.print(_counts_table("Rollout errors by type", summary.errors_by_type, summary.n, "red"))
    if summary.scoring_errors_by_where:
        console.print(_counts_table("Scoring errors", summary.scoring_errors_by_where, summary.n, "red"))

    t = summary.timing
    tt = Table(title="Timing (seconds per rollout)", title_justify="left", show_edge=False)
    tt.add_column("phase")
    for col in ("mean", "p50", "p95", "max"):
        tt.add_column(col, justify="right")
    for name, ts in (("generation", t.generation_s), ("scoring", t.scoring_s), ("total", t.total_s)):
        tt.add_row(name, f"{ts.mean:.3f}", f"{ts.p50:.3f}", f"{ts.p95:.3f}", f"{ts.max:.3f}")
    console.print(tt)
    if t.wall_s is not None:
        rate = f", {t.rollouts_per_s:.2f} rollouts/s" if t.rollouts_per_s else ""
        console.print(f"wall clock: {t.wall_s:.2f} s{rate}")

    tok = summary.tokens
    kt = Table(title="Tokens", title_justify="left", show_edge=False)
    kt.add_column("")
    kt.add_column("total", justify="right")
    kt.add_column("mean / rollout", justify="right")
    kt.add_row("prompt", f"{tok.prompt_total:,}", f"{tok.prompt_mean:.1f}")
    kt.add_row("completion", f"{tok.completion_total:,}", f"{tok.completion_mean:.1f}")
    console.print(kt)
    if tok.token_in_share is not None:
        console.print(f"token-in: {tok.token_in_share:.1%} of {tok.follow_up_calls} follow-up calls continued the "
                      "earlier call's exact ids")
