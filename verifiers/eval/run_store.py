"""One evaluation run on disk: ``<output_dir>/evals/<env>--<model>/<run-id>/``.

Why it is built this way:

* ``results.jsonl`` is append-only while the run is going: each finished group is
  written and flushed at once, so a crash, Ctrl-C or ``kill -9`` loses at most the
  groups still in flight. Reading tolerates a torn last line (the one ``kill -9`` may
  leave behind).
* ``metadata.json`` is rewritten as the run progresses, always through a temporary
  file and ``os.replace``, so a reader sees the old or the new version, never half.
* Resuming compacts ``results.jsonl`` first (atomically, the same way): the rows that
  will be rerun and any torn line are dropped, so after the resumed run every rollout
  key ``(example_id, rollout_index)`` appears exactly once.
* API keys never reach this directory: only the *name* of the key variable is stored,
  and header values whose names look like credentials are redacted.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, Field

from verifiers.errors import ConfigError
from verifiers.types import RolloutResult, SamplingArgs

RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"
RunStatus = Literal["running", "complete", "interrupted", "failed"]
RolloutKey = tuple[int, int]
"""``(example_id, rollout_index)``: what identifies a rollout across resumes."""

_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "password", "credential", "session")
REDACTED = "<redacted>"


class RunCounts(BaseModel):
    expected: int = 0
    """Rollouts the run is meant to have: examples x rollouts per example."""
    saved: int = 0
    """Distinct rollout keys in results.jsonl."""
    errored: int = 0
    """Saved rollouts that ended with an error (they are rerun by ``--resume``)."""


class RunVersions(BaseModel):
    verifiers: str = ""
    python: str = ""
    openai: str = ""


class RunMetadata(BaseModel):
    """Everything needed to understand, compare and resume a run. Never holds a secret."""

    run_id: str
    env_id: str
    env_args: dict[str, Any] = Field(default_factory=dict)
    model: str
    model_alias: str | None = None
    """The endpoints-registry alias given to ``-m``, if one was."""
    base_url: str = ""
    endpoints: list[str] = Field(default_factory=list)
    """Base URLs of every endpoint requests were spread over."""
    api_key_var: str = "OPENAI_API_KEY"
    """The *name* of the variable holding the key; the key itself is never written."""
    headers: dict[str, str] = Field(default_factory=dict)
    sampling_args: SamplingArgs = Field(default_factory=dict)
    num_examples: int
    rollouts_per_example: int
    example_ids: list[int] = Field(default_factory=list)
    """The examples evaluated (the first ``num_examples`` rows of the eval split), in order."""
    max_concurrent: int = -1
    rollout_timeout_s: float | None = None
    max_retries: int | None = None
    status: RunStatus = "running"
    created_at: str = ""
    updated_at: str = ""
    duration_s: float = 0.0
    """Wall time spent running, summed over the first run and every resume."""
    resumes: int = 0
    counts: RunCounts = Field(default_factory=RunCounts)
    errors_by_type: dict[str, int] = Field(default_factory=dict)
    avg_reward: float | None = None
    avg_metrics: dict[str, float] = Field(default_factory=dict)
    versions: RunVersions = Field(default_factory=RunVersions)

    def matches(self, other: RunMetadata) -> list[str]:
        """Names of the fields that must agree for ``other`` to resume this run and do not."""
        fields = ("env_id", "env_args", "model", "sampling_args", "num_examples", "rollouts_per_example")
        return [f for f in fields if _canonical(getattr(self, f)) != _canonical(getattr(other, f))]

    @property
    def is_incomplete(self) -> bool:
        c = self.counts
        return self.status != "complete" or c.saved < c.expected or c.errored > 0


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_run_id() -> str:
    """Sortable: UTC timestamp (to the microsecond) then a short random suffix."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


def model_dir_name(env_id: str, model: str) -> str:
    return f"{env_id}--{model.replace('/', '--')}"


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Header values whose names look like credentials are replaced by ``<redacted>``."""
    return {
        k: (REDACTED if any(w in k.lower() for w in _SECRET_HEADER_WORDS) else v) for k, v in headers.items()
    }


def versions() -> RunVersions:
    import importlib.metadata

    def version_of(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return ""

    return RunVersions(
        verifiers=version_of("verifiers"), python=platform.python_version(), openai=version_of("openai")
    )


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temporary file in the same directory and ``os.replace`` it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be shared and read
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_metadata(run_dir: Path) -> RunMetadata | None:
    """The run's metadata, or None if missing or unreadable (not a run directory)."""
    try:
        return RunMetadata.model_validate_json((run_dir / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class ResultsFile:
    """What is in a results.jsonl: the valid rows by key, and what had to be skipped."""

    rows: dict[RolloutKey, str] = field(default_factory=dict)
    """The raw JSON line (without newline) of each rollout key; a later row wins over an earlier one."""
    torn_tail: bool = False
    """The last line was incomplete (a kill mid-write); it is ignored."""
    bad_lines: int = 0
    """Other lines that did not parse (ignored)."""
    duplicates: int = 0
    """Rows whose key appeared earlier in the file."""


def _key_of(obj: Any) -> RolloutKey | None:
    if not isinstance(obj, dict):
        return None
    eid, idx = obj.get("example_id"), obj.get("rollout_index", 0)
    if not isinstance(eid, int) or not isinstance(idx, int):
        return None
    return eid, idx


def scan_results(path: Path) -> ResultsFile:
    """Read results.jsonl keyed by rollout, tolerating a torn last line."""
    out = ResultsFile()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline, else the unterminated tail
    if last.strip():
        out.torn_tail = _key_of(_loads(last)) is None
        if not out.torn_tail:
            lines.append(last)
    for raw in lines:
        if not raw.strip():
            continue
        key = _key_of(_loads(raw))
        if key is None:
            out.bad_lines += 1
            continue
        if key in out.rows:
            out.duplicates += 1
            del out.rows[key]  # keep file order of the surviving (latest) row
        out.rows[key] = raw.decode("utf-8")
    return out


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def read_results(run_dir: Path) -> list[RolloutResult]:
    """Every saved rollout of a run (one per key), in file order."""
    scanned = scan_results(Path(run_dir) / RESULTS_FILE)
    return [RolloutResult.model_validate_json(line) for line in scanned.rows.values()]


def iter_run_dirs(evals_dir: Path, env_id: str, model: str) -> Iterator[Path]:
    """Run directories for an env/model pair, newest first (run ids sort by time)."""
    parent = Path(evals_dir) / model_dir_name(env_id, model)
    if not parent.is_dir():
        return
    yield from sorted((p for p in parent.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)


def find_resumable_run(evals_dir: Path, wanted: RunMetadata) -> Path | None:
    """The latest run under ``evals_dir`` with the same configuration that is not finished cleanly."""
    for d in iter_run_dirs(evals_dir, wanted.env_id, wanted.model):
        meta = read_metadata(d)
        if meta is None or meta.matches(wanted):
            continue
        if meta.is_incomplete:
            return d
        return None  # the latest matching run is complete: nothing to resume
    return None


def _row_summary(line: str) -> tuple[float, dict[str, float], str | None]:
    obj = json.loads(line)
    err = obj.get("error")
    return (
        float(obj.get("reward") or 0.0),
        dict(obj.get("metrics") or {}),
        (err or {}).get("type") if err else None,
    )


class RunStore:
    """Writes one run directory: results appended per group, metadata rewritten atomically.

    Keeps a small per-rollout summary (reward, metrics, error type) in memory so that
    metadata averages and counts are exact without re-reading the file.
    """

    def __init__(self, run_dir: Path, metadata: RunMetadata, *, metadata_interval_s: float = 0.5) -> None:
        self.run_dir = Path(run_dir)
        self.metadata = metadata
        self.metadata_interval_s = metadata_interval_s
        self._rows: dict[RolloutKey, tuple[float, dict[str, float], str | None]] = {}
        self._file: IO[str] | None = None
        self._last_meta_write = 0.0
        self._session_start = time.monotonic()
        self._prior_duration = metadata.duration_s

    # -- creating and reopening
    @classmethod
    def create(cls, evals_dir: Path, metadata: RunMetadata) -> RunStore:
        """A new run directory named by ``metadata.run_id`` (a fresh one is assigned if empty)."""
        if not metadata.run_id:
            metadata.run_id = new_run_id()
        run_dir = Path(evals_dir) / model_dir_name(metadata.env_id, metadata.model) / metadata.run_id
        run_dir.mkdir(parents=True, exist_ok=False)
        now = utc_now()
        metadata.created_at = metadata.created_at or now
        metadata.updated_at = now
        metadata.status = "running"
        store = cls(run_dir, metadata)
        store._open_results()
        store.write_metadata(force=True)
        return store

    @classmethod
    def resume(
        cls, run_dir: Path, wanted: RunMetadata, *, rerun_whole_groups: bool = False
    ) -> tuple[RunStore, set[RolloutKey]]:
        """Reopen ``run_dir`` for more rollouts; return the store and the keys still to run.

        Still to run: every expected key that is missing or saved with an error; with
        ``rerun_whole_groups`` (group reward functions need the whole group), every key of
        an example that has any such member. results.jsonl is compacted first so no row
        being rerun (and no torn line) survives.
        """
        run_dir = Path(run_dir)
        old = read_metadata(run_dir)
        if old is None:
            raise ConfigError(
                f"{str(run_dir)!r} is not a run directory (no readable {METADATA_FILE}); cannot resume it"
            )
        diff = old.matches(wanted)
        if diff:
            raise ConfigError(
                f"cannot resume {str(run_dir)!r}: it was run with different {', '.join(diff)}; "
                "pass the same settings or start a new run without --resume"
            )
        if old.example_ids and wanted.example_ids and old.example_ids != wanted.example_ids:
            raise ConfigError(
                f"cannot resume {str(run_dir)!r}: the environment's eval examples changed since it was run "
                "(different example ids); start a new run"
            )
        scanned = scan_results(run_dir / RESULTS_FILE)
        expected = {(eid, i) for eid in wanted.example_ids for i in range(wanted.rollouts_per_example)}
        keep: dict[RolloutKey, str] = {}
        todo: set[RolloutKey] = set(expected)
        for key, line in scanned.rows.items():
            if key not in expected:
                continue  # not part of this run's subset: drop it
            if json.loads(line).get("error"):
                continue
            keep[key] = line
            todo.discard(key)
        if rerun_whole_groups:
            redo_examples = {eid for eid, _ in todo}
            todo |= {k for k in expected if k[0] in redo_examples}
            keep = {k: v for k, v in keep.items() if k[0] not in redo_examples}
        # Compact: the file now holds exactly the rows we keep, each once, whole lines only.
        atomic_write_text(run_dir / RESULTS_FILE, "".join(line + "\n" for line in keep.values()))

        meta = wanted.model_copy(deep=True)
        meta.run_id = old.run_id
        meta.created_at = old.created_at
        meta.duration_s = old.duration_s
        meta.resumes = old.resumes + 1
        meta.status = "running"
        meta.updated_at = utc_now()
        store = cls(run_dir, meta)
        store._rows = {k: _row_summary(v) for k, v in keep.items()}
        store._open_results()
        store.write_metadata(force=True)
        return store, todo

    def _open_results(self) -> None:
        self._file = open(self.run_dir / RESULTS_FILE, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    # -- writing
    def append_group(self, group: Sequence[RolloutResult]) -> None:
        """Append a finished group and flush it to the OS (survives a kill of this process)."""
        if self._file is None:
            raise RuntimeError("RunStore is closed")
        lines = []
        for r in group:
            lines.append(r.model_dump_json())
            self._rows[(r.example_id, r.rollout_index)] = (
                r.reward,
                dict(r.metrics),
                r.error.type if r.error is not None else None,
            )
        self._file.write("".join(line + "\n" for line in lines))
        self._file.flush()
        self.write_metadata()

    def refresh_metadata(self) -> RunMetadata:
        """Recompute counts, averages and timing from the rows saved so far."""
        m = self.metadata
        values = list(self._rows.values())
        errors = Counter(err for _, _, err in values if err is not None)
        m.counts = RunCounts(
            expected=m.num_examples * m.rollouts_per_example,
            saved=len(values),
            errored=sum(errors.values()),
        )
        m.errors_by_type = dict(errors.most_common())
        m.avg_reward = sum(r for r, _, _ in values) / len(values) if values else None
        sums: dict[str, float] = {}
        counts: Counter[str] = Counter()
        for _, metrics, _ in values:
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
                counts[k] += 1
        m.avg_metrics = {k: sums[k] / counts[k] for k in sums}
        m.duration_s = round(self._prior_duration + time.monotonic() - self._session_start, 3)
        m.updated_at = utc_now()
        return m

    def write_metadata(self, *, force: bool = False) -> None:
        """Rewrite metadata.json atomically; between forced writes at most every ``metadata_interval_s``."""
        now = time.monotonic()
        if not force and now - self._last_meta_write < self.metadata_interval_s:
            return
        self._last_meta_write = now
        self.refresh_metadata()
        atomic_write_text(self.run_dir / METADATA_FILE, self.metadata.model_dump_json(indent=2) + "\n")

    def finish(self, status: RunStatus) -> RunMetadata:
        """Set the final status, write metadata, close the results file."""
        self.metadata.status = status
        self.write_metadata(force=True)
        self.close()
        return self.metadata

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def saved_keys(self) -> set[RolloutKey]:
        return set(self._rows)


def expected_keys(example_ids: Iterable[int], rollouts_per_example: int) -> set[RolloutKey]:
    return {(eid, i) for eid in example_ids for i in range(rollouts_per_example)}
