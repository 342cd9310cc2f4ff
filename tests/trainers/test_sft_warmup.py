"""The SFT warm-up (`sft_warmup_steps`) and its content-only loss (`sft_warmup_tokens = "content"`).

The content is what an expert message chose (its text, its tool calls' argument values); the
chat template's markup is not. A run with a warm-up trains on expert rows before its first
rollout, logs each warm-up step, and leaves the RL phase's learning rate as configured.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from trainers.grpo.config import load_config
from trainers.grpo.data.batch import expert_rows
from verifiers.errors import ConfigError
from verifiers.models.tiny import build_char_tokenizer

ROOT = Path(__file__).resolve().parents[2]
EXPERT = ROOT / "examples" / "data" / "key_lookup_expert.jsonl"


def trained_text(tok: Any, row: Any) -> str:
    return tok.decode([t for t, m in zip(row.input_ids[1:], row.loss_mask, strict=True) if m], skip_special_tokens=False)


@pytest.mark.parametrize("tool_format", ["json", "signature"])
def test_content_of_a_key_lookup_episode_is_the_key_and_the_answer(tool_format: str) -> None:
    tok = build_char_tokenizer(tool_format)
    episode = json.loads(EXPERT.read_text().splitlines()[0])
    key = episode["messages"][1]["tool_calls"][0]["function"]["arguments"]["key"]
    answer = episode["messages"][3]["content"]
    (content,) = expert_rows(tok, [episode["messages"]], 4096, tools=[episode["tools"]], tokens="content")
    (whole,) = expert_rows(tok, [episode["messages"]], 4096, tools=[episode["tools"]])
    assert trained_text(tok, content) == key + answer
    assert content.input_ids == whole.input_ids  # the same tokens, only the loss mask differs
    assert set(i for i, m in enumerate(content.loss_mask) if m) < set(i for i, m in enumerate(whole.loss_mask) if m)
    assert trained_text(tok, whole).startswith('<tool_call>{"name": "lookup"')


def test_content_is_text_and_argument_values_not_names_or_punctuation() -> None:
    tok = build_char_tokenizer()
    calls = [
        {"id": "a", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": "x y", "c": [7, 8]}'}},
        {"id": "b", "type": "function", "function": {"name": "find", "arguments": {"name": "name", "empty": ""}}},
    ]
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, 42.", "tool_calls": calls}]
    (row,) = expert_rows(tok, [conv], 4096, tokens="content")
    # the argument named "name" holds the value "name": the value is found after its own argument name
    assert trained_text(tok, row) == "Sure, 42." + "1" + "x y" + "7" + "8" + "name"


def test_a_conversation_without_content_is_left_out_of_the_content_rows() -> None:
    tok = build_char_tokenizer()
    call = {"id": "a", "type": "function", "function": {"name": "ping", "arguments": {}}}
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert expert_rows(tok, [conv], 4096, tokens="content") == []
    assert len(expert_rows(tok, [conv], 4096)) == 1


def test_a_tokenizer_that_does_not_reproduce_the_template_ids_is_refused() -> None:
    tok = build_char_tokenizer()

    class Shifted:
        """Renders like the tiny tokenizer, but tokenizes text to other ids."""

        chat_template = tok.chat_template

        def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
            return tok.apply_chat_template(*args, **kwargs)

        def __call__(self, text: str, **kwargs: Any) -> Any:
            enc = tok(text, **kwargs)
            return {**enc, "input_ids": [i + 1 for i in enc["input_ids"]]}

        def encode(self, text: str, **kwargs: Any) -> list[int]:
            return tok.encode(text, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(tok, name)

    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    with pytest.raises(ConfigError, match="same ids"):
        expert_rows(Shifted(), [conv], 4096, tokens="content")


def test_episodes_recorded_through_the_agent_program_load_as_expert_data() -> None:
    """examples/data/agent_lookup_expert.jsonl (vf-eval -s of the program against a scripted expert,
    converted by agent_lookup.expert_rows): string tool-call arguments, no content on the call turn."""
    from trainers.grpo.data.prompts import load_expert

    tok = build_char_tokenizer("signature")
    path = ROOT / "examples" / "data" / "agent_lookup_expert.jsonl"
    content = load_expert(str(path), tok, 4096, "content")
    whole = load_expert(str(path), tok, 4096, "all")
    assert len(content) == len(whole) == len(path.read_text().splitlines())
    episode = json.loads(path.read_text().splitlines()[0])
    key = json.loads(episode["messages"][1]["tool_calls"][0]["function"]["arguments"])["key"]
    assert trained_text(tok, content[0]) == key + episode["messages"][-1]["content"]
    assert trained_text(tok, whole[0]).startswith(f'<tool_call>{{"name": "lookup", "arguments": {{"key": "{key}"}}}}')


def test_a_warmup_needs_expert_data() -> None:
    with pytest.raises(ConfigError, match="expert_data"):
        load_config(None, {"sft_warmup_steps": 10})


def test_a_run_warms_up_on_expert_content_before_its_first_rollout(tmp_path: Path) -> None:
    import torch
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer

    env_root = ROOT / "environments" / "key_lookup"
    sys.path.insert(0, str(env_root))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config(None, {
            "model": "tiny", "tiny_model": {"hidden_size": 32, "tool_format": "signature"},
            "env_id": "key-lookup", "env_args": {"digits": 2, "num_train_examples": 8, "num_eval_examples": 0},
            "expert_data": str(EXPERT), "sft_warmup_steps": 60, "sft_warmup_batch_size": 8,
            "sft_warmup_learning_rate": 1e-2, "learning_rate": 1e-4, "output_dir": str(tmp_path / "run"),
            "algorithm": "grpo", "prompts_per_step": 2, "num_generations": 2, "max_steps": 1, "max_tokens": 8,
            "progress": False, "plot": False, "save_every": 0, "num_sample_completions": 0, "torch_threads": 1,
        })
        out = io.StringIO()
        trainer = GRPOTrainer(cfg, console=Console(file=out, width=200))
        trainer.train()
    finally:
        sys.path.remove(str(env_root))
        torch.set_num_threads(threads)
    log = [json.loads(line) for line in (tmp_path / "run" / "warmup.jsonl").read_text().splitlines()]
    assert [r["warmup_step"] for r in log] == list(range(1, 61))
    assert all(r["tokens"] == 8 * 3 for r in log)  # per row: the key and two digits, nothing else
    first, last = sum(r["loss"] for r in log[:10]) / 10, sum(r["loss"] for r in log[-10:]) / 10
    assert last < first - 0.3, (first, last)  # it learned something (the digits' and keys' marginals at least)
    text = out.getvalue()
    assert "sft warm-up: 60 steps on 1024 expert rows (content)" in text
    assert text.index("sft warm-up done") < text.index("step 1/1")
    # the banner comes first, and the warm-up's progress lines carry a rate and an estimate
    assert text.index("vf-train: device cpu") < text.index("sft warm-up: 60 steps")
    assert "torch threads 1 (torch_threads)" in text
    progress = [line for line in text.splitlines() if line.startswith("sft warm-up step ")]
    assert progress[0].startswith("sft warm-up step 1/60: loss ") and progress[-1].startswith("sft warm-up step 60/60")
    assert all(re.search(r"\| \d+\.\d\d s/step \| eta \d+:\d\d$", line) for line in progress), progress
    # the RL phase runs at its own learning rate, not the warm-up's
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["learning_rate"] == pytest.approx(1e-4)


def test_the_markup_phase_follows_the_content_phase(tmp_path: Path) -> None:
    """``sft_warmup_all_steps``: after the content steps, steps on every assistant token, one log."""
    import torch
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer

    with pytest.raises(ConfigError, match="add its steps to sft_warmup_steps"):
        load_config(None, {"expert_data": str(EXPERT), "sft_warmup_steps": 5, "sft_warmup_tokens": "all",
                           "sft_warmup_all_steps": 5})
    with pytest.raises(ConfigError, match="expert_data"):
        load_config(None, {"sft_warmup_all_steps": 5})
    env_root = ROOT / "environments" / "key_lookup"
    sys.path.insert(0, str(env_root))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config(None, {
            "model": "tiny", "tiny_model": {"hidden_size": 32, "tool_format": "signature"},
            "env_id": "key-lookup", "env_args": {"digits": 2, "num_train_examples": 8, "num_eval_examples": 0},
            "expert_data": str(EXPERT), "sft_warmup_steps": 6, "sft_warmup_all_steps": 4,
            "sft_warmup_all_data": str(EXPERT),  # named in the phase's line
            "sft_warmup_batch_size": 4, "learning_rate": 1e-4, "output_dir": str(tmp_path / "run"),
            "algorithm": "grpo", "prompts_per_step": 2, "num_generations": 2, "max_steps": 1, "max_tokens": 8,
            "progress": False, "plot": False, "save_every": 0, "num_sample_completions": 0, "torch_threads": 1,
        })
        out = io.StringIO()
        GRPOTrainer(cfg, console=Console(file=out, width=200)).train()
    finally:
        sys.path.remove(str(env_root))
        torch.set_num_threads(threads)
    log = [json.loads(line) for line in (tmp_path / "run" / "warmup.jsonl").read_text().splitlines()]
    assert [r["warmup_step"] for r in log] == list(range(1, 11))
    assert [r["trained"] for r in log] == ["content"] * 6 + ["all"] * 4
    assert all(r["tokens"] == 4 * 3 for r in log[:6]) and all(r["tokens"] > 4 * 40 for r in log[6:])
    text = out.getvalue()
    assert "6 steps on 1024 expert rows (content)" in text
    assert "4 steps on 1024 expert rows from key_lookup_expert.jsonl (all" in text
    assert text.index("(all assistant tokens)") < text.index("sft warm-up done") < text.index("step 1/1")


def test_the_markup_phase_reads_sft_warmup_all_data_where_it_is_set(tmp_path: Path) -> None:
    """Copies from one expert's episodes, then the markup and style of another's (agent_program_rl.toml:
    clean episodes, then a chatty expert's); a relative path resolves as expert_data's does."""
    from types import SimpleNamespace

    from trainers.grpo.data.prompts import expert_sets

    tok = build_char_tokenizer("signature")
    data = ROOT / "examples" / "data"
    (tmp_path / "data").mkdir()
    chatty = [line for line in (data / "agent_lookup_chatty.jsonl").read_text().splitlines()
              if "The value of" in line][:3]
    (tmp_path / "data" / "chatty.jsonl").write_text("\n".join(chatty) + "\n")
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "run.toml"
    config.write_text(f'expert_data = "{data / "agent_lookup_expert.jsonl"}"\nsft_warmup_steps = 5\n'
                      'sft_warmup_all_steps = 5\nsft_warmup_all_data = "data/chatty.jsonl"\n')
    cfg = load_config(config)
    assert cfg.sft_warmup_all_data == str(tmp_path / "data" / "chatty.jsonl")
    mix, content, whole = expert_sets(cfg, SimpleNamespace(mix=None), tok)
    assert mix == [] and len(content) == 512 and len(whole) == 3
    assert all("The value of" in trained_text(tok, row) for row in whole)
    assert not any("The value of" in trained_text(tok, row) for row in content)

    # switching the markup phase off (vf-train --sft_warmup_all_steps 0) leaves its file unread
    off = load_config(config, {"sft_warmup_all_steps": 0, "sft_warmup_all_data": str(tmp_path / "nope.jsonl")})
    assert len(expert_sets(off, SimpleNamespace(mix=None), tok)[1]) == 512
    missing = load_config(None, {"expert_data": str(EXPERT), "sft_warmup_all_steps": 5,
                                 "sft_warmup_all_data": str(tmp_path / "nope.jsonl")})
    with pytest.raises(ConfigError, match=r"sft_warmup_all_data .*nope\.jsonl does not exist"):
        expert_sets(missing, SimpleNamespace(mix=None), tok)


def test_ctrl_c_during_the_warmup_exits_130_with_one_line(tmp_path: Path, vf_train: list[str],
                                                          subprocess_env: dict[str, str]) -> None:
    import signal
    import subprocess

    args = ["--model", "tiny", "--tiny_model.hidden_size", "32", "--env_id", "key-lookup",
            "--expert_data", str(EXPERT), "--sft_warmup_steps", "100000", "--sft_warmup_batch_size", "4",
            "--output_dir", str(tmp_path / "run"), "--progress", "false", "--torch_threads", "1"]
    # Ctrl-C reaches vf-train as from a terminal even where this test runs in the background (`cmd &`
    # starts it with SIGINT ignored, which a child inherits and Python then leaves ignored).
    proc = subprocess.Popen([*vf_train, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=subprocess_env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the warm-up has started once it says so
            if line.startswith("sft warm-up:"):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted before the first RL step" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_warmed_up_model_is_saved_and_the_runs_chat_template_is_everywhere(tmp_path: Path) -> None:
    """``save_warmup_model``: what the warm-up alone made, beside ``final_model``; ``chat_template``:
    the learner's and the engine's tokenizer render with it, and the saved models carry it."""
    import torch
    from rich.console import Console

    from trainers.grpo.trainer import GRPOTrainer
    from verifiers.inference.engine.loading import load_tokenizer
    from verifiers.models.tiny import chat_template

    template = "{{ '#' }}" + chat_template("signature")  # the tiny template, every prompt opened by '#'
    env_root = ROOT / "environments" / "key_lookup"
    sys.path.insert(0, str(env_root))
    threads = torch.get_num_threads()
    try:
        cfg = load_config(None, {
            "model": "tiny", "tiny_model": {"hidden_size": 32, "tool_format": "signature"},
            "env_id": "key-lookup", "env_args": {"digits": 2, "num_train_examples": 8, "num_eval_examples": 0},
            "expert_data": str(EXPERT), "sft_warmup_steps": 3, "sft_warmup_batch_size": 4,
            "sft_warmup_learning_rate": 1e-2, "save_warmup_model": True, "chat_template": template,
            "output_dir": str(tmp_path / "run"), "prompts_per_step": 2, "num_generations": 2, "max_steps": 1,
            "max_tokens": 8, "progress": False, "plot": False, "save_every": 0, "num_sample_completions": 0,
            "torch_threads": 1,
        })
        trainer = GRPOTrainer(cfg, console=Console(file=io.StringIO(), width=200))
        trainer.train()
    finally:
        sys.path.remove(str(env_root))
        torch.set_num_threads(threads)
    run = tmp_path / "run"
    assert trainer.tokenizer.chat_template == template
    first = trainer._last_groups[0][0]  # the engine rendered the rollout's prompt with the run's template
    assert trainer.tokenizer.decode(first.tokens[0].prompt_ids).startswith("#")
    for name in ("warmup_model", "final_model"):
        assert load_tokenizer(run / name).chat_template == template
    from safetensors.torch import load_file

    warm, final = load_file(str(run / "warmup_model" / "model.safetensors")), load_file(
        str(run / "final_model" / "model.safetensors"))
    assert warm.keys() == final.keys() and any(not torch.equal(warm[k], final[k]) for k in warm)
