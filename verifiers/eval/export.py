"""Reading saved eval runs, and exporting them as Hugging Face datasets.

A run directory (``outputs/evals/<env>--<model>/<run-id>/``) holds ``results.jsonl``
(one `RolloutResult` per line, appended as groups finish) and ``metadata.json``.
The reader here is deliberately forgiving: a run killed mid-write leaves a torn last
line or no metadata at all, and an older writer may have left metadata keys out. The viewer, the HTML report and the dataset export all read
runs through `load_run`, so they agree on what a run contains.

The export (`to_dataset`, `save_dataset`) writes one row per rollout with a fixed
schema. Structured fields (messages, info, metrics, errors, timing, usage, token
ids) are JSON strings: chat messages differ in shape from row to row (tool calls,
tool results, multimodal content), which Arrow cannot hold in one nested type
without losing keys. `results_from_dataset` turns rows back into `RolloutResult`s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from verifiers.errors import ConfigError
from verifiers.eval.run_store import METADATA_FILE, RESULTS_FILE, scan_results
from verifiers.types import RolloutResult

if TYPE_CHECKING:  # datasets is heavy to import; only the export functions need it
    from datasets import Dataset

__all__ = [
    "JSON_COLUMNS",
    "METADATA_FILE",
    "RESULTS_FILE",
    "LoadedRun",
    "find_runs",
    "is_run_dir",
    "load_run",
    "metadata_from_dataset",
    "read_metadata_dict",
    "results_from_dataset",
    "save_dataset",
    "to_dataset",
]


# -- reading a run directory -----------------------------------------------------------


class LoadedRun(BaseModel):
    """A run directory as read from disk."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: Path
    metadata: dict[str, Any] = Field(default_factory=dict)
    results: list[RolloutResult] = Field(default_factory=list)
    skipped_lines: int = 0
    """Lines of results.jsonl that were not valid rollouts (torn writes)."""
    superseded: int = 0
    """Rows replaced by a later row for the same (example_id, rollout_index), e.g. after a resume."""

    @property
    def env_id(self) -> str:
        return str(self.metadata.get("env_id") or _split_run_parent(self.path)[0])

    @property
    def model(self) -> str:
        return str(self.metadata.get("model") or _split_run_parent(self.path)[1])

    @property
    def run_id(self) -> str:
        return str(self.metadata.get("run_id") or self.path.name)

    @property
    def rollouts_per_example(self) -> int | None:
        value = self.metadata.get("rollouts_per_example")
        return value if isinstance(value, int) and value > 0 else None

    @property
    def duration_s(self) -> float | None:
        value = self.metadata.get("duration_s")
        return float(value) if isinstance(value, int | float) and value > 0 else None


def _split_run_parent(path: Path) -> tuple[str, str]:
    """``<env>--<model>`` from the parent directory name, for runs without metadata."""
    env, sep, model = path.parent.name.partition("--")
    return (env, model) if sep else (path.parent.name, "")


def is_run_dir(path: Path) -> bool:
    return (path / RESULTS_FILE).is_file() or (path / METADATA_FILE).is_file()


def find_runs(root: Path, max_depth: int = 3) -> list[Path]:
    """Run directories at most ``max_depth`` levels below ``root`` (``root`` itself included)."""
    found: list[Path] = []

    def walk(p: Path, depth: int) -> None:
        if is_run_dir(p):
            found.append(p)
            return
        if depth >= max_depth:
            return
        try:
            children = sorted(c for c in p.iterdir() if c.is_dir() and not c.name.startswith("."))
        except OSError:
            return
        for child in children:
            walk(child, depth + 1)

    if root.is_dir():
        walk(root, 0)
    return found


def read_metadata_dict(run_dir: Path) -> dict[str, Any]:
    """metadata.json as a dict; empty when missing or unreadable (a run that died before writing it)."""
    try:
        data = json.loads((run_dir / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_run(run_dir: Path) -> LoadedRun:
    """Read a run directory. Raises ConfigError when ``run_dir`` is not one.

    Rows are read with the run store's own scanner, so the viewer sees exactly what
    ``--resume`` sees: a torn last line is ignored and a later row for the same
    ``(example_id, rollout_index)`` replaces an earlier one.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist; pass a directory written by vf-eval -s")
    if not is_run_dir(run_dir):
        raise ConfigError(
            f"{run_dir} holds neither {RESULTS_FILE} nor {METADATA_FILE}; pass a run directory such as "
            "outputs/evals/<env>--<model>/<run-id>"
        )
    run = LoadedRun(path=run_dir, metadata=read_metadata_dict(run_dir))
    scanned = scan_results(run_dir / RESULTS_FILE)
    run.skipped_lines = scanned.bad_lines + int(scanned.torn_tail)
    run.superseded = scanned.duplicates
    for line in scanned.rows.values():
        try:
            run.results.append(RolloutResult.model_validate_json(line))
        except ValidationError:
            run.skipped_lines += 1  # valid JSON with a key, but not a rollout this version can read
    return run


# -- export ----------------------------------------------------------------------------

JSON_COLUMNS = (
    "prompt",
    "completion",
    "info",
    "metrics",
    "error",
    "scoring_errors",
    "timing",
    "usage",
    "tokens",
)
"""Columns stored as JSON strings (``error`` is null when the rollout did not fail)."""
_INT_COLUMNS = ("example_id", "group_id", "rollout_index", "turns")
_STR_COLUMNS = ("task", "answer", "stop_reason")


def _features() -> Any:
    from datasets import Features, Value

    spec: dict[str, Any] = {}
    for name in RolloutResult.model_fields:
        if name == "state":
            continue
        if name in _INT_COLUMNS:
            spec[name] = Value("int64")
        elif name in _STR_COLUMNS or name in JSON_COLUMNS:
            spec[name] = Value("string")
        elif name == "reward":
            spec[name] = Value("float64")
        elif name == "is_truncated":
            spec[name] = Value("bool")
        else:  # a field added to RolloutResult later: keep it, as JSON
            spec[name] = Value("string")
    return Features(spec)


def _row(result: RolloutResult, features: Any) -> dict[str, Any]:
    data = result.model_dump(mode="json")
    row: dict[str, Any] = {}
    for name, feature in features.items():
        value = data.get(name)
        if feature.dtype == "string" and name not in _STR_COLUMNS:
            row[name] = None if value is None else json.dumps(value, ensure_ascii=False)
        else:
            row[name] = value
    return row


def to_dataset(run_dir: Path) -> Dataset:
    """The rollouts of a run as a `datasets.Dataset` (one row per rollout).

    The run's metadata travels in ``dataset.info.description`` as JSON.
    """
    from datasets import Dataset, DatasetInfo

    run = load_run(run_dir)
    features = _features()
    rows = [_row(r, features) for r in run.results]
    columns = {name: [row[name] for row in rows] for name in features}
    info = DatasetInfo(
        description=json.dumps(run.metadata, ensure_ascii=False, default=str), features=features
    )
    return Dataset.from_dict(columns, features=features, info=info)


def save_dataset(run_dir: Path, out_dir: Path) -> Path:
    """Write the run's rollouts with ``Dataset.save_to_disk``; load back with ``datasets.load_from_disk``."""
    out_dir = Path(out_dir)
    if out_dir.resolve() == Path(run_dir).resolve():
        raise ConfigError(f"--save-dataset target {out_dir} is the run directory itself; pick another folder")
    to_dataset(run_dir).save_to_disk(str(out_dir))
    return out_dir


def results_from_dataset(dataset: Any) -> list[RolloutResult]:
    """Inverse of `to_dataset`: rebuild `RolloutResult`s from the exported rows."""
    out: list[RolloutResult] = []
    for row in dataset:
        data = dict(row)
        for name, value in data.items():
            if isinstance(value, str) and name not in _STR_COLUMNS:
                data[name] = json.loads(value)
        out.append(RolloutResult.model_validate(data))
    return out


def metadata_from_dataset(dataset: Any) -> dict[str, Any]:
    """The run metadata stored by `to_dataset` ({} when absent)."""
    try:
        data = json.loads(dataset.info.description or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
