"""A PEP 503 "simple" package index for environment wheels, as plain static files.

Layout of a hub directory::

    <hub>/files/<wheel>.whl              the wheels themselves
    <hub>/simple/index.html              one link per project (normalized name)
    <hub>/simple/<project>/index.html    one link per wheel, with ``#sha256=`` and
                                         ``data-requires-python``

Any static file server can serve it (``python -m http.server -d <hub>``), and pip
installs from it with ``--index-url http://HOST:PORT/simple``. The pages are always
regenerated from what is in ``files/``, so writing is idempotent and adding a new
version never loses an old one. Pages are replaced atomically, so a server may keep
serving while the hub is updated.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shutil
import zipfile
from collections.abc import Iterable
from email.parser import HeaderParser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urldefrag

from pydantic import BaseModel

from verifiers.envs.names import normalize_project_name
from verifiers.errors import ConfigError

__all__ = [
    "HubFile",
    "IndexLink",
    "add_wheels",
    "normalize_project_name",
    "parse_index_links",
    "parse_wheel_filename",
    "read_requires_python",
    "scan_hub",
    "write_index",
]

FILES_DIR = "files"
SIMPLE_DIR = "simple"
# name-version(-build)?-python-abi-platform.whl, with the name already escaped to [A-Za-z0-9_.]
_WHEEL_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-[^-]+-[^-]+-[^-]+\.whl$"
)


def parse_wheel_filename(filename: str) -> tuple[str, str]:
    """``(normalized project name, version)`` of a wheel file name (PEP 427)."""
    match = _WHEEL_RE.match(filename)
    if match is None:
        raise ConfigError(
            f"{filename!r} is not a wheel file name (expected NAME-VERSION-PY-ABI-PLATFORM.whl); "
            "build wheels with `vf-build` or `pip wheel`"
        )
    return normalize_project_name(match["name"]), match["version"]


class HubFile(BaseModel):
    """One wheel on the hub, as listed on its project page."""

    filename: str
    project: str
    version: str
    sha256: str
    requires_python: str | None = None


class IndexLink(BaseModel):
    """One ``<a>`` of an index page (what pip reads)."""

    text: str
    href: str
    url: str
    """``href`` without its fragment."""
    sha256: str | None = None
    requires_python: str | None = None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_requires_python(wheel: Path) -> str | None:
    """``Requires-Python`` from the wheel's METADATA (None when absent)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise ConfigError(f"{wheel.name} has {len(names)} .dist-info/METADATA files, expected one")
            text = zf.read(names[0]).decode("utf-8")
    except zipfile.BadZipFile as exc:
        raise ConfigError(f"{wheel} is not a valid wheel (zip) file: {exc}; rebuild it") from exc
    value = HeaderParser().parsestr(text).get("Requires-Python")
    return value.strip() if value else None


def _describe(path: Path) -> HubFile:
    project, version = parse_wheel_filename(path.name)
    return HubFile(
        filename=path.name,
        project=project,
        version=version,
        sha256=_sha256(path),
        requires_python=read_requires_python(path),
    )


def scan_hub(hub_dir: Path) -> list[HubFile]:
    """Every wheel under ``<hub>/files``, sorted by project then file name."""
    files_dir = Path(hub_dir) / FILES_DIR
    if not files_dir.is_dir():
        return []
    found = [_describe(p) for p in files_dir.glob("*.whl") if p.is_file()]
    return sorted(found, key=lambda f: (f.project, f.filename))


def add_wheels(hub_dir: Path, wheels: Iterable[Path], *, overwrite: bool = False) -> list[HubFile]:
    """Copy ``wheels`` into the hub and rewrite its index; returns every file on the hub.

    A wheel whose file name is already on the hub with the same contents is skipped
    (so re-running a build is harmless). With different contents it is refused unless
    ``overwrite``: pip caches wheels by name and hash, so silently replacing a published
    version breaks installs that pinned the old hash.
    """
    files_dir = Path(hub_dir) / FILES_DIR
    files_dir.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        wheel = Path(wheel)
        parse_wheel_filename(wheel.name)
        target = files_dir / wheel.name
        if target.exists() and _sha256(target) != _sha256(wheel) and not overwrite:
            project, version = parse_wheel_filename(wheel.name)
            raise ConfigError(
                f"{wheel.name} is already on the hub at {files_dir} with different contents. "
                f"Bump the version of {project} (now {version}) in its pyproject.toml, "
                "or pass --overwrite to replace the published file."
            )
        if not target.exists() or overwrite:
            tmp = target.with_name(f".{target.name}.tmp")
            shutil.copyfile(wheel, tmp)
            os.replace(tmp, target)
    return write_index(hub_dir)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(f"    {link}<br>" for link in links)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n'
        "  <head>\n"
        '    <meta charset="utf-8">\n'
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n"
        "  </head>\n"
        "  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n"
        f"{body}\n"
        "  </body>\n"
        "</html>\n"
    )


def _file_link(f: HubFile) -> str:
    href = f"../../{FILES_DIR}/{quote(f.filename)}#sha256={f.sha256}"
    attrs = f'href="{html.escape(href)}"'
    if f.requires_python:
        attrs += f' data-requires-python="{html.escape(f.requires_python)}"'
    return f"<a {attrs}>{html.escape(f.filename)}</a>"


def write_index(hub_dir: Path) -> list[HubFile]:
    """(Re)write ``simple/`` from the wheels in ``files/``; returns the files listed.

    Project pages whose wheels were all removed from ``files/`` are deleted, so the
    index never links to a missing file.
    """
    hub_dir = Path(hub_dir)
    simple = hub_dir / SIMPLE_DIR
    files = scan_hub(hub_dir)
    projects: dict[str, list[HubFile]] = {}
    for f in files:
        projects.setdefault(f.project, []).append(f)
    for project, project_files in projects.items():
        _write_atomic(
            simple / project / "index.html",
            _page(f"Links for {project}", [_file_link(f) for f in project_files]),
        )
    if simple.is_dir():
        for stale in simple.iterdir():
            if stale.is_dir() and stale.name not in projects:
                (stale / "index.html").unlink(missing_ok=True)
                if not any(stale.iterdir()):
                    stale.rmdir()
    root_links = [f'<a href="{quote(p)}/">{html.escape(p)}</a>' for p in sorted(projects)]
    _write_atomic(simple / "index.html", _page("Simple index", root_links))
    return files


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[IndexLink] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag != "a" or self._open is None:
            return
        href = self._open.get("href") or ""
        url, fragment = urldefrag(href)
        sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        self.links.append(
            IndexLink(
                text="".join(self._text).strip(),
                href=href,
                url=url,
                sha256=sha,
                requires_python=self._open.get("data-requires-python"),
            )
        )
        self._open = None


def parse_index_links(page: str) -> list[IndexLink]:
    """The links of a PEP 503 page (root or project page), attribute values unescaped."""
    parser = _LinkParser()
    parser.feed(page)
    parser.close()
    return parser.links
