"""A real model on shipped environments, on a CPU: a baseline anyone can reproduce, and GRPO on it.

The model is SmolLM2-135M-Instruct in float32 (``--model``: the registry name
``smollm2-135m-instruct``, or any directory written by ``save_pretrained``).

Baseline (default). The model is evaluated on the evaluation split of ``arithmetic``
(``max_operand`` 20, the system prompt and format of `examples/configs/arithmetic_smollm2.toml`,
100 problems x 4 samples at temperature 1.0 and top-p 0.9, 1,024 tokens) and of two more shipped
environments on which it scores above zero (``reverse-text``: a dense character-overlap
reward; ``doublecheck``: arithmetic with a challenge turn). Per environment: pass@1 and pass@4
(a sample passes at reward 1), the mean reward, greedy accuracy (one sample at temperature 0),
the share of samples cut at ``max_tokens`` (of those, the share that end repeating one block,
``cut_looping``, and the ends of up to three, ``cut_tails``) and completion tokens/s. Each is measured twice: through
``vf-serve`` (a server process on 127.0.0.1, the official ``openai`` client) and through the
in-process engine (the same engine, no socket); the two should agree within sampling noise
(``agree``: pass@1 within three standard errors of their difference, greedy within 3 of 100).

Why top-p 0.9 and 1,024 tokens (issue 47): a cut reply scores 0, so an evaluation that cuts many counts
brevity as skill. At top-p 1.0 the untrained model drifts into text that never ends (6.5-12% of its replies
cut at 1,024 tokens, 10% at 2,048); at 0.9 it ends 98-100% of them by 1,024, and the trained model's replies
are 12-15 tokens. ``--top-p 1.0 --max-tokens 128`` gives the figures recorded before 2026-12-07.

Training (``--train``). Before-eval on ``arithmetic`` (in-process engine), GRPO with
`examples/configs/arithmetic_smollm2.toml` (the run, ``final_model/`` included, kept under
``--output_dir``), then the same eval of ``final_model``. Target (issue 38): held-out pass@1
(the evaluation split, never trained on) >= 0.40 after at most 45 minutes of
training on 2 cores. The training split and the evaluation split share no expression (checked
here before anything runs). ``--config RECIPE`` evaluates and trains another recipe's environment
instead (a reasoning-gym task, say; runs under ``outputs/real_model/<recipe>/``), whose target is a
held-out gain: pass@1 up by at least 0.2 (issue 48), ``pass1_gain`` in the JSON. Every target also
asks pass@1 after training to beat the constant reply of the training split's most common answer
(``majority_pass1``; ``pass1_off_majority_*`` is pass@1 on the problems that reply does not solve)
and the reply that copies the question's first or last number (``echo_pass1``): GRPO finds a task's
prior, or a position to copy, before its skill.

vLLM (its CPU build; the ``vllm`` extra). ``--engines serve,inprocess,vllm`` adds a vLLM server the
script starts and stops as a third engine of the baseline, held to the same agreement test against
the first engine named. ``--train --vllm`` generates the run through a vLLM server the script
starts (``base_url``: every weight sync pushed and checked by the trainer's probe), then checks
what the server holds at the end against ``final_model/`` loaded afresh (logprobs on the probe and
on held-out chats with their answers, within 1e-3) and evaluates the held-out split through it as
well as in-process.

The last line printed is one JSON object.

    python benchmarks/real_model.py [--model DIR] [--quick] [--engines serve,inprocess[,vllm]] [--other-examples N]
    python benchmarks/real_model.py --train [--vllm] [--output_dir DIR] [--seed N] [--model DIR] [-- vf-train overrides]
    python benchmarks/real_model.py --config RECIPE [--train] ...   # another recipe's task
    python benchmarks/real_model.py --reasoning-gym chain_sum,leg_counting --rg-answer-format number
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import re
import resource
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:  # the benchmarks' own helpers (_progress), however this is loaded
    sys.path.insert(0, str(ROOT / "benchmarks"))
CONFIG = ROOT / "examples" / "configs" / "arithmetic_smollm2.toml"
DEFAULT_MODEL = "smollm2-135m-instruct"
SERVED = "smollm2"
PASS1_TARGET = 0.40
GAIN_TARGET = 0.2
"""``--train --config`` of another task: its held-out pass@1 must rise by this much (issue 48)."""
TRAIN_S_TARGET = 45 * 60
KV_TOKENS = 40_960
"""The evaluations' KV budget: 1.8 GB for SmolLM2-135M (46 KB a token), 36 rows of 1,024-token replies at
once. Unbounded, 256 concurrent untrained replies of 1,024 tokens held up to 12 GB (issue 48's memory)."""
CUT_TARGET = 0.05
"""At most this share of the evaluations' replies may be cut at ``max_tokens``: a cut reply scores 0,
so an evaluation that cuts many counts brevity as accuracy."""


def is_default(config: Path) -> bool:
    """``config`` is the arithmetic recipe (whose target is absolute: pass@1 >= 0.40)."""
    return config.resolve() == CONFIG.resolve()


def config_env(config: Path = CONFIG) -> tuple[str, dict[str, Any]]:
    """The training config's environment and arguments: the baseline and both evals use exactly these."""
    cfg = tomllib.loads(config.read_text())
    return cfg["env_id"], dict(cfg.get("env_args", {}))


REASONING_GYM = ("chain_sum", "basic_arithmetic", "leg_counting", "letter_counting", "spell_backward", "gsm_symbolic")
"""The reasoning-gym datasets of the baseline's ``--reasoning-gym`` (arithmetic, counting, spelling, word
problems: tasks a 135M model scores above zero on, and one it should not)."""


def reasoning_gym_envs(names: str, answer_format: str = "answer_tags") -> list[tuple[str, dict[str, Any]]]:
    """``reasoning-gym`` environments for a comma list of dataset names (each its own held-out split)."""
    return [("reasoning-gym", {"dataset": n, "size": 200, "num_eval_examples": 100, "seed": 0,
                               "answer_format": answer_format})
            for n in names.split(",") if n]


def other_envs() -> list[tuple[str, dict[str, Any]]]:
    """The two further environments of the baseline (their own defaults but a 0-20 operand range)."""
    return [("reverse-text", {}), ("doublecheck", {"max_operand": 20})]


def resolve(model: str) -> Path:
    """The model's directory: ``model`` itself, or what `resolve_model` makes of a name."""
    from verifiers.errors import ConfigError
    from verifiers.models.source import resolve_model

    try:
        path = resolve_model(model)
    except ConfigError as exc:
        raise SystemExit(f"real_model.py: cannot find model {model!r}: {exc}\n"
                         "Pass --model DIR, a float32 save_pretrained copy of SmolLM2-135M-Instruct.") from None
    if not (path / "config.json").is_file():
        raise SystemExit(f"real_model.py: {path} holds no config.json; pass a save_pretrained directory")
    return path


def load_env(env_id: str, env_args: dict[str, Any]) -> Any:
    from verifiers.envs.loader import load_environment

    with contextlib.chdir(ROOT):  # the shipped environments load from ./environments when not installed
        return load_environment(env_id, **env_args)


def check_splits(env: Any, env_id: str) -> None:
    """Refuse an evaluation split that shares a prompt with the training split."""
    if env.dataset is None or env.eval_dataset is None:
        raise SystemExit(f"real_model.py: {env_id} needs both a training and an evaluation split")
    train = {json.dumps(r["prompt"], sort_keys=True) for r in env.dataset.rows}
    shared = sum(json.dumps(r["prompt"], sort_keys=True) in train for r in env.eval_dataset.rows)
    if shared:
        raise SystemExit(f"real_model.py: {shared} evaluation prompts of {env_id} are also training prompts")


# ----------------------------------------------------------------------------- evaluation
def readable_answer(text: str) -> bool:
    """The reply states a number the grader reads (MathRubric's parse: boxed or plain, prose included)."""
    from verifiers.rubrics.math_rubric import reads_a_number

    return reads_a_number(text)


def answer_figures(results: list[Any]) -> dict[str, float | None]:
    """Split pass@1 into format and arithmetic: the share of replies cut at ``max_tokens``, the share
    that states an answer the grader reads (``answered``) and the accuracy among those (``accuracy_answered``).

    pass@1 is about ``answered * accuracy_answered``: a lift in the first is the model learning to
    finish a reply (not cut) that states an answer, a lift in the second is arithmetic. ``boxed`` is
    the share that used the asked ``\\boxed{}`` (format alone: the grader reads prose answers too).
    An environment that reports its own ``answered`` metric (reasoning-gym: an ``<answer>`` tag) is
    read by it; the others by `readable_answer` (the number the grader reads, if any).
    """
    from verifiers.parsers.markup import reply_text
    from verifiers.parsers.parser import extract_boxed_answer

    def readable(r: Any) -> bool:
        if "answered" in r.metrics:
            return bool(r.metrics["answered"])
        return readable_answer(reply_text(r.completion))

    n = max(len(results), 1)
    answered = [r for r in results if not r.is_truncated and readable(r)]
    right = sum(r.reward >= 1.0 for r in answered)
    boxed = sum("\\boxed" in (t := reply_text(r.completion)) and extract_boxed_answer(t) != t for r in results)
    cut = [r for r in results if r.is_truncated]
    return {"cut": round(len(cut) / n, 4), "answered": round(len(answered) / n, 4),
            "accuracy_answered": round(right / len(answered), 4) if answered else None,
            "boxed": round(boxed / n, 4),
            "cut_looping": round(sum(ends_in_a_loop(reply_text(r.completion)) for r in cut) / len(cut), 4) if cut else None,
            "cut_tails": [reply_text(r.completion)[-160:] for r in cut[:3]]}  # what a cut reply was doing


def majority_answer(env: Any) -> str | None:
    """The training split's most common answer (None when its rows carry no answers)."""
    answers = [str(r.get("answer", "")).strip() for r in (env.dataset.rows if env.dataset is not None else [])]
    answers = [a for a in answers if a]
    return collections.Counter(answers).most_common(1)[0][0] if answers else None


def prior_figures(results: list[Any], majority: str | None) -> dict[str, Any]:
    """What always answering the training split's most common answer scores, and pass@1 without it.

    Why: GRPO finds a task's prior before its skill. On reasoning-gym's ``letter_counting`` 42% of
    the held-out problems have the answer 1, and a run that raised pass@1 from 0.065 to 0.415 had
    learned to say "1" to every question (0 of 29 right where the answer was not 1). ``majority_pass1``
    is that constant reply's score, ``pass1_off_majority`` pass@1 on the problems it does not solve:
    a gain there is the task, a gain up to ``majority_pass1`` may be the prior alone.
    """
    if majority is None:
        return {"majority_answer": None, "majority_pass1": None, "pass1_off_majority": None}
    n = max(len(results), 1)
    off = [r for r in results if str(r.answer).strip() != majority]
    return {"majority_answer": majority, "majority_pass1": round((len(results) - len(off)) / n, 4),
            "pass1_off_majority": round(sum(r.reward >= 1.0 for r in off) / len(off), 4) if off else None}


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _same_number(text: str, answer: str) -> bool:
    try:
        return abs(float(text.replace(",", "")) - float(str(answer).replace(",", ""))) < 1e-2
    except ValueError:
        return False


def echo_figures(results: list[Any]) -> dict[str, Any]:
    """What replying with a number the question itself states scores: its first, or its last.

    Why: on reasoning-gym's ``number_format`` (pick the larger or the smaller of two numbers) two runs
    raised pass@1 from 0.06 / 0.045 to 0.475 / 0.40, every answer a different number, so the constant
    reply scores 0; yet one of them had learned to copy the question's last number (30 of the 32
    candidates its greedy replies copied), which is right 40% of the time. ``echo_pass1`` is the better
    of the two copying policies, a floor that a gain from learning the task clears and copying does not.
    """
    problems: dict[str, str] = {}
    for r in results:
        question = next((m.get("content") for m in reversed(r.prompt) if m.get("role") == "user"), None)
        if isinstance(question, str) and question not in problems:
            problems[question] = str(r.answer)
    if not problems:
        return {"echo_first_pass1": None, "echo_last_pass1": None, "echo_pass1": None}
    firsts = lasts = 0
    for question, answer in problems.items():
        numbers = _NUMBER.findall(question)
        firsts += bool(numbers) and _same_number(numbers[0], answer)
        lasts += bool(numbers) and _same_number(numbers[-1], answer)
    first, last = round(firsts / len(problems), 4), round(lasts / len(problems), 4)
    return {"echo_first_pass1": first, "echo_last_pass1": last, "echo_pass1": max(first, last)}


def ends_in_a_loop(text: str, max_period: int = 200, repeats: int = 3, min_chars: int = 60) -> bool:
    """The reply ends in one block of at most ``max_period`` characters repeated ``repeats`` times or more,
    over at least ``min_chars`` characters (so a number ending in "000" is not a loop).

    Why: a larger ``max_tokens`` only finishes the cut replies that needed more room; one that repeats
    itself never ends. ``cut_looping`` counts those, and ``cut_tails`` shows the rest (the untrained
    SmolLM2's were neither: gibberish it drifted into at temperature 1.0, which no limit ends either).
    """
    tail = text.rstrip()[-max_period * repeats:]
    for period in range(1, max_period + 1):
        span = max(period * repeats, min_chars)
        if span > len(tail):
            return False
        if tail[-span:] == (tail[-period:] * (span // period + 1))[-span:]:
            return True
    return False


async def evaluate(client: Any, env: Any, examples: int, samples: int, max_tokens: int,
                   concurrency: int, *, temperature: float, top_p: float) -> dict[str, Any]:
    """pass@1, pass@k, mean reward, greedy accuracy, truncation and tokens/s on the evaluation split.

    ``temperature`` and ``top_p`` are the samples' (greedy is always temperature 0): training samples at
    1.0 / 1.0, which an untrained small model drifts at; an evaluation may read it at a narrower setting.
    """
    from _progress import Ticker

    from verifiers.eval.summary import summarize

    t = time.perf_counter()
    async with Ticker("sampling", examples * samples) as ticker:
        sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
        sampled = await env.a_evaluate(client, SERVED, sampling,
                                       num_examples=examples, rollouts_per_example=samples,
                                       max_concurrent=concurrency, on_rollout=ticker)
    sampled_s = time.perf_counter() - t
    t = time.perf_counter()
    async with Ticker("greedy", examples) as ticker:
        greedy = await env.a_evaluate(client, SERVED, {"temperature": 0.0, "max_tokens": max_tokens},
                                      num_examples=examples, rollouts_per_example=1, max_concurrent=concurrency,
                                      on_rollout=ticker)
    greedy_s = time.perf_counter() - t
    s, g = summarize(sampled.results, samples), summarize(greedy.results, 1)
    errors = s.n_errored + g.n_errored
    if errors:
        raise SystemExit(f"real_model.py: {errors} rollouts errored: {s.errors_by_type} {g.errors_by_type}")
    tokens = s.tokens.completion_total + g.tokens.completion_total
    assert s.reward is not None and g.reward is not None
    return {
        "pass1": round(s.pass_at_k[1], 4),
        **answer_figures(sampled.results),
        **prior_figures(sampled.results, majority_answer(env)),
        **echo_figures(sampled.results),
        f"pass{samples}": round(s.pass_at_k[samples], 4),
        "reward": round(s.reward.mean, 4),
        "greedy": round(g.pass_at_k[1], 4),
        "greedy_reward": round(g.reward.mean, 4),
        "truncated": round(s.n_truncated / s.n, 3),
        "completion_tokens": round(s.tokens.completion_total / s.n, 1),
        "tok_s": round(tokens / (sampled_s + greedy_s), 1),
        "wall_s": round(sampled_s + greedy_s, 1),
        "n": s.n,
    }


async def evaluate_as_asked(client: Any, env: Any, examples: int, args: argparse.Namespace) -> dict[str, Any]:
    """`evaluate` with the command line's samples, reply limit, concurrency and sampling."""
    return await evaluate(client, env, examples, args.samples, args.max_tokens, args.concurrency,
                          temperature=args.temperature, top_p=args.top_p)


@contextlib.contextmanager
def inprocess(model_dir: Path, threads: int, seed: int, kv_tokens: int | None = None) -> Iterator[Any]:
    """An ``openai`` client on the engine in this process (an in-memory transport, no socket)."""
    import torch

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.engine.loading import load_named_model
    from verifiers.inference.server.runner import inprocess_client

    torch.set_num_threads(threads)
    model, tok = load_named_model(model_dir)  # the chat template vf-serve and vf-vllm pick for it
    engine = InferenceEngine(model, tok, max_batch_size=256, seed=seed, max_kv_tokens=kv_tokens or None)
    try:
        yield inprocess_client(engine, [SERVED])
    finally:
        engine.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(model_dir: Path, threads: int, seed: int, kv_tokens: int | None = None) -> Iterator[Any]:
    """An ``openai`` client on ``vf-serve`` in its own process on 127.0.0.1."""
    import openai

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "verifiers.cli.serve", str(model_dir), "--port", str(port), "--served-model-name",
         SERVED, "--threads", str(threads), "--seed", str(seed), "--max-batch-size", "256", "--quiet",
         *(["--max-kv-tokens", str(kv_tokens)] if kv_tokens else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.time() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("vf-serve did not start: " + server.stderr.read().decode()[-2000:]) from None
                time.sleep(0.5)
        yield openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=3600)
    finally:
        server.terminate()
        server.wait(timeout=60)


ENGINES = ("serve", "inprocess", "vllm")


def open_client(kind: str, model_dir: Path, threads: int, seed: int, max_tokens: int,
                kv_tokens: int | None = None) -> contextlib.AbstractContextManager[Any]:
    """``serve`` (vf-serve), ``inprocess`` (the same engine, no socket) or ``vllm`` (vLLM's CPU build).

    ``kv_tokens``: our engine's KV-cache budget (``--max-kv-tokens``; vLLM sizes its own cache).
    """
    if kind == "serve":
        return served(model_dir, threads, seed, kv_tokens)
    if kind == "vllm":
        from _vllm_engine import vllm_client

        return vllm_client(model_dir, SERVED, max_tokens)
    if kind == "inprocess":
        return inprocess(model_dir, threads, seed, kv_tokens)
    raise SystemExit(f"real_model.py: unknown engine {kind!r}; pick from {', '.join(ENGINES)}")


def agree(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both engines' figures within sampling noise: pass@1 within 3 standard errors of the difference
    of two independent estimates, greedy accuracy within 3 points (batching may flip a near tie)."""
    p = (a["pass1"] + b["pass1"]) / 2
    se = math.sqrt(max(p * (1 - p), 1e-4) * (1 / a["n"] + 1 / b["n"]))
    return abs(a["pass1"] - b["pass1"]) <= 3 * se and abs(a["greedy"] - b["greedy"]) <= 0.03 + 1e-9


def baseline(args: argparse.Namespace) -> dict[str, Any]:
    model_dir = resolve(args.model)
    env_id, env_args = config_env(args.config)
    specs = [(env_id, env_args)] + ([] if args.only_arithmetic else other_envs())
    examples = 20 if args.quick else args.examples
    others = 20 if args.quick else (args.other_examples or examples)
    envs = {name: load_env(name, kw) for name, kw in specs}
    for name, kw in reasoning_gym_envs(args.reasoning_gym or "", args.rg_answer_format):
        envs[f"rg:{kw['dataset']}"] = load_env(name, kw)
    check_splits(envs[env_id], env_id)
    out: dict[str, Any] = {"model": str(model_dir), "examples": examples, "other_examples": others,
                           "samples": args.samples, "max_tokens": args.max_tokens, "threads": args.threads,
                           "temperature": args.temperature, "top_p": args.top_p}

    async def every_env(client: Any, kind: str) -> None:  # one event loop per client (the in-process one needs it)
        for name, env in envs.items():
            n = examples if name == env_id else others
            figures = await evaluate_as_asked(client, env, n, args)
            out.setdefault(name, {})[kind] = figures
            print(f"{name:14s} {kind:9s} {json.dumps(figures)}", flush=True)

    engines = args.engines.split(",")
    for kind in engines:
        with open_client(kind, model_dir, args.threads, args.seed, args.max_tokens, args.max_kv_tokens) as client:
            asyncio.run(every_env(client, kind))
    for name in envs:  # every engine against the first one named
        pairs = {f"{engines[0]}~{k}": agree(out[name][engines[0]], out[name][k]) for k in engines[1:]}
        if pairs:
            out[name]["agree_pairs"], out[name]["agree"] = pairs, all(pairs.values())
    first = out[env_id][engines[0]]
    out["pass1"], out["pass4"], out["greedy"] = first["pass1"], first.get("pass4"), first["greedy"]
    shipped = [n for n in envs if not n.startswith("rg:")]  # reasoning-gym rows are reported, not targets
    out["targets_met"] = all(out[n].get("agree", True) for n in envs) and all(
        out[n][k]["reward"] > 0 for n in shipped for k in engines)
    return out


# ----------------------------------------------------------------------------- training
def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def train(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    from trainers.grpo.config import load_config
    from trainers.grpo.trainer import GRPOTrainer

    model_dir = resolve(args.model)
    env_id, env_args = config_env(args.config)
    env = load_env(env_id, env_args)
    check_splits(env, env_id)
    runs = ROOT / "outputs" / "real_model" / ("" if is_default(args.config) else args.config.stem)
    out_dir = Path(args.output_dir or runs / f"seed{args.seed}")
    examples = 20 if args.quick else args.examples

    def held_out(path: Path) -> dict[str, Any]:
        with open_client(args.eval_engine, path, args.threads, args.seed, args.max_tokens,
                         args.max_kv_tokens) as client:
            return asyncio.run(evaluate_as_asked(client, env, examples, args))

    before = held_out(model_dir)
    print(f"before: {json.dumps(before)}", flush=True)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(vllm_for_training(model_dir, out_dir, args.max_tokens)) if args.vllm else None
        through = ["--base_url", server.base_url, "--server_model_name", SERVED] if server else []
        cfg = load_config(args.config, ["--model", str(model_dir), "--output_dir", str(out_dir), "--seed", str(args.seed),
                                   "--progress", "false", *through, *overrides])
        with contextlib.chdir(ROOT):
            t = time.perf_counter()
            summary = GRPOTrainer(cfg).train()
            train_s = time.perf_counter() - t
        checks = vllm_after_training(server, out_dir / "final_model", env, examples, args) if server else {}
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    gen_s = sum(r.get("time/generation_s", 0.0) for r in rows)
    learn_s = sum(r.get("time/train_s", 0.0) for r in rows)
    after = held_out(out_dir / "final_model")
    print(f"after: {json.dumps(after)}", flush=True)
    steps = summary.steps
    beats_majority = after["majority_pass1"] is None or after["pass1"] > after["majority_pass1"]
    beats_echo = after["echo_pass1"] is None or after["pass1"] > after["echo_pass1"]
    if server:
        checks |= {"syncs_verified": sum("sync/probe_max_abs_diff" in r for r in rows), "steps_logged": len(rows),
                   "sync_probe_max": max((r.get("sync/probe_max_abs_diff", 0.0) for r in rows), default=None)}
    return {
        "seed": args.seed, "config": args.config.name, "engine": "vllm" if server else "embedded", **checks,
        "pass1_before": before["pass1"], "pass1_after": after["pass1"],
        "pass4_before": before[f"pass{args.samples}"], "pass4_after": after[f"pass{args.samples}"],
        "greedy_before": before["greedy"], "greedy_after": after["greedy"],
        "truncated_before": before["truncated"], "truncated_after": after["truncated"],
        "answered_before": before["answered"], "answered_after": after["answered"],
        "accuracy_answered_before": before["accuracy_answered"], "boxed_before": before.get("boxed"),
        "boxed_after": after.get("boxed"),
        "accuracy_answered_after": after["accuracy_answered"], "max_tokens": args.max_tokens,
        "temperature": args.temperature, "top_p": args.top_p,
        "eval_engine": args.eval_engine, "train_s": round(train_s, 1), "steps": steps,
        "s_per_step": round(train_s / max(steps, 1), 2),
        "generation_s": round(gen_s, 1), "learner_s": round(learn_s, 1),
        "reward_first": round(summary.reward_first, 4), "reward_last": round(summary.reward_last, 4),
        "peak_rss_gb": round(peak_rss_gb(), 2), "threads": args.threads, "output_dir": str(out_dir),
        "cut_ok": before["cut"] <= CUT_TARGET and after["cut"] <= CUT_TARGET,
        "pass1_gain": round(after["pass1"] - before["pass1"], 4),
        "majority_answer": after["majority_answer"], "majority_pass1": after["majority_pass1"],
        "pass1_off_majority_before": before["pass1_off_majority"],
        "pass1_off_majority_after": after["pass1_off_majority"],
        "beats_majority": beats_majority,
        "echo_pass1": after["echo_pass1"], "beats_echo": beats_echo,
        # the arithmetic recipe: pass@1 >= 0.40 (issue 38); another task's recipe: a gain >= 0.2 (issue 48);
        # both above the constant majority reply and above copying a number of the question
        "targets_met": ((after["pass1"] >= PASS1_TARGET if is_default(args.config) else after["pass1"] - before["pass1"]
                         >= GAIN_TARGET) and after["pass1"] > before["pass1"] and train_s <= TRAIN_S_TARGET
                        and before["cut"] <= CUT_TARGET and after["cut"] <= CUT_TARGET
                        and beats_majority and beats_echo
                        and (not server or (checks["served_equals_final"] and checks["syncs_verified"] == steps))),
    }


@contextlib.contextmanager
def vllm_for_training(model_dir: Path, out_dir: Path, max_tokens: int) -> Iterator[Any]:
    """The vLLM server the run generates through (``--vllm``), kept up after training for the checks."""
    from _vllm_engine import vllm_server

    log = out_dir.with_name(out_dir.name + ".vllm.log")  # beside the run: vf-train wants output_dir new or its own
    with vllm_server(model_dir, SERVED, max_tokens=max_tokens, log_path=log) as server:
        print(f"vllm: {server.base_url} (log {log})", flush=True)
        yield server


def vllm_after_training(server: Any, final_model: Path, env: Any, examples: int,
                        args: argparse.Namespace) -> dict[str, Any]:
    """What the server holds once the run ends: its logprobs against ``final_model``'s on the
    trainer's probe and on held-out chats with their answers (``served_vs_final_max_abs_diff``,
    target <= 1e-3 in float32), and the held-out evaluation through it (``after_vllm``)."""
    import openai
    from _vllm_engine import peak_rss_gb, served_equals_saved

    from trainers.grpo.sync.probe import probe_token_ids
    from verifiers.data.templating import apply_chat_template
    from verifiers.inference.engine.loading import load_tokenizer
    from verifiers.models.chat_templates import resolve_chat_template, use_chat_template

    tok = use_chat_template(load_tokenizer(final_model), resolve_chat_template(final_model, None)[0])
    sequences = [probe_token_ids(tok)] + [
        list(apply_chat_template(tok, row["prompt"])) + tok.encode(f"\\boxed{{{row['answer']}}}", add_special_tokens=False)
        for row in env.eval_dataset.rows[:8]]
    vllm_rss = peak_rss_gb(server)  # before the evaluation below: the training run's peak
    diff = served_equals_saved(server.base_url, SERVED, final_model, sequences)
    print(f"served vs final_model: max |logprob diff| {diff:.2e} over {sum(map(len, sequences))} tokens", flush=True)
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=3600)
    after = asyncio.run(evaluate_as_asked(client, env, examples, args))
    print(f"after (vllm): {json.dumps(after)}", flush=True)
    return {"served_vs_final_max_abs_diff": diff, "served_equals_final": diff <= 1e-3, "after_vllm": after,
            "vllm_peak_rss_gb": vllm_rss}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, overrides = argv[:i], argv[i + 1:]
    from trainers.grpo.dist.threads import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="registry name or save_pretrained directory")
    ap.add_argument("--train", action="store_true", help="before-eval, GRPO, after-eval (the config's task)")
    ap.add_argument("--config", type=Path, default=CONFIG,
                    help="the recipe whose environment is evaluated and trained (default: arithmetic_smollm2.toml)")
    ap.add_argument("--rg-answer-format", choices=("answer_tags", "boxed", "number"), default="answer_tags",
                    help="baseline: the reasoning-gym rows' answer format (boxed: the last \\boxed{}; number: the "
                         "number math-verify reads, boxed or plain)")
    ap.add_argument("--output_dir", "--output-dir", default=None, help="--train: where the run is kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20 evaluation problems instead of 100")
    ap.add_argument("--examples", type=int, default=100, help="evaluation problems per environment")
    ap.add_argument("--other-examples", type=int, default=None,
                    help="baseline: problems of the two other environments (default: --examples)")
    ap.add_argument("--samples", type=int, default=4, help="samples per problem (at --temperature)")
    ap.add_argument("--max-tokens", type=int, default=1024, help="the evaluations' reply limit")
    ap.add_argument("--temperature", type=float, default=1.0, help="the evaluation samples' temperature")
    ap.add_argument("--top-p", type=float, default=0.9, help="the evaluation samples' nucleus (1.0: off)")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--max-kv-tokens", type=int, default=KV_TOKENS,
                    help="our engine's KV-cache budget in tokens (rows x longest prompt + max-tokens; 0: unbounded, "
                         "as vf-serve's default); requests beyond it wait their turn")
    ap.add_argument("--threads", type=int, default=usable_cores(), help="torch threads of the engine")
    ap.add_argument("--engines", default="serve,inprocess",
                    help="baseline: a comma list of serve, inprocess, vllm (vLLM's CPU build; the vllm extra)")
    ap.add_argument("--vllm", action="store_true",
                    help="--train: generate through a vLLM server this script starts (the vllm extra)")
    ap.add_argument("--eval-engine", choices=ENGINES, default="inprocess",
                    help="--train: the engine of the before and after evaluations (vllm: faster at long --max-tokens)")
    ap.add_argument("--only-arithmetic", action="store_true", help="baseline: skip the two other environments")
    ap.add_argument("--reasoning-gym", nargs="?", const=",".join(REASONING_GYM), default=None, metavar="NAMES",
                    help="baseline: also these reasoning-gym datasets (comma list; alone: "
                         f"{','.join(REASONING_GYM)}); needs the reasoning-gym extra")
    args = ap.parse_args(argv)
    result = train(args, overrides) if args.train else baseline(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
