"""The command-line tools end to end: vf-serve as a real process, and vf-eval against it.

vf-eval runs the bundled reverse-text environment against the served tiny model over
HTTP and must save one row per rollout, each with the token ids and logprobs a trainer
would use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "tiny"


def start(args: list[str], log_dir: Path, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A Python subprocess whose output goes to files (a full pipe would block it)."""
    out = (log_dir / f"{name}.out").open("w")
    err = (log_dir / f"{name}.err").open("w")
    return subprocess.Popen([sys.executable, *args], stdout=out, stderr=err, text=True, cwd=log_dir, env=env)


@pytest.fixture(scope="module")
def vf_serve(tiny_dir: Path, procs: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``vf-serve`` on a free 127.0.0.1 port; yields its base URL and always terminates it."""
    logs = tmp_path_factory.mktemp("vf-serve")
    port = procs.free_port()
    proc = start(["-m", "verifiers.cli.serve", str(tiny_dir), "--port", str(port), "--served-model-name", MODEL],
                 logs, "serve")
    try:
        try:
            procs.wait_healthy(proc, f"http://127.0.0.1:{port}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{(logs / 'serve.err').read_text()}") from None
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        procs.stop_process(proc)


def test_vf_serve_answers_the_openai_client(vf_serve: str, ref) -> None:
    client = openai.OpenAI(base_url=vf_serve, api_key="EMPTY", max_retries=0, timeout=60)
    try:
        assert [m.id for m in client.models.list().data] == [MODEL]
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}],
                                           temperature=0, max_tokens=10, extra_body={"return_token_ids": True})
    finally:
        client.close()
    assert list(r.choices[0].token_ids) == ref.greedy_chat("hello", 10)
    assert r.weight_version == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [(["nope"], "not a saved model directory"), (["TINY", "--dtype", "float8"], "unknown dtype")],
    ids=["missing-dir", "bad-dtype"],
)
def test_vf_serve_with_bad_arguments_exits_2(tmp_path: Path, tiny_dir: Path, args: list[str], message: str,
                                             procs: Any) -> None:
    args = [str(tiny_dir) if a == "TINY" else str(tmp_path / a) if a == "nope" else a for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "verifiers.cli.serve", *args, "--port", str(procs.free_port())],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("vf-serve: ") and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_vf_eval_end_to_end_saves_rows_with_tokens(vf_serve: str, tmp_path: Path, tokenizer) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "environments" / "reverse_text"), str(REPO), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env.pop("OPENAI_API_KEY", None)
    sampling = {"logprobs": True, "extra_body": {"return_token_ids": True}}
    out_dir = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "verifiers.cli.eval", "reverse-text", "-b", vf_serve, "-m", MODEL,
         "-n", "2", "-r", "2", "-t", "16", "-s", "-o", str(out_dir), "-S", json.dumps(sampling), "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (results,) = out_dir.rglob("results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    assert len(rows) == 4
    assert sorted((r["example_id"], r["rollout_index"]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for row in rows:
        assert row["error"] is None
        (turn,) = row["tokens"]
        assert turn["prompt_ids"][-3:] == tokenizer.encode("nt\n", add_special_tokens=False)  # "assistant\n"
        assert 1 <= len(turn["completion_ids"]) <= 16
        assert len(turn["completion_logprobs"]) == len(turn["completion_ids"])
        text = tokenizer.decode(turn["completion_ids"], skip_special_tokens=True)
        assert row["completion"][-1]["content"] == text
    assert (results.parent / "metadata.json").is_file()
