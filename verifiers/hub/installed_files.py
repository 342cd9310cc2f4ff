"""What an installed environment package changes beyond itself, read in the target interpreter.

A package can run code at every interpreter start (``.pth`` files, ``sitecustomize`` /
``usercustomize`` modules), replace another distribution's code (a top-level package that an
installed distribution also provides, e.g. ``openai/`` or this project's ``verifiers/``), or
replace a command (a console script named like another's, e.g. ``vf-eval``). vf-install warns
about each after installing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

from verifiers.hub.build import output_tail

__all__ = ["inspect_installed"]


# Runs in the target interpreter: files of the given distributions that change other code.
_INSPECT_SCRIPT = r"""
import importlib.metadata, json, sys
request = json.loads(sys.argv[1])
STARTUP = {"sitecustomize", "usercustomize"}


def tops(dist):
    names = set()
    for f in dist.files or []:
        parts = f.parts
        if len(parts) >= 1 and not parts[0].endswith((".dist-info", ".data", ".pth")) and parts[0] not in ("..", "__pycache__"):
            names.add(parts[0][:-3] if parts[0].endswith(".py") else parts[0])
    return names


def project_of(dist):
    return (dist.metadata["Name"] or "").lower().replace("_", "-")


out = []
projects = {p.lower().replace("_", "-") for p in request["projects"]}
others, scripts = {}, {}
for dist in importlib.metadata.distributions():
    name = project_of(dist)
    if name in projects:
        continue
    for top in tops(dist):
        others.setdefault(top, name)
    for ep in dist.entry_points:
        if ep.group == "console_scripts":
            scripts.setdefault(ep.name, name)
for project in request["projects"]:
    try:
        dist = importlib.metadata.distribution(project)
    except importlib.metadata.PackageNotFoundError:
        continue
    for f in dist.files or []:
        if len(f.parts) == 1 and f.parts[0].endswith(".pth"):
            out.append({"project": project, "kind": "pth", "file": str(f)})
    for top in sorted(tops(dist)):
        if top in STARTUP:
            out.append({"project": project, "kind": "startup", "file": top})
        elif top in ("verifiers", "trainers") and project != "verifiers":
            out.append({"project": project, "kind": "shadow", "file": top})
        elif top in others and not top.startswith("_"):
            out.append({"project": project, "kind": "shadow-dist", "file": top, "other": others[top]})
    for ep in dist.entry_points:
        if ep.group != "console_scripts":
            continue
        if ep.name in scripts or ep.name.startswith("vf-"):
            out.append({"project": project, "kind": "script", "file": ep.name, "other": scripts.get(ep.name, "verifiers")})
print(json.dumps(out))
"""


def inspect_installed(python: str, projects: Sequence[str]) -> list[str]:
    """Warnings about what the installed ``projects`` change beyond themselves.

    ``.pth`` files and ``sitecustomize``/``usercustomize`` modules run at every interpreter
    start; a top-level package that another installed distribution also provides (``openai/``,
    or this project's ``verifiers``/``trainers``) replaces that package's code; a console script
    named like another distribution's (``vf-eval``) replaces that command.
    """
    if not projects:
        return []
    proc = subprocess.run([python, "-c", _INSPECT_SCRIPT, json.dumps({"projects": list(projects)})],
                          capture_output=True, text=True, check=False)
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"could not inspect the installed files ({output_tail(proc.stdout + proc.stderr)})"]
    return [_inspect_message(f, python) for f in found]


def _inspect_message(f: dict[str, str], python: str) -> str:
    project, file = f["project"], f["file"]
    if f["kind"] == "pth":
        return f"{project} installed {file}: a .pth file runs its import lines at every start of {python}"
    if f["kind"] == "startup":
        return (f"{project} installs a top-level '{file}' module, which Python imports at every start of "
                f"{python}; uninstall it unless you trust it")
    if f["kind"] == "shadow":
        return (f"{project} installs a top-level '{file}' package, which shadows or replaces "
                "this project's; uninstall it unless you trust it")
    if f["kind"] == "shadow-dist":
        return (f"{project} installs a top-level '{file}' package that the installed distribution "
                f"'{f['other']}' also provides: one replaces the other's code; uninstall it unless you trust it")
    return (f"{project} installs a console script '{file}', the name of a command of '{f['other']}': "
            "running it may now run this package's code instead; uninstall it unless you trust it")
