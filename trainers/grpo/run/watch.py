"""What the person running the trainer must see, wherever the output goes.

A misconfigured run must never look like a real result. Three things make one look fine while
it learns nothing, and each is caught here:

* a reward function that raises (or asks for an argument that does not exist) scores 0 on
  every rollout: the first message of each error is printed, ``rollouts/scoring_errors`` is
  logged, and a function failing on every rollout of a step stops the run
  (``reward_error_stop_share``);
* a degenerate learning signal (zero gradient, every group filtered for equal rewards, every
  completion masked as truncated) for ``degenerate_warn_steps`` steps in a row: a warning that
  names the cause and the usual fix;
* a policy that stopped exploring: when every group's rewards have been equal for
  ``collapse_warn_steps`` steps in a row (``frac_reward_zero_std`` 1.0; the usual sign of a
  collapsed policy, entropy near zero) one warning says what to change; the streak is logged as
  ``watch/zero_spread_steps`` every step and the warning as ``watch/collapse_warning``;
* output that is not a terminal (``vf-train > log``, a batch job): rich's progress bar draws
  nothing there, so a plain line is printed every ``log_lines_every`` steps or
  ``log_lines_every_s`` seconds instead, after a start-up banner; a step that runs longer than
  that (a real model's step on a CPU: 30-100 s) gets a line saying which phase it is in, so a
  log never looks hung.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.markup import escape

from trainers.grpo.data.scoring import ScoringFailures
from verifiers.terminal import escape_controls


def degenerate_cause(metrics: dict[str, float], *, masks_truncated: bool, filters_groups: bool) -> str | None:
    """Why this step cannot move the policy, with the usual fix; None when it can."""
    if masks_truncated and metrics.get("completions/clipped_ratio", 0.0) >= 1.0:
        return ("every completion was truncated at max_tokens and this algorithm masks truncated completions "
                "out of the loss: raise max_tokens, or set algorithm_overrides.mask_truncated_completions = false")
    if filters_groups and metrics.get("frac_reward_zero_std", 0.0) >= 1.0:
        return ("every group had equal rewards, so every group was filtered: the task is too hard or too easy "
                "for the model, or the reward is constant (check the reward functions)")
    if metrics.get("grad_norm", 1.0) == 0.0:
        return ("the gradient was zero: rewards are equal within every group (advantages 0) or everything "
                "is masked; check rewards/* in the metrics and the reward functions")
    return None



def format_loss(loss: float) -> str:
    """The loss with three significant digits whatever its size.

    GRPO's policy loss is near zero by construction (group advantages have mean zero and the
    ratio starts at one), so a fixed ``+.4f`` showed ``-0.0000`` at every step; its sign and
    order of magnitude are what carries information (docs/training.md "What to watch").
    """
    return f"{loss:+.2e}"

class RunWatch:
    """Prints the banner, plain progress lines, first error messages and degenerate-signal warnings.

    ``print`` is the console's print (rank 0 only under several processes); ``plain`` is True
    when stdout is not a terminal or the progress bar is off.
    """

    def __init__(self, print_fn: Callable[[str], None], *, plain: bool, max_steps: int, start_step: int,
                 every_steps: int, every_s: float, degenerate_steps: int, masks_truncated: bool,
                 filters_groups: bool, collapse_steps: int = 20) -> None:
        self.print = print_fn
        self.plain = plain
        self.max_steps = max_steps
        self.start_step = start_step
        self.every_steps = every_steps
        self.every_s = every_s
        self.degenerate_steps = degenerate_steps
        self.masks_truncated = masks_truncated
        self.filters_groups = filters_groups
        self.t0 = time.monotonic()
        self.last_line = self.t0
        self.phase = ("starting", start_step + 1, self.t0)
        """What the running step is doing: (phase, step number, since when), set through `enter`."""
        self.seen_errors: set[tuple[str, str]] = set()
        self.streak: dict[str, int] = {}
        self.warned: set[str] = set()
        self.collapse_steps = collapse_steps
        self.zero_spread = 0
        self.collapse_warned = False

    def enter(self, phase: str, step: int) -> None:
        """The trainer is now ``phase`` ("generating", "learning", "syncing weights") of ``step``."""
        self.phase = (phase, step, time.monotonic())

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Off a terminal, a line whenever ``every_s`` seconds passed without one, for as long as this runs."""
        if not self.plain:
            yield
            return
        done = threading.Event()

        def beat() -> None:
            while not done.wait(max(0.05, self.every_s - (time.monotonic() - self.last_line))):
                now = time.monotonic()
                if now - self.last_line >= self.every_s:
                    self.last_line = now
                    phase, step, since = self.phase
                    self.print(f"step {step}/{self.max_steps}: {phase} ({now - since:.0f} s so far)")

        thread = threading.Thread(target=beat, name="vf-train-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)

    def banner(self, facts: dict[str, Any]) -> None:
        self.print("vf-train: " + ", ".join(f"{k} {v}" for k, v in facts.items()))

    def errors(self, failures: ScoringFailures, step: int) -> None:
        """The first message of each new kind of scoring error (later ones are counted in the metrics)."""
        for (where, kind), message in failures.first.items():
            if (where, kind) in self.seen_errors:
                continue
            self.seen_errors.add((where, kind))
            n = failures.per_function.get(where, 0)
            self.print(f"[red]step {step}: {escape(where)} raised {escape(kind)} on {n}/{failures.rollouts} "
                       f"rollouts:[/red] {escape(escape_controls(message))}")

    def step(self, step: int, metrics: dict[str, float]) -> None:
        """Warnings and plain lines for a finished step; adds the ``watch/*`` keys to ``metrics``."""
        self._degenerate(step, metrics)
        self._collapse(step, metrics)
        now = time.monotonic()
        if self.plain and (step % self.every_steps == 0 or now - self.last_line >= self.every_s
                           or step == self.max_steps or step == self.start_step + 1):
            self.last_line = now
            self.print(self.line(step, metrics, now))

    def line(self, step: int, metrics: dict[str, float], now: float) -> str:
        done = step - self.start_step
        per = (now - self.t0) / max(done, 1)
        eta = per * (self.max_steps - step)
        parts = [f"step {step}/{self.max_steps}", f"reward {metrics.get('reward', float('nan')):.4f}",
                 f"loss {format_loss(metrics.get('loss', 0.0))}"]
        if "kl" in metrics:
            parts.append(f"kl {metrics['kl']:.4f}")
        parts += [f"step {metrics.get('time/step_s', per):.2f}s", f"eta {_duration(eta)}"]
        if "eval/reward" in metrics:
            parts.append(f"eval/reward {metrics['eval/reward']:.4f}")
        if metrics.get("rollouts/scoring_errors"):
            parts.append(f"scoring_errors {int(metrics['rollouts/scoring_errors'])}")
        if metrics.get("rollouts/timeouts"):
            parts.append(f"timeouts {int(metrics['rollouts/timeouts'])}")
        return " | ".join(parts)

    def _degenerate(self, step: int, metrics: dict[str, float]) -> None:
        cause = degenerate_cause(metrics, masks_truncated=self.masks_truncated, filters_groups=self.filters_groups)
        for key in list(self.streak):
            if key != cause:
                del self.streak[key]
        if cause is None:
            return
        self.streak[cause] = self.streak.get(cause, 0) + 1
        if self.streak[cause] >= self.degenerate_steps and cause not in self.warned:
            self.warned.add(cause)
            self.print(f"[yellow]warning: the last {self.streak[cause]} steps (to step {step}) could not "
                       f"change the policy: {cause}[/yellow]")


    def _collapse(self, step: int, metrics: dict[str, float]) -> None:
        flat = metrics.get("frac_reward_zero_std", 0.0) >= 1.0
        self.zero_spread = self.zero_spread + 1 if flat else 0
        metrics["watch/zero_spread_steps"] = float(self.zero_spread)
        if self.collapse_steps and self.zero_spread >= self.collapse_steps and not self.collapse_warned:
            self.collapse_warned = True
            metrics["watch/collapse_warning"] = 1.0
            entropy = metrics.get("entropy")
            seen = f" (token entropy {entropy:.3g})" if entropy is not None else ""
            self.print(f"[yellow]warning: every group's rewards have been equal for {self.zero_spread} steps in a "
                       f"row (to step {step}){seen}: no group carries a learning signal. If the policy collapsed "
                       "(entropy near zero, the same completion every time), lower learning_rate, raise "
                       "temperature or raise num_generations and start again; if the task is solved or far too "
                       "hard for the model, this is expected.[/yellow]")


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
