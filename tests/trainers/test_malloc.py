"""`retain_freed_memory`: freed tensor memory is reused instead of page-faulted back in every step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainers.grpo.dist.malloc import retain_freed_memory

pytest.importorskip("torch")

# A 64 MiB activation made and freed again and again, as a learner does every step. glibc serves a block
# that size (above its 32 MiB adaptive limit) with a fresh mmap each time: every page faults again.
PROBE = """
import json, resource, sys
import torch
from trainers.grpo.dist.malloc import retain_freed_memory
done = retain_freed_memory() if sys.argv[1] == "on" else "default allocator"
def step():
    x = torch.ones(16 << 20)  # 64 MiB, written
    del x
for _ in range(10):  # the heap settles (its first blocks are faulted in once), counted out
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(json.dumps({"done": done, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _probe(mode: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_activation_is_reused_without_page_faults() -> None:
    default, kept = _probe("off"), _probe("on")
    assert kept["done"] == "freed memory kept for reuse"
    assert default["faults"] > 10 * 16_000 * 0.9  # 16k pages of 4 KiB, faulted in again every time
    assert kept["faults"] < default["faults"] / 20


def test_the_users_malloc_environment_wins(monkeypatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert retain_freed_memory() == "MALLOC_*_THRESHOLD_ from the environment"


def test_the_trainer_applies_it_unless_configured_off() -> None:
    from trainers.grpo.config import TrainConfig

    assert TrainConfig(model="m", env_id="e").retain_freed_memory is True
    assert TrainConfig(model="m", env_id="e", retain_freed_memory=False).retain_freed_memory is False
