"""How an environment id is spelled, and where its source is found in a folder of environments.

One environment has three names: the id users type (``my-env``, or ``org/my-env`` as 0.1.x
hubs wrote it), the module `load_environment` imports (``my_env``) and the PEP 503
distribution name pip and the hub use (``my-env``). Every command (vf-eval, vf-train,
vf-init, vf-build, vf-install) derives them here, so an id that one of them finds, the
others find too.

Folders of environments (``./environments`` by default) hold each environment in one of
two layouts, both from 0.1.x: a package ``<m>/<m>/__init__.py`` (what `vf-init` writes) or
a flat module ``<m>/<m>.py`` beside its pyproject.toml; a bare ``<m>.py`` or ``<m>/__init__.py``
directly in the folder works too. `find_local_env` is the one lookup for all of them.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path

from pydantic import BaseModel

from verifiers.errors import ConfigError

__all__ = ["ENVIRONMENTS_DIR", "EnvNames", "env_names", "find_local_env", "module_name", "normalize_project_name"]

ENVIRONMENTS_DIR = Path("environments")
"""The folder of environment packages in a project (relative to the working directory)."""

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*$")
# Module names that would shadow what every environment imports.
_RESERVED = {"verifiers", "trainers", "tests", "test", "environments", "datasets", "openai", "pydantic"}
_NORMALIZE_RE = re.compile(r"[-_.]+")
_PICKED_UP = {
    "sitecustomize": "Python imports at every start once it is installed",
    "usercustomize": "Python imports at every start once it is installed",
    "conftest": "pytest imports from any test directory on its own",
    "setup": "pip and setuptools run as a build script",
    "__main__": "Python runs for `python -m` and zip applications",
    "__init__": "Python treats as a package marker",
}
"""Module names that Python, pip or pytest pick up by name, so an environment must not take them."""


def normalize_project_name(name: str) -> str:
    """PEP 503 normalization: lower case, runs of ``-``, ``_`` and ``.`` become one ``-``."""
    return _NORMALIZE_RE.sub("-", name).lower()


def module_name(env_id: str) -> str:
    """The module an id names: ``-`` → ``_``, the last part of ``org/name``, without an ``@version``
    suffix (hub ids ``owner/name@1.2`` install as just ``name``)."""
    return env_id.split("@", 1)[0].replace("-", "_").split("/")[-1]


class EnvNames(BaseModel):
    """The three spellings of one environment's name."""

    env_id: str
    """What users type: ``vf-eval my-env``, ``vf.load_environment("my-env")``."""
    module: str
    """The import name: ``my_env``."""
    project: str
    """The PEP 503 normalized distribution name used by pip and the hub."""


def env_names(name: str) -> EnvNames:
    """Validate a new environment's ``name`` and derive its id, module and distribution names."""
    name = name.strip()
    if not _NAME_RE.match(name):
        raise ConfigError(
            f"invalid environment name {name!r}: use letters and digits separated by single '-' or '_', "
            "starting with a letter (e.g. 'my-env')"
        )
    env_id = name.lower().replace("_", "-")
    module = module_name(env_id)
    if module in _PICKED_UP:
        raise ConfigError(
            f"environment name {name!r} would create a module {module!r}, which {_PICKED_UP[module]}; "
            "pick another name (e.g. add a prefix: 'my-" + env_id + "')"
        )
    if keyword.iskeyword(module) or module in sys.stdlib_module_names or module in _RESERVED:
        raise ConfigError(
            f"environment name {name!r} would create a module {module!r} that shadows a Python or "
            "library module; pick another name (e.g. add a prefix: 'my-" + env_id + "')"
        )
    return EnvNames(env_id=env_id, module=module, project=normalize_project_name(env_id))


def find_local_env(env_id: str, root: Path) -> Path | None:
    """The folder to put on ``sys.path`` so that ``env_id``'s module under ``root`` imports, or None.

    Looked for in ``root/<module>``, ``root/<id>`` and ``root`` itself, each holding either
    ``<module>.py`` or ``<module>/__init__.py``; the first that does wins.
    """
    name = module_name(env_id)
    for base in (root / name, root / env_id, root):
        if (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file():
            return base
    return None
