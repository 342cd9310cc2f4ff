"""What a converted model directory holds, recorded when it is written and checked when it is handed out.

A conversion in the cache is reused for months; a disk error, a stray edit or a half-finished
copy can change a weight file in between, and a damaged model trains and serves without a word
(it is just worse). Every converted directory therefore records, in its ``gguf_source.json``,
each file's size, modification time and sha256. Handing a directory out checks the cheap part
(sizes and times: one ``stat`` a file); a file whose size or time moved is hashed, and only a
changed hash counts as damage. ``vf-model verify`` hashes every file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifiers.models.cache import sha256_file, temp_sibling

SOURCE_FILE = "gguf_source.json"
"""Written into every converted directory: which file (and hash) it came from, how, and what it holds."""


UNRECORDED = f"{SOURCE_FILE}: no file records (converted before records were kept)"


def file_records(directory: Path) -> dict[str, dict[str, Any]]:
    """Size, mtime and sha256 of every file in ``directory`` (``SOURCE_FILE`` aside), by relative path."""
    records = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != SOURCE_FILE):
        st = path.stat()
        records[path.relative_to(directory).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                            "sha256": sha256_file(path)}
    return records


def read_source(directory: Path) -> dict[str, Any] | None:
    """The directory's ``SOURCE_FILE`` (None when it has none or it does not parse)."""
    try:
        data = json.loads((directory / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record_files(directory: Path, source: dict[str, Any]) -> None:
    """Write ``source`` with the records of every file now in ``directory`` as its ``SOURCE_FILE``
    (atomically: a reader never sees half a record)."""
    text = json.dumps({**source, "files": file_records(directory)}, indent=2) + "\n"
    tmp = temp_sibling(directory / SOURCE_FILE)
    tmp.write_text(text)
    tmp.replace(directory / SOURCE_FILE)


def changed_files(directory: Path, *, full: bool = False) -> list[str]:
    """What differs from the record: ``"model.safetensors: sha256 changed"``, ``"x: missing"``; [] when intact.

    ``full``: hash every file; otherwise only those whose size or mtime moved. A directory whose
    record lists no files (written before records were kept) is reported as such.
    """
    source = read_source(directory)
    if source is None:
        return [f"{SOURCE_FILE}: missing or unreadable"]
    files = source.get("files")
    if not isinstance(files, dict) or not files:
        return [UNRECORDED]
    problems = []
    for rel, rec in files.items():
        path = directory / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
            continue
        st = path.stat()
        if st.st_size != rec.get("size"):
            problems.append(f"{rel}: {st.st_size} bytes, recorded {rec.get('size')}")
        elif (full or st.st_mtime_ns != rec.get("mtime_ns")) and sha256_file(path) != rec.get("sha256"):
            problems.append(f"{rel}: sha256 changed since it was written")
    return problems


def intact(directory: Path, log: Callable[[str], None]) -> list[str]:
    """`changed_files` (cheap), after recording the files of a conversion made before records were kept."""
    problems = changed_files(directory)
    if problems == [UNRECORDED]:
        log(f"{directory}: recording its files' sha256 (a conversion from before they were recorded)")
        record_files(directory, read_source(directory) or {})
        return []
    return problems
