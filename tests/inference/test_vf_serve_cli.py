"""vf-serve as a user meets it: a real process, its banner, its log lines and its one-line errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest

SERVE = [sys.executable, "-m", "verifiers.cli.serve"]


def _read_until(path: Path, needle: str, proc: subprocess.Popen[str], timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text()
        if needle in text:
            return text
        if proc.poll() is not None:
            raise AssertionError(f"vf-serve exited with {proc.returncode}:\n{text}")
        time.sleep(0.05)
    raise AssertionError(f"no {needle!r} within {timeout_s}s:\n{path.read_text()}")


def test_banner_after_listening_then_request_and_throughput_lines(tiny_dir: Path, procs: Any, tmp_path: Path) -> None:
    port = procs.free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*SERVE, str(tiny_dir), "--port", str(port), "--served-model-name", "tiny",
                                 "--log-requests", "--stats-every", "0.5"], stdout=out, stderr=subprocess.STDOUT,
                                text=True)
    try:
        _read_until(log, "serving tiny on", proc)
        # The line promises a listening server: the first request right after it succeeds.
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=60)
        try:
            r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=5, temperature=0)
        finally:
            client.close()
        assert r.usage is not None
        text = _read_until(log, "throughput: 1 requests,", proc)
        assert f"serving tiny on http://127.0.0.1:{port}/v1" in text
        assert "POST /v1/chat/completions 200 " in text and f" {r.usage.completion_tokens} tokens" in text
        line = next(ln for ln in text.splitlines() if ln.startswith("throughput: 1 requests"))
        assert line.startswith(f"throughput: 1 requests, {r.usage.completion_tokens} tokens generated")
        assert line.endswith("0 in flight")
        seen = text.count("throughput:")
        time.sleep(1.2)  # idle windows print nothing
        assert log.read_text().count("throughput:") == seen
    finally:
        procs.stop_process(proc)


def test_a_taken_port_is_one_line_and_exit_2(tiny_dir: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        start = time.monotonic()
        done = subprocess.run([*SERVE, str(tiny_dir), "--port", str(port)], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"vf-serve: port {port} on 127.0.0.1 is already in use (another vf-serve?): "
                                   "stop that process or choose another port with --port")
    assert "serving" not in done.stdout
    assert time.monotonic() - start < 60  # refused before the model loads


_PROGS = {"verifiers.cli.serve": "vf-serve", "verifiers.cli.tiny": "vf-tiny", "trainers.grpo.cli": "vf-train"}


@pytest.mark.parametrize("prog", list(_PROGS))
def test_without_the_train_extra_the_command_names_it(prog: str, tiny_dir: Path, tmp_path: Path,
                                                     procs: Any) -> None:
    # torch and transformers made unimportable, as in an install without the extra.
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "configs" / "quickstart.toml"
    # vf-serve binds its port before it imports torch: a free one, not the default 8000 (maybe taken).
    args = {"verifiers.cli.serve": [str(tiny_dir), "--port", str(procs.free_port())],
            "verifiers.cli.tiny": [str(tmp_path / "m")], "trainers.grpo.cli": [str(quickstart)]}[prog]
    code = ("import runpy, sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; "
            f"sys.argv = ['x', *{args!r}]; runpy.run_module({prog!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    root = Path(__file__).resolve().parents[2]  # run from elsewhere: the clone's path, never PyPI's verifiers
    assert done.stderr.startswith(f'{_PROGS[prog]} needs the train extra: pip install -e "{root}[train]" (missing: ')
    assert "Traceback" not in done.stderr


def test_a_broken_import_outside_the_extra_is_raised_not_hidden() -> None:
    from verifiers.cli.extras import exit_for_missing_extra

    with pytest.raises(ImportError, match="no_such_module"):
        try:
            import no_such_module  # noqa: F401
        except ImportError as exc:
            exit_for_missing_extra("vf-serve", exc)


def test_an_unknown_hugging_face_id_offline_says_so(tmp_path: Path, procs: Any) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([*SERVE, "vf-test-org/no-such-model", "--port", str(procs.free_port())], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "'vf-test-org/no-such-model' is not a local directory and not in the Hugging Face cache" in done.stderr
    assert "HF_HUB_OFFLINE is set" in done.stderr and "hf download vf-test-org/no-such-model" in done.stderr
    assert "Traceback" not in done.stderr


def test_device_cuda_with_a_cpu_only_torch_is_one_line(tiny_dir: Path, procs: Any) -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    done = subprocess.run([*SERVE, str(tiny_dir), "--device", "cuda", "--port", str(procs.free_port())],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("vf-serve: warning")]
    assert lines == [f"vf-serve: --device cuda, but torch {torch.__version__} is a CPU-only build: install a CUDA "
                     "build of torch (`pip install torch` from PyPI, see docs/install.md), or use --device cpu"]


def test_torch_threads_leave_a_core_for_the_event_loop_only_for_a_small_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU a small model gets the usable cores minus one (the loop writes every streamed token
    and its steps are short); from 5M parameters the matmuls dominate and get every core."""
    from verifiers.cli.serve import COMPUTE_BOUND_PARAMS, cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert cpu_threads(None, "cpu", COMPUTE_BOUND_PARAMS - 1) == max(1, cores - 1)
    assert cpu_threads(None, "cpu", COMPUTE_BOUND_PARAMS) == cores
    assert cpu_threads(3, "cpu", 10) == 3  # an explicit --threads wins
    assert cpu_threads(None, "cuda", 10**9) is None  # a GPU: torch's own setting
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu_threads(None, "cpu", 10**9) is None  # the user's explicit environment wins


def test_threads_below_one_is_one_line_and_exit_2(tiny_dir: Path) -> None:
    done = subprocess.run([*SERVE, str(tiny_dir), "--threads", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "vf-serve: --threads must be >= 1, got 0"


def test_no_fast_decode_says_so_and_serves_the_same_tokens(tiny_dir: Path, procs: Any, tmp_path: Path) -> None:
    """The engine's own decoding step is the default on CPU; ``--no-fast-decode`` switches to
    transformers' forward, says so on stderr, and a greedy completion is token for token the same."""
    answers, logs = {}, {}
    for flags in ((), ("--no-fast-decode",)):
        port = procs.free_port()
        log = tmp_path / f"serve{len(flags)}.log"
        with log.open("w") as out:
            proc = subprocess.Popen([*SERVE, str(tiny_dir), "--port", str(port), "--served-model-name", "tiny",
                                     "--quiet", *flags], stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            logs[flags] = _read_until(log, "serving tiny on", proc)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=60)
            try:
                r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "same?"}],
                                                   max_tokens=12, temperature=0,
                                                   extra_body={"return_token_ids": True, "ignore_eos": True})
            finally:
                client.close()
            answers[flags] = list(r.choices[0].token_ids)
        finally:
            procs.stop_process(proc)
    assert "decoding with" not in logs[()]
    assert "vf-serve: decoding with transformers' forward (fast_decode is off)" in logs[("--no-fast-decode",)]
    assert answers[()] == answers[("--no-fast-decode",)] and len(answers[()]) == 12


@pytest.mark.parametrize(("flags", "message"), [
    (["--tool-call-parser", "pythonic"], "vf-serve: tool call parser 'pythonic' is not supported"),
    (["--chat-template", "no-such-template"], "vf-serve: chat template 'no-such-template' is neither a file"),
])
def test_bad_template_options_are_one_line_and_exit_2(tiny_dir: Path, flags: list[str], message: str) -> None:
    done = subprocess.run([*SERVE, str(tiny_dir), "--port", "0", *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1


def test_chat_template_file_renders_the_prompt(tiny_dir: Path, procs: Any, tmp_path: Path) -> None:
    """``--chat-template FILE`` replaces the model's template for every request, tools included."""
    template = tmp_path / "t.jinja"
    template.write_text("{% for t in tools or [] %}T:{{ t.function.name }};{% endfor %}"
                        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}>")
    port = procs.free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*SERVE, str(tiny_dir), "--port", str(port), "--served-model-name", "tiny",
                                 "--chat-template", str(template)], stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        text = _read_until(log, "serving tiny on", proc)
        assert f"chat template: {template}" in text
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=60)
        tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
        try:
            r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                               tools=[tool], max_tokens=1, temperature=0,
                                               extra_body={"return_token_ids": True})
        finally:
            client.close()
        from verifiers.inference.engine.loading import load_tokenizer

        assert load_tokenizer(tiny_dir).decode(r.prompt_token_ids) == "T:add;<user>hi>"
        assert "does not render `tools`" not in log.read_text()
    finally:
        procs.stop_process(proc)
