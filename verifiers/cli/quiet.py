"""Keep library chatter out of the command-line tools' output.

A user of vf-eval or vf-train needs the run's own lines (banner, progress, errors); the
libraries underneath add per-call progress bars (``datasets`` maps and loads, transformers'
shard writer) and FutureWarnings about their own APIs that the user cannot act on. Each CLI
calls `quiet_libraries` once at start (never on import). ``verbose`` keeps them.
"""

from __future__ import annotations

import os
import warnings


def quiet_libraries(verbose: bool = False) -> None:
    if verbose:
        return
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # read when datasets is imported
    try:  # already imported (e.g. by an environment module): switch its bars off too
        import sys

        if "datasets" in sys.modules:
            sys.modules["datasets"].disable_progress_bars()
    except Exception:  # an old datasets without the switch: its bars stay
        pass
    for module in ("transformers", "datasets", "accelerate", "peft", "torch"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=rf"{module}(\.|$)")
