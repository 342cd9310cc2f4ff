"""Build wheels of environment packages and publish them into a hub directory.

Each package is built from a fresh copy of its folder, never in place: setuptools
reuses a stale ``build/`` directory, so an in-place build can ship modules that were
deleted from the source long ago. Builds are reproducible (``SOURCE_DATE_EPOCH``
fixes the zip timestamps), so rebuilding an unchanged package gives a byte-identical
wheel and re-running `build_hub` is a no-op rather than a hash conflict.

pip's build isolation downloads the build backend from the package index; when the
backend is already installed in the building interpreter we pass
``--no-build-isolation``, so building works offline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from verifiers.envs.names import ENVIRONMENTS_DIR, module_name
from verifiers.errors import ConfigError
from verifiers.hub.index import HubFile, add_wheels, parse_wheel_filename

__all__ = [
    "DEFAULT_ENVIRONMENTS_DIR",
    "DEFAULT_HUB_DIR",
    "BuildResult",
    "build_backend",
    "build_hub",
    "build_verifiers_wheel",
    "build_wheel",
    "can_import",
    "copy_package",
    "find_environment_dirs",
    "output_tail",
    "read_pyproject",
    "resolve_environment_dir",
    "verifiers_source_dir",
]

DEFAULT_ENVIRONMENTS_DIR = ENVIRONMENTS_DIR
DEFAULT_HUB_DIR = Path("dist/hub")
# 1980-01-01, the earliest timestamp a zip file can hold.
_REPRODUCIBLE_EPOCH = "315532800"
_COPY_IGNORE = shutil.ignore_patterns(
    "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache", ".venv", ".git", ".ruff_cache"
)
_CAN_IMPORT = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
_OUTPUT_TAIL_LINES = 25


class BuildResult(BaseModel):
    """What `build_hub` did: the wheels built in this run and everything now on the hub."""

    hub_dir: str
    built: list[HubFile]
    files: list[HubFile]


def output_tail(text: str, lines: int = _OUTPUT_TAIL_LINES) -> str:
    """The last ``lines`` lines of a subprocess's output, for error messages."""
    return "\n".join(text.strip().splitlines()[-lines:])


def copy_package(src: Path, dst: Path) -> Path:
    """Copy a package folder without build leftovers (``build/``, ``*.egg-info``, caches)."""
    shutil.copytree(src, dst, ignore=_COPY_IGNORE)
    return dst


def read_pyproject(env_dir: Path) -> dict[str, Any]:
    """The parsed ``pyproject.toml`` of an environment package folder."""
    path = Path(env_dir) / "pyproject.toml"
    if not path.is_file():
        raise ConfigError(
            f"{env_dir} has no pyproject.toml, so it is not an environment package; "
            "create one with `vf-init NAME` or point at the package folder"
        )
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc


def find_environment_dirs(root: Path = DEFAULT_ENVIRONMENTS_DIR) -> list[Path]:
    """Every direct sub-folder of ``root`` holding a ``pyproject.toml``, sorted by name."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(
            f"no environments folder at {root.resolve()}; run from your project root, pass "
            "--environments-dir, or name the package folders to build"
        )
    return sorted(p.parent for p in root.glob("*/pyproject.toml"))


def resolve_environment_dir(spec: str, root: Path = DEFAULT_ENVIRONMENTS_DIR) -> Path:
    """A package folder from a path, or from an environment id / folder name under ``root``."""
    path = Path(spec)
    if path.is_dir():
        read_pyproject(path)
        return path
    root = Path(root)
    for candidate in (root / spec, root / module_name(spec)):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    known = [p.name for p in find_environment_dirs(root)] if root.is_dir() else []
    raise ConfigError(
        f"no environment package {spec!r}: not a folder, and not found under {root}/ "
        f"(there: {', '.join(known) or 'nothing'}). Create it with `vf-init {spec}`."
    )


def build_backend(env_dir: Path) -> str:
    """The module of the package's PEP 517 build backend (default: setuptools')."""
    system = read_pyproject(env_dir).get("build-system", {})
    return str(system.get("build-backend", "setuptools.build_meta")).split(":", 1)[0]


def can_import(python: str, modules: Sequence[str]) -> bool:
    """Whether interpreter ``python`` can import every module in ``modules``."""
    if not modules:
        return True
    proc = subprocess.run([python, "-c", _CAN_IMPORT, *modules], capture_output=True, text=True, check=False)
    return proc.returncode == 0


def build_wheel(
    env_dir: Path, out_dir: Path, *, python: str | None = None, build_isolation: bool | None = None
) -> Path:
    """Build one wheel of the package at ``env_dir`` into ``out_dir`` and return its path.

    ``build_isolation=None`` isolates only when ``python`` cannot import the build
    backend (isolation then needs the package index to fetch it).
    """
    env_dir = Path(env_dir).resolve()
    read_pyproject(env_dir)
    python = python or sys.executable
    if build_isolation is None:
        build_isolation = not can_import(python, [build_backend(env_dir)])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("SOURCE_DATE_EPOCH", _REPRODUCIBLE_EPOCH)
    with tempfile.TemporaryDirectory(prefix="vf-build-") as tmp:
        source = copy_package(env_dir, Path(tmp) / env_dir.name)
        wheel_dir = Path(tmp) / "wheels"
        cmd = [python, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", str(wheel_dir)]
        if not build_isolation:
            cmd.append("--no-build-isolation")
        proc = subprocess.run([*cmd, str(source)], capture_output=True, text=True, env=env, check=False)
        wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.is_dir() else []
        if proc.returncode != 0 or len(wheels) != 1:
            raise ConfigError(
                f"building a wheel of {env_dir} failed (pip exit {proc.returncode}, "
                f"{len(wheels)} wheel(s) made):\n{output_tail(proc.stdout + proc.stderr)}\n"
                f"Fix the package (usually its pyproject.toml); `{python} -m pip wheel --no-deps "
                f"{env_dir}` shows the full build log."
            )
        parse_wheel_filename(wheels[0].name)
        target = out_dir / wheels[0].name
        shutil.copyfile(wheels[0], target)
    return target


_VERIFIERS_SOURCE = ("pyproject.toml", "README.md", "verifiers", "trainers")


def verifiers_source_dir() -> Path | None:
    """The source tree this `verifiers` was imported from (a clone), or None when it came from a wheel."""
    import verifiers

    root = Path(verifiers.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
    except tomllib.TOMLDecodeError:
        return None
    return root if name == "verifiers" else None


def build_verifiers_wheel(out_dir: Path, *, python: str | None = None) -> Path:
    """A wheel of this toolkit's own `verifiers`, built from its source tree.

    Published next to the environments, it is what their ``dependencies = ["verifiers"]``
    resolve to on the hub, so an install never falls through to the unrelated project of the
    same name on PyPI. Only the package sources are copied (not tests, outputs or venvs).
    """
    root = verifiers_source_dir()
    if root is None:
        raise ConfigError(
            "this verifiers was not installed from a source tree, so vf-build cannot build its wheel; run "
            "vf-build from a clone's environment (pip install -e .), or pass --no-verifiers"
        )
    with tempfile.TemporaryDirectory(prefix="vf-self-") as tmp:
        src = Path(tmp) / "verifiers-src"
        src.mkdir()
        for name in _VERIFIERS_SOURCE:
            if (root / name).is_dir():
                shutil.copytree(root / name, src / name, ignore=_COPY_IGNORE)
            elif (root / name).is_file():
                shutil.copyfile(root / name, src / name)
        return build_wheel(src, out_dir, python=python)


def build_hub(
    env_dirs: Sequence[Path] | None = None,
    hub_dir: Path = DEFAULT_HUB_DIR,
    *,
    environments_dir: Path = DEFAULT_ENVIRONMENTS_DIR,
    python: str | None = None,
    overwrite: bool = False,
    include_verifiers: bool = False,
) -> BuildResult:
    """Build wheels of ``env_dirs`` (default: every package under ``environments_dir``) into ``hub_dir``.

    Wheels are added to ``<hub>/files`` next to what is already there, and the PEP 503
    index under ``<hub>/simple`` is rewritten; see `verifiers.hub.index`. ``include_verifiers``
    adds a wheel of this `verifiers` itself (`build_verifiers_wheel`; `vf-build` does by default).
    """
    dirs = list(env_dirs) if env_dirs else find_environment_dirs(environments_dir)
    if not dirs:
        raise ConfigError(
            f"nothing to build: no package folders (with a pyproject.toml) under {environments_dir}/; "
            "create one with `vf-init NAME`"
        )
    with tempfile.TemporaryDirectory(prefix="vf-wheels-") as tmp:
        wheels = [build_wheel(d, Path(tmp), python=python) for d in dirs]
        if include_verifiers:
            wheels.append(build_verifiers_wheel(Path(tmp), python=python))
        files = add_wheels(Path(hub_dir), wheels, overwrite=overwrite)
    names = {w.name for w in wheels}
    return BuildResult(
        hub_dir=str(Path(hub_dir).resolve()),
        built=[f for f in files if f.filename in names],
        files=files,
    )
