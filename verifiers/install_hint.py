"""The install command for an optional extra, for how *this* verifiers was installed.

PyPI's ``verifiers`` is a different project (docs/install.md), so a hint saying
a pip command naming ``verifiers[train]`` alone installs the wrong package. From a clone the right
command is ``pip install -e ".[train]"`` (with the clone's path when the user is elsewhere);
from a hub built with vf-build it is the pinned version from that hub's index.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


def clone_root() -> Path | None:
    """The source checkout this package is imported from, or None for an installed wheel."""
    root = Path(__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        name = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return root if name == "verifiers" else None


def install_command(extra: str | None = None) -> str:
    """``pip install`` arguments that add ``extra`` to this installation of verifiers."""
    root = clone_root()
    suffix = f"[{extra}]" if extra else ""
    if root is not None:
        here = Path.cwd().resolve() == root
        return f'pip install -e "{"." if here else root}{suffix}"'
    from importlib.metadata import PackageNotFoundError, version

    try:
        pinned = f"=={version('verifiers')}"
    except PackageNotFoundError:
        pinned = ""
    return (f'pip install "verifiers{suffix}{pinned}" --index-url <your hub>/simple '
            "(from the hub you installed verifiers from; PyPI's verifiers is another project)")
