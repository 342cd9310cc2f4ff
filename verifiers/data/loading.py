"""Read training/eval rows from files or memory, and map their columns to what environments expect.

`load_rows` accepts what RL datasets are usually shipped as (verl: parquet; many
others: jsonl; HF: ``save_to_disk`` folders or in-memory datasets) and always
returns a `datasets.Dataset`, columns untouched. `to_environment_dataset` then renames
the user's columns to the environment's vocabulary (``prompt`` or ``question``,
``answer``, ``task``, ``info``), including verl's layout (``prompt`` as chat messages,
``reward_model.ground_truth`` as the answer, ``extra_info`` as info).

``datasets`` is imported inside the functions so that importing this module is cheap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifiers.errors import ConfigError

if TYPE_CHECKING:
    from datasets import Dataset

FILE_FORMATS: dict[str, str] = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
ACCEPTED = (
    "a .parquet, .jsonl or .json file; a folder written by Dataset.save_to_disk; a folder of "
    ".parquet/.jsonl/.json files; a datasets.Dataset or DatasetDict; or a list of dicts"
)
KNOWN_SPLITS = ("train", "test", "validation", "valid", "val", "eval", "dev")


def load_rows(
    source: str | os.PathLike[str] | Dataset | Sequence[Mapping[str, Any]],
    *,
    split: str = "train",
    cache_dir: str | os.PathLike[str] | None = None,
) -> Dataset:
    """Rows from ``source`` as a `datasets.Dataset`, with whatever columns they have.

    ``split`` picks one split of a ``DatasetDict`` or, in a folder of files, the files
    named for it (``train.parquet``, ``train-00000-of-00002.parquet``, ``train/...``).
    ``cache_dir`` is where ``datasets`` keeps its Arrow copy of parquet/json files.
    """
    import datasets

    if isinstance(source, datasets.DatasetDict):
        return _pick_split(source, split, "the DatasetDict")
    if isinstance(source, datasets.Dataset):
        return source
    if isinstance(source, datasets.IterableDataset | datasets.IterableDatasetDict):
        raise ConfigError(f"streaming (iterable) datasets are not supported; accepted: {ACCEPTED}")
    if isinstance(source, str | os.PathLike):
        return _load_path(Path(source), split, cache_dir)
    if isinstance(source, Mapping):
        return _non_empty(datasets.Dataset.from_dict(dict(source)), "the dict of columns")
    if isinstance(source, Sequence):
        rows = list(source)
        if not rows:
            raise ConfigError("the list of rows is empty")
        bad = next((r for r in rows if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise ConfigError(f"rows must be dicts, got a {type(bad).__name__}; accepted: {ACCEPTED}")
        return datasets.Dataset.from_list([dict(r) for r in rows])
    raise ConfigError(f"cannot load rows from a {type(source).__name__}; accepted: {ACCEPTED}")


def _non_empty(ds: Dataset, where: str) -> Dataset:
    if len(ds) == 0:
        raise ConfigError(f"{where} has no rows")
    return ds


def _pick_split(dd: Any, split: str, where: str) -> Dataset:
    if split not in dd:
        raise ConfigError(f"{where} has no split {split!r}; available splits: {sorted(dd)}; pass split=...")
    return _non_empty(dd[split], f"split {split!r} of {where}")


def _load_path(path: Path, split: str, cache_dir: Any) -> Dataset:
    import datasets

    if not path.exists():
        raise ConfigError(f"dataset path {str(path)!r} does not exist; accepted: {ACCEPTED}")
    if path.is_file():
        return _load_files([path], path, cache_dir)
    if (path / "dataset_dict.json").is_file():
        return _pick_split(datasets.load_from_disk(str(path)), split, f"{str(path)!r}")
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        return _non_empty(datasets.load_from_disk(str(path)), f"{str(path)!r}")
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.suffix.lower() in FILE_FORMATS
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        raise ConfigError(f"folder {str(path)!r} holds no dataset files; accepted: {ACCEPTED}")
    return _load_files(_files_for_split(files, path, split), path, cache_dir)


def _split_of(file: Path, root: Path) -> str | None:
    """The split a file belongs to by its name or folder (``train.parquet``, ``test-0000.jsonl``, ``val/x.json``)."""
    for part in file.relative_to(root).parent.parts:
        if part.lower() in KNOWN_SPLITS:
            return part.lower()
    stem = file.name.split(".")[0].lower()
    for name in KNOWN_SPLITS:
        if stem == name or stem.startswith((f"{name}-", f"{name}_")):
            return name
    return None


def _files_for_split(files: list[Path], root: Path, split: str) -> list[Path]:
    splits = {f: _split_of(f, root) for f in files}
    named = {s for s in splits.values() if s is not None}
    if not named:
        return files
    chosen = [f for f, s in splits.items() if s == split.lower()]
    if not chosen:
        raise ConfigError(
            f"folder {str(root)!r} has files for splits {sorted(named)} but none for split {split!r}; pass split=..."
        )
    return chosen


def _load_files(files: list[Path], where: Path, cache_dir: Any) -> Dataset:
    import datasets

    kinds = {FILE_FORMATS.get(f.suffix.lower()) for f in files}
    if None in kinds:
        raise ConfigError(
            f"unknown dataset format {files[0].suffix or '(no suffix)'!r} at {str(where)!r}; accepted: {ACCEPTED}"
        )
    if len(kinds) > 1:
        raise ConfigError(f"folder {str(where)!r} mixes parquet and json files; keep one format per split")
    paths = [str(f) for f in files]
    cache = None if cache_dir is None else str(cache_dir)
    try:
        if kinds == {"parquet"}:
            ds = datasets.Dataset.from_parquet(paths, cache_dir=cache)
        else:
            ds = datasets.Dataset.from_json(paths, cache_dir=cache)
    except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as exc:
        raise ConfigError(f"could not read {str(where)!r}: {type(exc).__name__}: {exc}") from exc
    return _non_empty(ds, f"{str(where)!r}")


# -- column mapping ------------------------------------------------------------------------
def _get_path(row: Mapping[str, Any], dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _as_answer(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple | Mapping):
        return json.dumps(value)
    return str(value)


def _has(columns: list[str], key: str) -> bool:
    return key in columns or ("." in key and key.split(".", 1)[0] in columns)


def to_environment_dataset(
    rows: Dataset | Sequence[Mapping[str, Any]] | str | os.PathLike[str],
    *,
    prompt_key: str = "prompt",
    question_key: str = "question",
    answer_key: str = "answer",
    task_key: str = "task",
    info_key: str = "info",
) -> Dataset:
    """Rows with the columns an `Environment` reads: ``prompt`` or ``question``, ``answer``, ``task``, ``info``.

    Keys name the user's columns; a dotted key reads inside a dict column
    (``answer_key="reward_model.ground_truth"``). Defaults understand verl datasets:
    without an ``answer`` column, ``reward_model.ground_truth`` is the answer; without an
    ``info`` column, ``extra_info`` (plus ``data_source``) becomes the info (as JSON, so
    Arrow does not pad dicts with ``None`` keys). Other columns are kept.
    """
    ds = load_rows(rows)
    cols = list(ds.column_names)
    renames: dict[str, str] = {}
    computed: dict[str, Any] = {}  # target column -> function(row) -> value

    if _has(cols, prompt_key):
        target, source = "prompt", prompt_key
    elif _has(cols, question_key):
        target, source = "question", question_key
    else:
        raise ConfigError(
            f"rows have neither a prompt column {prompt_key!r} (chat messages) nor a question column "
            f"{question_key!r} (text); columns present: {cols}; pass prompt_key=... or question_key=..."
        )
    _plan(cols, target, source, renames, computed, str_value=False)

    if _has(cols, answer_key):
        _plan(cols, "answer", answer_key, renames, computed, str_value=True)
    elif answer_key != "answer":
        raise ConfigError(f"answer_key {answer_key!r} is not a column (columns present: {cols})")
    elif "reward_model" in cols:
        computed["answer"] = lambda r: _as_answer(_get_path(r, "reward_model.ground_truth"))

    if _has(cols, task_key):
        _plan(cols, "task", task_key, renames, computed, str_value=True)
    elif task_key != "task":
        raise ConfigError(f"task_key {task_key!r} is not a column (columns present: {cols})")

    if _has(cols, info_key):
        _plan(cols, "info", info_key, renames, computed, str_value=False)
    elif info_key != "info":
        raise ConfigError(f"info_key {info_key!r} is not a column (columns present: {cols})")
    elif "extra_info" in cols or "data_source" in cols:
        computed["info"] = _verl_info

    for old, new in renames.items():
        ds = ds.rename_column(old, new)
    if computed:
        ds = ds.map(lambda r: {k: f(r) for k, f in computed.items()}, desc="mapping columns")
    return ds


def _plan(
    cols: list[str],
    target: str,
    source: str,
    renames: dict[str, str],
    computed: dict[str, Any],
    *,
    str_value: bool,
) -> None:
    """Decide how ``target`` is made from ``source``: nothing, a rename, or a computed column."""
    if source == target:
        return
    if target in cols:
        raise ConfigError(
            f"cannot map column {source!r} to {target!r}: the rows already have a {target!r} column; "
            f"drop or rename it first"
        )
    if "." in source and source not in cols:
        if str_value:
            computed[target] = lambda r: _as_answer(_get_path(r, source))
        else:
            computed[target] = lambda r: _get_path(r, source)
        return
    renames[source] = target


def _verl_info(row: Mapping[str, Any]) -> str:
    info: dict[str, Any] = {}
    extra = row.get("extra_info")
    if isinstance(extra, Mapping):
        info.update({k: v for k, v in extra.items() if v is not None})
    elif isinstance(extra, str) and extra:
        try:
            parsed = json.loads(extra)
        except json.JSONDecodeError:
            parsed = {"extra_info": extra}
        info.update(parsed if isinstance(parsed, dict) else {"extra_info": parsed})
    if row.get("data_source") is not None:
        info.setdefault("data_source", row["data_source"])
    return json.dumps(info)
