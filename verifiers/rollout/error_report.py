"""What went wrong across a batch of rollouts: the share that errored and the first message of each type.

Rollout errors are data, not exceptions, so a run against a wrong model name or a dead
server finishes "successfully" with every reward 0.0. These helpers are what vf-eval and
`Environment.evaluate` use to say so out loud instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from verifiers.terminal import escape_controls
from verifiers.types import RolloutResult

WARN_SHARE = 0.5
"""`warn_about_errors` warns when more than this share of the rollouts errored."""


class RolloutErrorsWarning(UserWarning):
    """Most (or all) rollouts of a batch ended with an error; their rewards say nothing about the model.

    A category of its own so tests can turn it into an error (``-W error::...``) or silence it.
    """


def error_share(results: Sequence[RolloutResult]) -> float:
    """Fraction of rollouts that ended with an error (0.0 for no rollouts)."""
    if not results:
        return 0.0
    return sum(1 for r in results if r.error is not None) / len(results)


def first_error_messages(results: Sequence[RolloutResult]) -> dict[str, str]:
    """The first message seen for each rollout error type (what to read before digging in)."""
    first: dict[str, str] = {}
    for r in results:
        if r.error is not None and r.error.type not in first:
            first[r.error.type] = r.error.message
    return first


def errors_message(results: Sequence[RolloutResult]) -> str:
    """``"4 of 4 rollouts errored; first ServerError: ..."``: one line per error type after the count."""
    n_err = sum(1 for r in results if r.error is not None)
    lines = [f"{n_err} of {len(results)} rollouts ended with an error; their reward is 0.0"]
    lines += [escape_controls(f"  first {kind}: {message[:500]}") for kind, message in first_error_messages(results).items()]
    return "\n".join(lines)


def warn_about_errors(
    results: Sequence[RolloutResult], *, share: float = WARN_SHARE, stacklevel: int = 2
) -> bool:
    """Warn (`RolloutErrorsWarning`) when more than ``share`` of the rollouts errored; True if it warned."""
    if not results or error_share(results) <= share:
        return False
    warnings.warn(errors_message(results), RolloutErrorsWarning, stacklevel=stacklevel + 1)
    return True
