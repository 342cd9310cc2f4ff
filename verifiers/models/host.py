"""What the machine has to give: memory available now, read without psutil (the core does not depend on it).

Shared by the GGUF loader's fit check (`verifiers.models.gguf_check`) and the inference engine's default
KV-cache budget on a CPU (`verifiers.inference.engine.kv_budget`).
"""

from __future__ import annotations

import os


def available_bytes() -> int | None:
    """Memory the machine can give now (MemAvailable), else its total; None when neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # Windows has no sysconf
        return None
