"""Turn "torch is not installed" into "install the train extra" for the commands that need it.

`vf-serve`, `vf-tiny` and `vf-train` run on torch/transformers, which the core install
leaves out (``pip install verifiers`` stays light for evaluation). Without the extra their
imports fail deep inside; the entry points catch that one case and print a single line
with the install command. Any other ImportError is a bug and is raised as it is.
"""

from __future__ import annotations

import sys

from verifiers.install_hint import install_command

TRAIN_MODULES = frozenset({"torch", "transformers", "accelerate", "peft", "fastapi", "uvicorn", "starlette",
                           "safetensors", "huggingface_hub"})
"""Top-level modules that come with ``verifiers[train]``."""


def missing_train_module(exc: ImportError) -> str | None:
    """The train-extra module whose absence caused ``exc``, or None when it is something else."""
    name = (exc.name or "").split(".")[0]
    return name if name in TRAIN_MODULES else None


def train_extra_message(prog: str, module: str) -> str:
    return f"{prog} needs the train extra: {install_command('train')} (missing: {module})"


def exit_for_missing_extra(prog: str, exc: ImportError) -> int:
    """Print the one-line install hint for ``exc`` and return exit status 2.

    Re-raises ``exc`` when the missing module is not part of the train extra: a broken
    import elsewhere is a bug to see, not a missing extra.
    """
    module = missing_train_module(exc)
    if module is None:
        raise exc
    print(train_extra_message(prog, module), file=sys.stderr)
    return 2
