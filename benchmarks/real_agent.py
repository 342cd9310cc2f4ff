"""A real model learns to use a tool over several turns, on a CPU: evaluation, training, evaluation.

The model is SmolLM2-135M-Instruct (``--model``: the registry name or a ``save_pretrained``
directory), whose own chat template drops tools; the registry's shipped tool template
(``chatml-tools``: Hermes-style ``<tool_call>`` JSON in ChatML) shows it the schema. The task is
the ``calculator`` environment with the arguments of `examples/configs/calculator_smollm2.toml`:
word problems whose numbers are too large to work out in a 135M model's head, a ``calculate``
tool, the answer in ``\\boxed{}``. Every evaluation is on the environment's held-out split
(never trained on; the generator's seed is the config's), ``--samples`` per problem at
temperature 1.0, ``--max-tokens`` per turn.

Default: the untrained model with and without the tool (the same problems; without it the
environment offers no tool and asks for the answer directly).

``--train``: that evaluation, then vf-train with the recipe (an SFT warm-up on the environment's
own expert traces, then GRPO; the run under ``--output_dir``), the model right after the warm-up
(``warmup_model/``) and the final model evaluated the same way. ``--program`` trains and evaluates
through an ordinary OpenAI-SDK agent program (`calculator.agent`) with ``vf.AgentEnv`` instead of
the environment's own tool loop.

Targets (issue 46): success >= 0.6 at the end; RL alone adds >= 0.3 over the model after the
warm-up; <= 5% of replies cut by ``max_tokens``; at most 60 minutes of training on 2 cores.

    python benchmarks/real_agent.py [--model M] [--examples N] [--samples K]
    python benchmarks/real_agent.py --train [--program] [--seed S] [--output_dir DIR] [-- vf-train overrides]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:  # the benchmarks' own helpers (_progress), however this is loaded
    sys.path.insert(0, str(ROOT / "benchmarks"))
CONFIG = ROOT / "examples" / "configs" / "calculator_smollm2.toml"
PROGRAM_CONFIG = ROOT / "examples" / "configs" / "calculator_program_smollm2.toml"
DEFAULT_MODEL = "smollm2-135m-instruct"
SERVED = "smollm2"
SUCCESS_TARGET = 0.6
RL_GAIN_TARGET = 0.3
TRUNCATED_TARGET = 0.05
TRAIN_S_TARGET = 60 * 60
PROGRAM_CONCURRENCY = 64
"""Agent programs evaluated at once (each is a Python process; the engine batches their calls)."""
EVAL_TIMEOUT_S = 3600.0
"""An evaluated agent program's wall-clock limit: 200 programs share one 2-core engine, so a
program's run is mostly its wait in the queue (the default 300 s cut 70% of the untrained
model's rollouts, whose replies run to ``max_tokens``)."""


def recipe(program: bool) -> tuple[Path, dict[str, Any]]:
    """The training config's path and contents."""
    path = PROGRAM_CONFIG if program else CONFIG
    return path, tomllib.loads(path.read_text())


def load_env(env_id: str, env_args: dict[str, Any]) -> Any:
    from verifiers.envs.loader import load_environment

    with contextlib.chdir(ROOT):  # the shipped environments load from ./environments when not installed
        return load_environment(env_id, **env_args)


def check_splits(env: Any) -> None:
    """Refuse an evaluation split that shares a problem with the training split."""
    if env.dataset is None or env.eval_dataset is None:
        raise SystemExit("real_agent.py: the environment needs both a training and an evaluation split")
    train = {json.dumps(r["prompt"], sort_keys=True) for r in env.dataset.rows}
    shared = sum(json.dumps(r["prompt"], sort_keys=True) in train for r in env.eval_dataset.rows)
    if shared:
        raise SystemExit(f"real_agent.py: {shared} evaluation problems are also training problems")


# ----------------------------------------------------------------------------- evaluation
def tool_figures(results: Sequence[Any]) -> dict[str, float]:
    """Per rollout: did it call the tool; per call attempt: did it parse; turns per rollout.

    An attempt that did not parse stays in the assistant's text as an unclosed or malformed
    ``<tool_call>`` block (the server returns such output as text), so it is counted there.
    """
    calling, parsed, broken, turns = 0, 0, 0, 0
    for r in results:
        assistant = [m for m in r.completion if isinstance(m, dict) and m.get("role") == "assistant"]
        calls = sum(len(m.get("tool_calls") or []) for m in assistant)
        text = "".join(m["content"] for m in assistant if isinstance(m.get("content"), str))
        parsed += calls
        broken += text.count("<tool_call>")
        calling += calls > 0
        turns += r.turns
    n = max(len(results), 1)
    return {"tool_call_rate": round(calling / n, 4),
            "valid_call_rate": round(parsed / (parsed + broken), 4) if parsed + broken else 0.0,
            "calls_mean": round(parsed / n, 3), "turns_mean": round(turns / n, 3)}


async def evaluate(client: Any, env: Any, examples: int, samples: int, max_tokens: int) -> dict[str, Any]:
    """Success (reward 1: the boxed answer is right), truncation and tool use on the held-out split.

    A rollout that errored or was stopped by a wall-clock limit (an agent program's ``timeout_s``,
    which under one engine serving 200 programs is the queue's length, not the model's doing)
    makes the evaluation refuse: its figures would count the machine's speed as the model's failure.
    """
    from _progress import Ticker

    from verifiers.eval.summary import summarize

    t = time.perf_counter()
    from verifiers.envs.agent_env import AgentEnv

    # an agent program is a process of ~64 MB: 256 of them at once took 13 GB beside the engine
    concurrency = PROGRAM_CONCURRENCY if isinstance(env, AgentEnv) else 256
    async with Ticker("evaluating", examples * samples) as ticker:
        out = await env.a_evaluate(client, SERVED, {"temperature": 1.0, "max_tokens": max_tokens},
                                   num_examples=examples, rollouts_per_example=samples, max_concurrent=concurrency,
                                   on_rollout=ticker)
    s = summarize(out.results, samples)
    if s.n_errored:
        raise SystemExit(f"real_agent.py: {s.n_errored} rollouts errored: {s.errors_by_type}")
    timeouts = sum(r.stop_reason == "timeout" for r in out.results)
    if timeouts:
        raise SystemExit(f"real_agent.py: {timeouts} of {s.n} rollouts hit the agent program's timeout_s; "
                         f"the evaluation gives programs {EVAL_TIMEOUT_S:.0f} s, raise it (or lower --samples)")
    assert s.reward is not None
    truncated = sum(r.is_truncated for r in out.results)
    return {"success": round(s.reward.mean, 4), f"pass{samples}": round(s.pass_at_k[samples], 4),
            "truncated": round(truncated / s.n, 4), **tool_figures(out.results),
            "completion_tokens": round(s.tokens.completion_total / s.n, 1),
            "token_in_share": s.tokens.token_in_share,  # agent programs' follow-up calls (None elsewhere)
            "wall_s": round(time.perf_counter() - t, 1), "n": s.n}


@contextlib.contextmanager
def inprocess(model: str | Path, threads: int, seed: int, http: bool) -> Iterator[Any]:
    """An ``openai`` client on the engine in this process, with the model's tool template: in memory,
    or (``http``) over the engine's HTTP server on 127.0.0.1, which an agent program's gateway needs."""
    import openai
    import torch

    from verifiers.inference.engine import InferenceEngine
    from verifiers.inference.server.runner import EmbeddedServer, inprocess_client

    torch.set_num_threads(threads)
    engine = InferenceEngine.from_pretrained(model, dtype="float32", max_batch_size=256, seed=seed)
    server = EmbeddedServer(engine, [SERVED], host="127.0.0.1", port=0).start() if http else None
    try:
        client = (openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="EMPTY", max_retries=0,
                                     timeout=3600) if server is not None else inprocess_client(engine, [SERVED]))
        yield client, engine.tokenizer
    finally:
        if server is not None:
            server.stop()
        engine.stop()


def evaluate_model(model: str | Path, envs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Each of ``envs`` (name -> environment) on ``model``, one engine for all of them."""
    figures: dict[str, Any] = {}

    async def every_env(client: Any) -> None:  # one event loop for the in-process client
        for name, env in envs.items():
            figures[name] = await evaluate(client, env, args.examples, args.samples, args.max_tokens)
            print(f"{Path(str(model)).name:24s} {name:9s} {json.dumps(figures[name])}", flush=True)

    from verifiers.envs.agent_env import AgentEnv

    http = any(isinstance(env, AgentEnv) for env in envs.values())
    with inprocess(model, args.threads, args.seed, http) as (client, tokenizer):
        for env in envs.values():
            env.use_tokenizer(tokenizer)  # an agent program's follow-up calls continue token-exactly, as in training
        asyncio.run(every_env(client))
    return figures


def eval_envs(env_id: str, env_args: dict[str, Any], with_no_tools: bool) -> dict[str, Any]:
    if env_args.get("program"):  # every program waits for one engine serving all of them at once
        env_args = {**env_args, "timeout_s": EVAL_TIMEOUT_S}
    envs = {"tools": load_env(env_id, env_args)}
    check_splits(envs["tools"])
    if with_no_tools:
        envs["no_tools"] = load_env("calculator", {**task_args(env_args), "tools": False})
    return envs


def task_args(env_args: dict[str, Any]) -> dict[str, Any]:
    """The arguments that choose the problems (the same problems with or without the tool)."""
    keep = ("num_train_examples", "num_eval_examples", "seed", "kinds")
    return {k: v for k, v in env_args.items() if k in keep}


# ----------------------------------------------------------------------------- training
def peak_rss_gb() -> float:
    """This process's peak (the evaluations)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def child_peak_rss_gb() -> float:
    """The largest finished child's peak: vf-train."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


def train(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    config_path, cfg_data = recipe(args.program)
    envs = eval_envs(cfg_data["env_id"], dict(cfg_data.get("env_args", {})), with_no_tools=not args.program)
    out_dir = Path(args.output_dir or ROOT / "outputs" / "real_agent" / f"seed{args.seed}").resolve()
    before = evaluate_model(args.model, envs, args)
    # vf-train in its own process: its memory (the learner, its engine) is not added to the evaluations'
    cmd = [sys.executable, "-m", "trainers.grpo.cli", str(config_path), "--model", str(args.model), "--output_dir",
           str(out_dir), "--seed", str(args.seed), "--progress", "false", "--save_warmup_model", "true", *overrides]
    print("training: " + " ".join(cmd[2:]), flush=True)
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT)
    train_s = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"real_agent.py: vf-train exited with {done.returncode}")
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "reward" in r]
    warmup_s = float(json.loads((out_dir / "warmup.jsonl").read_text().splitlines()[-1]).get("time_s", 0.0)) \
        if (out_dir / "warmup.jsonl").is_file() else 0.0
    warm = out_dir / "warmup_model"
    after_warmup = evaluate_model(warm, {"tools": envs["tools"]}, args) if warm.is_dir() else {"tools": before["tools"]}
    after = evaluate_model(out_dir / "final_model", envs, args)
    b, w, a = before["tools"], after_warmup["tools"], after["tools"]
    rl_gain = round(a["success"] - w["success"], 4)
    rl_s = sum(r.get("time/step_s", 0.0) for r in steps)
    return {
        "config": str(config_path.relative_to(ROOT)), "program": args.program, "seed": args.seed,
        "success_no_tools_before": before.get("no_tools", {}).get("success"),
        "success_no_tools_after": after.get("no_tools", {}).get("success"),
        "success_before": b["success"], "success_after_warmup": w["success"], "success_after": a["success"],
        "rl_gain": rl_gain,
        "tool_call_rate": a["tool_call_rate"], "valid_call_rate": a["valid_call_rate"],
        "turns_mean": a["turns_mean"], "truncated_share": a["truncated"],
        "before": b, "after_warmup": w, "after": a,
        "train_s": round(train_s, 1), "warmup_s": round(warmup_s, 1), "steps": len(steps),
        "s_per_step": round(rl_s / max(len(steps), 1), 2),
        "reward_first": round(steps[0]["reward"], 4) if steps else None,
        "reward_last": round(steps[-1]["reward"], 4) if steps else None,
        "token_in_share": a["token_in_share"],
        "train_token_in_share": steps[-1].get("rollouts/token_in_share") if steps else None,
        "peak_rss_gb": round(peak_rss_gb(), 2), "train_peak_rss_gb": round(child_peak_rss_gb(), 2),
        "output_dir": str(out_dir),
        "targets_met": (a["success"] >= SUCCESS_TARGET and rl_gain >= RL_GAIN_TARGET
                        and a["truncated"] <= TRUNCATED_TARGET and train_s <= TRAIN_S_TARGET),
    }


def baseline(args: argparse.Namespace) -> dict[str, Any]:
    _, cfg_data = recipe(args.program)
    envs = eval_envs(cfg_data["env_id"], dict(cfg_data.get("env_args", {})), with_no_tools=True)
    figures = evaluate_model(args.model, envs, args)
    return {"model": str(args.model), "examples": args.examples, "samples": args.samples,
            "max_tokens": args.max_tokens, "success_no_tools": figures["no_tools"]["success"],
            "success_tools": figures["tools"]["success"], **figures}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, overrides = argv[:i], argv[i + 1:]
    from trainers.grpo.dist.threads import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="registry name or save_pretrained directory")
    ap.add_argument("--train", action="store_true", help="evaluation, vf-train with the recipe, evaluation")
    ap.add_argument("--program", action="store_true", help="train through the OpenAI-SDK agent program")
    ap.add_argument("--output_dir", "--output-dir", default=None, help="--train: where the run is kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=100, help="held-out problems")
    ap.add_argument("--samples", type=int, default=4, help="samples per problem at temperature 1.0")
    ap.add_argument("--max-tokens", type=int, default=200, help="per model turn")
    ap.add_argument("--threads", type=int, default=usable_cores(), help="torch threads of the engine")
    args = ap.parse_args(argv)
    result = train(args, overrides) if args.train else baseline(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
