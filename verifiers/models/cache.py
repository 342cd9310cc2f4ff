"""Where fetched and converted models live, and how two processes share that place safely.

Every file under the cache is written to a temporary name beside its final one and renamed
into place only when complete, so an interrupted download or conversion never leaves a file
(or directory) that a later run would take for a finished one. `locked` serialises the
writers: accelerate ranks or pytest workers asking for the same model at once convert or
download it once, and the others wait and then reuse what the first one wrote.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV = "VF_MODEL_CACHE"


def cache_root() -> Path:
    """``$VF_MODEL_CACHE``, else ``~/.cache/verifiers/models`` (not created here)."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verifiers" / "models"


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The file's sha256 as 64 hex digits, read in 1 MiB chunks (a GGUF can be gigabytes)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def locked(root: Path, name: str) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``root/locks/NAME.lock`` (created) for the block.

    The kernel drops the lock when the process dies, so a killed run never leaves a stale one.
    """
    lock_dir = root / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.-]", "_", name)
    with open(lock_dir / f"{safe}.lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def temp_sibling(path: Path) -> Path:
    """A temporary name beside ``path`` (same filesystem, so `os.replace` onto ``path`` is atomic)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def size_text(n_bytes: int) -> str:
    """``98 MB``, ``1.2 GB``: sizes in progress lines."""
    if n_bytes >= 10**9:
        return f"{n_bytes / 10**9:.1f} GB"
    return f"{max(1, round(n_bytes / 10**6))} MB"
