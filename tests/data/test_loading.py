"""load_rows / to_environment_dataset: files and in-memory data into environment datasets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset, DatasetDict

import verifiers as vf
from verifiers.data import load_rows, to_environment_dataset
from verifiers.errors import ConfigError

VERL_ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "What is 2+3?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "5"},
        "extra_info": {"split": "train", "index": 0},
    },
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 7*6?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "42"},
        "extra_info": {"split": "train", "index": 1},
    },
]
QA_ROWS = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(5)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_parquet_round_trip_keeps_nested_columns(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    Dataset.from_list(VERL_ROWS).to_parquet(str(path))
    ds = load_rows(path, cache_dir=tmp_path / "cache")
    assert len(ds) == 2
    assert set(ds.column_names) == set(VERL_ROWS[0])
    assert ds[1]["prompt"] == VERL_ROWS[1]["prompt"]
    assert ds[0]["reward_model"]["ground_truth"] == "5"


def test_jsonl_and_json_array_files(tmp_path: Path) -> None:
    jsonl = write_jsonl(tmp_path / "rows.jsonl", QA_ROWS)
    assert load_rows(str(jsonl), cache_dir=tmp_path / "cache").to_list() == QA_ROWS
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(QA_ROWS))
    assert load_rows(array, cache_dir=tmp_path / "cache").to_list() == QA_ROWS


def test_save_to_disk_folders(tmp_path: Path) -> None:
    Dataset.from_list(QA_ROWS).save_to_disk(str(tmp_path / "single"))
    assert load_rows(tmp_path / "single").to_list() == QA_ROWS
    dd = DatasetDict({"train": Dataset.from_list(QA_ROWS[:3]), "test": Dataset.from_list(QA_ROWS[3:])})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert load_rows(tmp_path / "dict")["question"] == ["q0", "q1", "q2"]
    assert load_rows(tmp_path / "dict", split="test")["question"] == ["q3", "q4"]
    with pytest.raises(ConfigError, match=r"no split 'dev'; available splits: \['test', 'train'\]"):
        load_rows(tmp_path / "dict", split="dev")


def test_folder_of_files_split_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    Dataset.from_list(QA_ROWS[:2]).to_parquet(str(folder / "train-00000-of-00002.parquet"))
    Dataset.from_list(QA_ROWS[2:4]).to_parquet(str(folder / "train-00001-of-00002.parquet"))
    Dataset.from_list(QA_ROWS[4:]).to_parquet(str(folder / "test.parquet"))
    cache = tmp_path / "cache"
    assert load_rows(folder, cache_dir=cache)["question"] == ["q0", "q1", "q2", "q3"]
    assert load_rows(folder, split="test", cache_dir=cache)["question"] == ["q4"]
    with pytest.raises(ConfigError, match="none for split 'validation'"):
        load_rows(folder, split="validation", cache_dir=cache)


def test_folder_without_split_names_loads_every_file(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "part-a.jsonl", QA_ROWS[:2])
    write_jsonl(folder / "part-b.jsonl", QA_ROWS[2:])
    assert load_rows(folder, cache_dir=tmp_path / "cache").to_list() == QA_ROWS


def test_in_memory_sources() -> None:
    ds = Dataset.from_list(QA_ROWS)
    assert load_rows(ds) is ds
    assert load_rows(DatasetDict({"train": ds}))["question"] == ds["question"]
    assert load_rows(QA_ROWS).to_list() == QA_ROWS
    assert load_rows({"question": ["x"], "answer": ["y"]}).to_list() == [{"question": "x", "answer": "y"}]


def test_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist.*\.parquet, \.jsonl or \.json"):
        load_rows(tmp_path / "missing.parquet")
    csv = tmp_path / "rows.csv"
    csv.write_text("question,answer\nq,a\n")
    with pytest.raises(ConfigError, match=r"unknown dataset format '\.csv'.*accepted"):
        load_rows(csv)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no dataset files"):
        load_rows(tmp_path / "empty")
    with pytest.raises(ConfigError, match="empty"):
        load_rows([])
    with pytest.raises(ConfigError, match="rows must be dicts"):
        load_rows(["q1", "q2"])
    with pytest.raises(ConfigError, match="cannot load rows from a int"):
        load_rows(3)  # type: ignore[arg-type]
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    write_jsonl(mixed / "a.jsonl", QA_ROWS)
    Dataset.from_list(QA_ROWS).to_parquet(str(mixed / "b.parquet"))
    with pytest.raises(ConfigError, match="mixes parquet and json"):
        load_rows(mixed)


def test_verl_layout_maps_to_environment_columns(tmp_path: Path) -> None:
    path = tmp_path / "verl.parquet"
    Dataset.from_list(VERL_ROWS).to_parquet(str(path))
    ds = to_environment_dataset(load_rows(path, cache_dir=tmp_path / "cache"))
    assert ds["answer"] == ["5", "42"]
    assert json.loads(ds[0]["info"]) == {"split": "train", "index": 0, "data_source": "openai/gsm8k"}
    assert ds[1]["prompt"] == VERL_ROWS[1]["prompt"]
    assert "reward_model" in ds.column_names  # other columns are kept

    env = vf.SingleTurnEnv(dataset=ds)
    row = env.dataset.rows[1]
    assert row["prompt"] == VERL_ROWS[1]["prompt"]
    assert row["answer"] == "42"
    assert row["info"]["index"] == 1


def test_user_column_names_and_dotted_keys() -> None:
    rows = [{"problem": "1+1", "solution": {"final": 2}, "source": "toy", "meta": {"level": 1}}]
    ds = to_environment_dataset(
        rows, question_key="problem", answer_key="solution.final", task_key="source", info_key="meta"
    )
    assert ds[0]["question"] == "1+1" and ds[0]["answer"] == "2" and ds[0]["task"] == "toy"
    env = vf.SingleTurnEnv(dataset=ds, system_prompt="Solve.")
    row = env.dataset.rows[0]
    assert row["prompt"] == [{"role": "system", "content": "Solve."}, {"role": "user", "content": "1+1"}]
    assert (row["answer"], row["task"], row["info"]) == ("2", "toy", {"level": 1})


def test_chat_column_under_another_name_and_list_ground_truth() -> None:
    rows = [{"messages": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": ["a", "b"]}}]
    ds = to_environment_dataset(rows, prompt_key="messages")
    assert ds.column_names.count("prompt") == 1 and "messages" not in ds.column_names
    assert json.loads(ds[0]["answer"]) == ["a", "b"]


def test_mapping_errors_name_the_columns() -> None:
    with pytest.raises(ConfigError, match=r"neither a prompt column 'prompt'.*\['text'\]"):
        to_environment_dataset([{"text": "x"}])
    with pytest.raises(ConfigError, match="answer_key 'label' is not a column"):
        to_environment_dataset(QA_ROWS, answer_key="label")
    with pytest.raises(ConfigError, match="already have a 'question' column"):
        to_environment_dataset(
            [{"question": "a", "q2": "b", "prompt_text": "c"}], prompt_key="x", question_key="q2"
        )


def test_importing_the_data_package_pulls_no_heavy_libraries() -> None:
    code = (
        "import sys, verifiers.data; "
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
