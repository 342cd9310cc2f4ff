"""The fenced code blocks of README.md and docs/*.md, each with a stable id.

An id is ``<heading slug>#<n>``: the nearest heading above the block and the block's place
under it, so editing a snippet keeps its id (its classification stays valid) while a new
snippet gets a new id, which the test refuses until it is classified.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")


@dataclass(frozen=True)
class Snippet:
    file: str  # relative to the repository root: README.md, docs/x.md
    sid: str
    lang: str  # the fence's language tag ("" when none)
    code: str
    line: int  # of the opening fence, 1-based

    @property
    def key(self) -> tuple[str, str]:
        return (self.file, self.sid)


def slug(heading: str) -> str:
    """GitHub-style anchor: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def extract(root: Path, rel: str) -> list[Snippet]:
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    out: list[Snippet] = []
    section, count = "top", 0
    i = 0
    while i < len(lines):
        heading = _HEADING.match(lines[i])
        fence = _FENCE.match(lines[i])
        if heading:
            section, count = slug(heading.group(1)), 0
        elif fence:
            indent, lang = fence.groups()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
            body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:end]]
            count += 1
            out.append(Snippet(rel, f"{section}#{count}", lang, "\n".join(body) + "\n", i + 1))
            i = end
        i += 1
    return out


def doc_files(root: Path) -> list[str]:
    return ["README.md", *sorted(f"docs/{p.name}" for p in (root / "docs").glob("*.md"))]


def all_snippets(root: Path) -> list[Snippet]:
    return [s for rel in doc_files(root) for s in extract(root, rel)]


@dataclass(frozen=True)
class DocVenv:
    clone: Path  # a copy of the checkout's files (tracked + untracked, not ignored)
    venv: Path
    install: str  # the command that built it, from the README

    def env(self) -> dict[str, str]:
        """The shell of a user who activated the venv: nothing of this test's own Python leaks in."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        env["HF_HUB_OFFLINE"] = "1"  # a snippet that would download from the Hugging Face Hub fails, not hangs
        return env


def readme_install_command() -> str:
    """The README's test command up to its ``pip install`` (vLLM's CPU build and the suite run are left out)."""
    (snippet,) = [s for s in extract(ROOT, "README.md") if s.sid == "quickstart#2"]
    parts = [p.strip() for p in snippet.code.strip().split("&&")]
    last = max(i for i, p in enumerate(parts) if p.startswith("pip install"))
    return " && ".join(parts[: last + 1])


def copy_checkout(dest: Path) -> None:
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
