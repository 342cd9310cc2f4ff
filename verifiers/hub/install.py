"""Install an environment package (``vf-install``) and check that it loads.

A spec is, in this order:

1. ``git+URL`` (pip's VCS syntax, e.g. ``git+https://host/repo.git@v1#subdirectory=envs/x``);
2. a path to a ``.whl`` file;
3. a path to a package folder (with ``pyproject.toml``);
4. ``NAME`` or ``NAME@VERSION``: the folder ``environments/<module>`` when it exists and no
   index URL was given, else the package ``NAME`` (``==VERSION``) from a hub: ``--index-url``,
   else ``$VF_HUB_URL``, else ``index_url`` in ``~/.config/verifiers/hub.toml``.

pip does the installing, run as ``<python> -m pip`` for the chosen interpreter, so the
environment can go into another virtualenv than the one running ``vf-install``. pip runs
isolated from the machine's pip configuration (``PIP_*`` variables, ``pip.conf``): with a hub,
the hub is the only index unless the caller names more (``extra_index_urls``) or opts in with
``use_pip_config``, so a higher version on some other configured index cannot stand in for
the hub's package (dependency confusion). The report says where every installed
distribution was downloaded from, and warns about ``.pth`` files and ``sitecustomize`` /
``usercustomize`` modules (code run at every interpreter start), top-level packages that another
installed distribution also provides, and console scripts named like another's (``vf-eval``).
From a hub only wheels are installed unless ``allow_sdist``. After
installing, a subprocess of that interpreter calls ``verifiers.load_environment`` for
each environment the package registers (its ``verifiers.environments`` entry points):
"installed" means "loads", not merely "unpacked".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from verifiers.config import explain, load_toml
from verifiers.envs.names import env_names
from verifiers.errors import ConfigError
from verifiers.hub.build import (
    DEFAULT_ENVIRONMENTS_DIR,
    build_backend,
    can_import,
    copy_package,
    output_tail,
    read_pyproject,
)
from verifiers.hub.index import normalize_project_name, parse_index_links, parse_wheel_filename
from verifiers.hub.installed_files import inspect_installed
from verifiers.hub.pip_progress import run_pip

__all__ = [
    "HUB_URL_ENV_VAR",
    "HubConfig",
    "InstallResult",
    "InstallTarget",
    "LoadedEnvironment",
    "config_path",
    "configured_hub",
    "install_environment",
    "resolve_spec",
    "verify_installed",
]

HUB_URL_ENV_VAR = "VF_HUB_URL"
_PROBE_TIMEOUT_S = 10.0
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
_MISSING_RE = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)")

# Runs in the target interpreter: load every environment of the given distributions.
_VERIFY_SCRIPT = r"""
import importlib.metadata, json, sys, traceback
request = json.loads(sys.argv[1])
results = []
try:
    import verifiers
except ImportError as exc:
    print(json.dumps({"fatal": f"verifiers is not importable here: {exc}"}))
    sys.exit(3)
for project in request["projects"]:
    try:
        dist = importlib.metadata.distribution(project)
    except importlib.metadata.PackageNotFoundError:
        results.append({"project": project, "env_id": project, "error": "the distribution is not installed"})
        continue
    ids = [ep.name for ep in dist.entry_points if ep.group == "verifiers.environments"] or [project]
    for env_id in ids:
        row = {"project": project, "env_id": env_id, "version": dist.version}
        try:
            env = verifiers.load_environment(env_id, **request["env_args"])
            row["class_name"] = type(env).__name__
            row["num_train"] = None if env.dataset is None else len(env.dataset)
            row["num_eval"] = None if env.eval_dataset is None else len(env.eval_dataset)
            if request["check"]:
                from verifiers.testing import check_environment
                check_environment(env)
        except BaseException as exc:
            row["error"] = "".join(traceback.format_exception(exc)[-6:]).strip()
        results.append(row)
print(json.dumps({"results": results}))
sys.exit(1 if any("error" in r for r in results) else 0)
"""


class HubConfig(BaseModel):
    """``~/.config/verifiers/hub.toml``: where ``vf-install NAME`` looks for environments."""

    model_config = ConfigDict(extra="forbid")

    index_url: str | None = None
    """PEP 503 index URL of the hub, e.g. ``http://hub.internal:8000/simple``."""
    extra_index_urls: list[str] = []
    """More indexes for the environments' dependencies (e.g. ``https://pypi.org/simple``)."""


class InstallTarget(BaseModel):
    """A resolved spec: what pip is asked to install, and which distribution that is."""

    kind: Literal["folder", "wheel", "git", "index"]
    spec: str
    requirement: str
    """The argument given to ``pip install``."""
    project: str | None = None
    """Normalized distribution name when known before installing (not for git URLs)."""
    version: str | None = None
    index_url: str | None = None


class LoadedEnvironment(BaseModel):
    """One environment that loaded after installing."""

    env_id: str
    project: str
    version: str | None = None
    class_name: str
    num_train: int | None = None
    num_eval: int | None = None


class InstallResult(BaseModel):
    target: InstallTarget
    python: str
    installed: list[str]
    """Distributions pip installed or replaced (empty when all were already up to date)."""
    environments: list[LoadedEnvironment]
    sources: dict[str, str] = {}
    """Where pip took each installed distribution from (download URL or local path)."""
    warnings: list[str] = []
    """Things to look at: packages from outside the hub, ``.pth`` files, shadowed ``verifiers``."""


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/verifiers/hub.toml`` (default ``~/.config/verifiers/hub.toml``)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "verifiers" / "hub.toml"


def configured_hub(environ: Mapping[str, str] | None = None, path: Path | None = None) -> HubConfig:
    """The hub configuration: ``$VF_HUB_URL`` overrides ``index_url`` of the config file."""
    environ = os.environ if environ is None else environ
    path = path or config_path(environ)
    config = HubConfig()
    if path.is_file():
        fix = '; it holds `index_url = "http://HOST:PORT/simple"` and optionally `extra_index_urls = [...]`'
        data = load_toml(path, invalid="{path} is not a valid hub config ({error})" + fix)
        try:
            config = HubConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path} is not a valid hub config ({'; '.join(explain(exc, HubConfig))}){fix}") from None
    if environ.get(HUB_URL_ENV_VAR):
        config = config.model_copy(update={"index_url": environ[HUB_URL_ENV_VAR]})
    return config


def _wheel_target(spec: str) -> InstallTarget:
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"no wheel file at {path.resolve()}; build one with `vf-build` or check the path")
    project, version = parse_wheel_filename(path.name)
    return InstallTarget(
        kind="wheel", spec=spec, requirement=str(path.resolve()), project=project, version=version
    )


def _folder_target(spec: str, path: Path, version: str | None = None) -> InstallTarget:
    project_table = read_pyproject(path).get("project", {})
    name = project_table.get("name")
    if not name:
        raise ConfigError(f"{path}/pyproject.toml has no [project] name; add one (see `vf-init`)")
    found = project_table.get("version")
    if version is not None and found != version:
        raise ConfigError(
            f"{path} holds version {found} of {name}, not {version}; install from a hub for other versions "
            "(--index-url) or drop '@VERSION'"
        )
    return InstallTarget(
        kind="folder",
        spec=spec,
        requirement=str(path.resolve()),
        project=normalize_project_name(name),
        version=found,
    )


def resolve_spec(
    spec: str,
    *,
    index_url: str | None = None,
    environments_dir: Path = DEFAULT_ENVIRONMENTS_DIR,
    environ: Mapping[str, str] | None = None,
) -> InstallTarget:
    """Turn a user's spec into an `InstallTarget` (see the module docstring for the rules)."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty environment spec; give NAME[@VERSION], a folder, a .whl file or a git+URL")
    if spec.startswith("git+"):
        return InstallTarget(kind="git", spec=spec, requirement=spec)
    if spec.endswith(".whl"):
        return _wheel_target(spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _folder_target(spec, path)
    if path.exists() or os.sep in spec or "/" in spec or spec.startswith("."):
        raise ConfigError(
            f"no environment package folder at {path.resolve()}; check the path (a folder with a "
            "pyproject.toml), or give NAME[@VERSION] to install from a hub"
        )
    name, _, version = spec.partition("@")
    version = version.strip() or None
    names = env_names(name)
    local = Path(environments_dir) / names.module
    if index_url is None and (local / "pyproject.toml").is_file():
        return _folder_target(spec, local, version)
    url = index_url or configured_hub(environ).index_url
    if not url:
        raise ConfigError(
            f"environment {names.env_id!r} is not under {environments_dir}/ and no hub is configured. "
            f"Pass --index-url http://HOST:PORT/simple, set {HUB_URL_ENV_VAR}, or put "
            f'index_url = "..." in {config_path(environ)}.'
        )
    requirement = f"{names.project}=={version}" if version else names.project
    return InstallTarget(
        kind="index",
        spec=spec,
        requirement=requirement,
        project=names.project,
        version=version,
        index_url=url,
    )


def _fetch(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = Path(urllib.request.url2pathname(parsed.path))
        return (path / "index.html" if path.is_dir() else path).read_text(encoding="utf-8")
    with urllib.request.urlopen(url, timeout=_PROBE_TIMEOUT_S) as response:
        return response.read().decode("utf-8", errors="replace")


def _probe_index(target: InstallTarget) -> None:
    """Check that the hub serves the project (and version) before pip runs, for a precise error."""
    base = (target.index_url or "").rstrip("/") + "/"
    if urllib.parse.urlparse(base).scheme not in ("http", "https", "file"):
        return
    try:
        page = _fetch(f"{base}{target.project}/")
    except (urllib.error.HTTPError, FileNotFoundError) as exc:
        if isinstance(exc, urllib.error.HTTPError) and exc.code != 404:
            return  # e.g. 401: pip may have credentials (netrc, keyring) that we do not
        try:
            available = [link.text for link in parse_index_links(_fetch(base))]
        except (OSError, urllib.error.URLError):
            available = []
        raise ConfigError(
            f"environment {target.project!r} is not on the hub at {base} "
            f"(it has: {', '.join(available) or 'nothing'}). Check the name, or publish it with "
            f"`vf-build {target.project} --out HUB_DIR`."
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ConfigError(
            f"cannot reach the hub at {base}: {getattr(exc, 'reason', exc)}. Is its file server running, "
            "and does the URL end in /simple?"
        ) from exc
    if target.version is None:
        return
    versions = []
    for link in parse_index_links(page):
        try:
            versions.append(parse_wheel_filename(link.text)[1])
        except ConfigError:
            continue
    if not any(_same_version(target.version, v) for v in versions):
        raise ConfigError(
            f"version {target.version} of {target.project!r} is not on the hub at {base} "
            f"(versions there: {', '.join(sorted(set(versions))) or 'none'})"
        )


def _same_version(a: str, b: str) -> bool:
    """PEP 440 equality (``0.1 == 0.1.0``) when ``packaging`` is installed, else exact text."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging comes with datasets
        return a == b
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _check_python(python: str) -> str:
    resolved = python if Path(python).is_file() else shutil.which(python)
    if not resolved:
        raise ConfigError(f"no Python interpreter at {python!r}; pass --python with the path to one")
    return os.path.abspath(resolved)  # not resolve(): a venv's python is a symlink out of the venv


def _pip_command(
    target: InstallTarget,
    python: str,
    report: Path,
    *,
    extra_index_urls: Sequence[str],
    no_deps: bool,
    force_reinstall: bool,
    allow_sdist: bool = False,
) -> list[str]:
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--report", str(report)]
    if target.kind == "index":
        cmd += ["--index-url", target.index_url or "", "--upgrade"]
        if not allow_sdist:  # an sdist runs its build code, and older pips extract links that escape
            cmd += ["--only-binary", ":all:"]
    for url in extra_index_urls:
        cmd += ["--extra-index-url", url]
    for url in [target.index_url or "", *extra_index_urls]:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == "http" and parsed.hostname and parsed.hostname not in _LOOPBACK_HOSTS:
            cmd += ["--trusted-host", parsed.hostname]  # a plain-HTTP hub the user chose explicitly
    if target.kind == "folder":
        needs = [build_backend(Path(target.requirement))]
    elif target.kind == "git":
        needs = ["setuptools.build_meta"]
    else:
        needs = []
    if needs and can_import(python, needs):
        cmd.append("--no-build-isolation")  # the backend is there: build offline
    if force_reinstall:
        cmd += ["--force-reinstall", "--no-deps"]
    elif no_deps:
        cmd.append("--no-deps")
    return [*cmd, target.requirement]


_INSTALLED_VERSION = (
    "import importlib.metadata as m\ntry:\n    print(m.version('verifiers'))\nexcept m.PackageNotFoundError:\n"
    "    pass\n"
)


def verifiers_pin(python: str) -> str:
    """``verifiers==VERSION``: the one installed in ``python``, else this one.

    Written as a pip constraint whenever other indexes than the hub are searched: PyPI's
    ``verifiers`` is an unrelated project whose versions sort higher than ours, and pip takes
    the highest version across all indexes. Our versions carry a local label (``+vf``) that
    PyPI cannot hold, so the pin matches this toolkit only.
    """
    proc = subprocess.run([python, "-c", _INSTALLED_VERSION], capture_output=True, text=True, check=False)
    installed = proc.stdout.strip() if proc.returncode == 0 else ""
    if not installed:
        import verifiers

        installed = verifiers.__version__
    return f"verifiers=={installed}"


def _pip_hint(target: InstallTarget, output: str) -> str:
    missing = _MISSING_RE.findall(output)
    if "verifiers" in {normalize_project_name(m) for m in missing}:
        return (
            "The hub has no wheel of verifiers itself: rebuild it with `vf-build` (it publishes this verifiers "
            "next to the environments), or install verifiers into that interpreter first "
            "(`PYTHON -m pip install -e PATH/TO/CLONE`). Do not add PyPI for it: PyPI's 'verifiers' is a "
            "different project."
        )
    if "No module named pip" in output:
        return "The interpreter has no pip: run `PYTHON -m ensurepip` first."
    if "no such option: --report" in output:
        return "Its pip is too old (vf-install needs pip 22.2 or newer): run `PYTHON -m pip install -U pip`."
    if missing and target.project and target.project not in {normalize_project_name(m) for m in missing}:
        return (
            f"A dependency ({', '.join(missing)}) is neither installed nor on the index; install it first, "
            "or add --extra-index-url https://pypi.org/simple."
        )
    if target.kind == "git":
        return "Check the URL (git must be able to clone it) and that the repository holds a package."
    if target.kind == "index":
        return f"Check that the hub at {target.index_url} serves {target.project} (`vf-build`)."
    return "Check the package's pyproject.toml."


def _sdist_hint(target: InstallTarget, output: str, allow_sdist: bool) -> str:
    """When a hub had no wheel: say that only wheels are taken from a hub, and how to opt in."""
    if target.kind != "index" or allow_sdist or "matching distribution" not in output:
        return ""
    return (" vf-install takes only wheels from a hub (an sdist runs its build code): publish wheels with "
            "`vf-build`, or pass --allow-sdist if you trust the hub's source packages.")


def _installed_from_report(report: Path) -> list[tuple[str, bool, str]]:
    """``(project, requested, source URL)`` of every distribution pip's ``--report`` lists."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [
        (
            normalize_project_name(item["metadata"]["name"]),
            bool(item.get("requested")),
            str((item.get("download_info") or {}).get("url") or ""),
        )
        for item in data.get("install", [])
    ]


# Names of pip's environment variables that are not pip configuration.
_PIP_ENV_KEEP = frozenset({"PIP_REQUIRE_VIRTUALENV"})


def pip_environment(environ: Mapping[str, str] | None = None, *, use_pip_config: bool = False) -> dict[str, str]:
    """The environment pip runs in: without the machine's pip configuration unless opted in.

    ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS`` and a ``pip.conf`` (also one
    named by ``PIP_CONFIG_FILE``) would add indexes next to the hub; pip then installs the
    highest version found on any of them.
    """
    env = dict(os.environ if environ is None else environ)
    if use_pip_config:
        return env
    for key in list(env):
        if key.upper().startswith("PIP_") and key.upper() not in _PIP_ENV_KEEP:
            del env[key]
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_NO_INPUT"] = "1"
    return env


def _origin(url: str) -> tuple[str, str]:
    parsed = urllib.parse.urlparse(url)
    return parsed.scheme, (parsed.netloc or "").lower()


def _source_warnings(target: InstallTarget, installed: Sequence[tuple[str, bool, str]],
                     extra_index_urls: Sequence[str]) -> list[str]:
    """Installed distributions that did not come from where the user asked."""
    if target.kind != "index" or not target.index_url:
        return []
    hub = _origin(target.index_url)
    out = []
    for name, requested, url in installed:
        if not url or _origin(url) == hub:
            continue
        if requested:
            out.append(f"{name} was downloaded from {url}, not from the hub at {target.index_url}: "
                       "another index offered it (check --extra-index-url / the hub config)")
        elif not extra_index_urls:
            out.append(f"dependency {name} came from {url}, outside the hub")
    return out


def _git_project(spec: str) -> str | None:
    """The ``#egg=NAME`` of a git URL, else its repository (or subdirectory) name."""
    fragment = urllib.parse.urlparse(spec).fragment
    params = urllib.parse.parse_qs(fragment)
    if params.get("egg"):
        return normalize_project_name(params["egg"][0])
    if params.get("subdirectory"):
        return normalize_project_name(params["subdirectory"][0].rstrip("/").rsplit("/", 1)[-1])
    path = urllib.parse.urlparse(spec.split("#", 1)[0]).path.rstrip("/")
    name = path.rsplit("/", 1)[-1].split("@", 1)[0].removesuffix(".git")
    return normalize_project_name(name) if name else None


def verify_installed(
    python: str, projects: Sequence[str], *, env_args: Mapping[str, Any] | None = None, check: bool = False
) -> list[LoadedEnvironment]:
    """Load every environment of ``projects`` in a fresh ``python`` process; raise if any fails.

    It runs in an empty temporary folder, so a package folder in the current directory
    cannot stand in for the installed one.
    """
    request = json.dumps({"projects": list(projects), "env_args": dict(env_args or {}), "check": check})
    with tempfile.TemporaryDirectory(prefix="vf-verify-") as cwd:
        proc = subprocess.run(
            [python, "-c", _VERIFY_SCRIPT, request], capture_output=True, text=True, cwd=cwd, check=False
        )
    lines = proc.stdout.strip().splitlines()
    try:
        payload = json.loads(lines[-1]) if lines else {}
    except ValueError:
        payload = {}
    if "fatal" in payload:
        raise ConfigError(f"{payload['fatal']} ({python}); install verifiers into that interpreter first")
    results = payload.get("results")
    if results is None:
        raise ConfigError(
            f"checking the installed environment crashed in {python} (exit {proc.returncode}):\n"
            f"{output_tail(proc.stdout + proc.stderr)}"
        )
    failed = [r for r in results if "error" in r]
    if failed:
        details = "\n".join(f"- {r['env_id']} ({r['project']}): {r['error']}" for r in failed)
        raise ConfigError(
            f"installed, but {len(failed)} environment(s) failed to load in {python}:\n{details}\n"
            "Fix the environment's load_environment (or pass --env-args if it needs arguments) and "
            f"install again; `{python} -m pip uninstall {' '.join(sorted({r['project'] for r in failed}))}` "
            "removes it."
        )
    return [LoadedEnvironment.model_validate(r) for r in results]


CHECKED_CLIS = ("verifiers.cli.eval", "verifiers.cli.view")
"""The commands an installed environment is used with (vf-eval, vf-view); started with ``--help``."""


def check_cli_starts(python: str, env: Mapping[str, str] | None = None) -> None:
    """Start the CLIs an environment is used with in ``python``; raise when one cannot start.

    Loading the environment imports only the core; vf-eval also needs its own dependencies
    (rich, the HTTP clients), and an install that leaves one broken must not report success.
    """
    for module in CHECKED_CLIS:
        with tempfile.TemporaryDirectory(prefix="vf-verify-") as cwd:
            proc = subprocess.run([python, "-m", module, "--help"], capture_output=True, text=True, cwd=cwd,
                                  check=False, env=dict(env) if env is not None else None, timeout=300)
        if proc.returncode != 0:
            name = "vf-" + module.rsplit(".", 1)[-1]
            raise ConfigError(
                f"installed, but {name} cannot start in {python} (exit {proc.returncode}):\n"
                f"{output_tail(proc.stdout + proc.stderr)}\nRepair that interpreter's packages "
                f"(`{python} -m pip check` lists what is broken) and install again."
            )


def install_environment(
    spec: str,
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    python: str | None = None,
    environments_dir: Path = DEFAULT_ENVIRONMENTS_DIR,
    env_args: Mapping[str, Any] | None = None,
    verify: bool = True,
    check: bool = False,
    no_deps: bool = False,
    force_reinstall: bool = False,
    allow_sdist: bool = False,
    stream_output: bool = False,
    progress: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
    use_pip_config: bool = False,
) -> InstallResult:
    """Install ``spec`` into ``python`` (default: this interpreter) and check that it loads.

    Args:
        spec: NAME[@VERSION], a package folder, a ``.whl`` path or a ``git+`` URL.
        index_url: The hub's PEP 503 index (default: ``$VF_HUB_URL`` or the config file).
        extra_index_urls: More indexes for dependencies (config ``extra_index_urls`` is added).
        python: Interpreter whose environment receives the package.
        environments_dir: Where ``NAME`` is looked up as a local folder first.
        env_args: Keyword arguments for ``load_environment`` while verifying.
        verify: Load each installed environment afterwards.
        check: Also run ``check_environment`` (rollouts against a scripted server).
        no_deps: Do not install dependencies.
        force_reinstall: Reinstall the package (only it, not its dependencies) even if that
            version is installed.
        allow_sdist: From a hub, also install source distributions. Off by default: a hub
            install takes wheels only, because building an sdist runs its build code and the pip
            of a fresh Python 3.11 virtualenv extracts sdist members that link outside the build
            directory. Folder and git installs build from source regardless (you chose them).
        stream_output: Let pip print to the terminal instead of capturing its output.
        progress: Gets a line on what pip is doing every 10 s while its output is captured.
        use_pip_config: Let pip read this machine's pip configuration (``PIP_*`` variables,
            ``pip.conf``), and so its other indexes; off by default, so a hub install takes the
            hub's package. Installing runs the package's build code either way.
    """
    python = _check_python(python or sys.executable)
    target = resolve_spec(spec, index_url=index_url, environments_dir=environments_dir, environ=environ)
    extra = list(extra_index_urls)
    if target.kind == "index":
        extra += [u for u in configured_hub(environ).extra_index_urls if u not in extra]
        _probe_index(target)
    with tempfile.TemporaryDirectory(prefix="vf-install-") as tmp:
        report = Path(tmp) / "report.json"
        pip_target = target
        if target.kind == "folder":  # build from a clean copy: the user's folder stays untouched
            source = copy_package(Path(target.requirement), Path(tmp) / "src" / Path(target.requirement).name)
            pip_target = target.model_copy(update={"requirement": str(source)})
        cmd = _pip_command(
            pip_target,
            python,
            report,
            extra_index_urls=extra,
            no_deps=no_deps,
            force_reinstall=force_reinstall,
            allow_sdist=allow_sdist,
        )
        if (extra or use_pip_config) and not no_deps:  # other indexes: keep PyPI's 'verifiers' out
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text(verifiers_pin(python) + "\n", encoding="utf-8")
            cmd[-1:-1] = ["-c", str(constraints)]
        env = pip_environment(environ, use_pip_config=use_pip_config)
        if stream_output:
            proc = subprocess.run(cmd, check=False, env=env)
            output = ""
            returncode = proc.returncode
        else:
            returncode, output = run_pip(cmd, env, progress)
        if returncode != 0:
            raise ConfigError(
                f"pip could not install {spec!r} into {python} (exit {returncode})"
                + (f":\n{output_tail(output)}\n" if output else "; see pip's output above. ")
                + _pip_hint(target, output)
                + _sdist_hint(target, output, allow_sdist)
            )
        installed = _installed_from_report(report)
    requested = [name for name, was_requested, _ in installed if was_requested]
    project = requested[0] if requested else target.project or _git_project(spec)
    if project is None:
        raise ConfigError(
            f"pip installed {spec!r} but did not say which package it was; add #egg=NAME to the URL"
        )
    target = target.model_copy(update={"project": project})
    warnings = _source_warnings(target, installed, extra)
    warnings += inspect_installed(python, [name for name, _, _ in installed])
    environments = verify_installed(python, [project], env_args=env_args, check=check) if verify else []
    if verify:
        check_cli_starts(python)
    return InstallResult(
        target=target, python=python, installed=[name for name, _, _ in installed], environments=environments,
        sources={name: url for name, _, url in installed}, warnings=warnings,
    )
