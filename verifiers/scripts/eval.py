"""0.1.x path ``verifiers.scripts.eval``: the module 0.1.x's ``vf-eval`` lived in.

It has the top-level names 0.1.5's module had (``vf``, ``logger``, ``setup_client``,
``eval_environment``, ``main``, the standard-library and ``numpy``/``datasets`` imports)
because 0.1.x tests patch them, e.g. ``mock.patch("verifiers.scripts.eval.vf.load_environment")``.
Environments are loaded through this module's ``vf`` at call time, so such a patch
takes effect in both entry points:

* ``eval_environment(...)``: 0.1.5's function, same arguments, output and saved files
  (``outputs/evals/ENV--MODEL/UUID/results.jsonl`` + ``metadata.json``).
* ``main(argv=None)``: ``vf-eval`` (`verifiers.cli.eval`), whose flags include 0.1.5's.
"""

from __future__ import annotations

import argparse  # noqa: F401 - 0.1.5's module-level names, patched by 0.1.x tests
import importlib
import importlib.util
import json
import logging
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, cast  # noqa: UP035 - 0.1.5 exposed typing.Dict here

import numpy as np
from datasets import Dataset

import verifiers as vf
from verifiers import setup_logging
from verifiers.cli.eval import main as _vf_eval_main
from verifiers.types import Endpoints
from verifiers.utils.client_utils import setup_client
from verifiers.utils.message_utils import messages_to_printable, sanitize_tool_calls

__all__ = ["eval_environment", "main"]

logger = logging.getLogger("verifiers.scripts.eval")


def _load_endpoints(endpoints_path: str) -> Endpoints:
    """0.1.5's registry: ``ENDPOINTS`` of ``endpoints.py`` (a file, or in a folder); {} with a warning."""
    try:
        path = Path(endpoints_path)
        endpoints_file = path / "endpoints.py" if path.is_dir() else path
        if not endpoints_file.exists():
            raise ImportError(f"endpoints.py not found at {endpoints_file}")
        spec = importlib.util.spec_from_file_location("endpoints", endpoints_file)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "ENDPOINTS"):
            raise AttributeError(f"Module '{endpoints_file}' does not have a 'ENDPOINTS' attribute")
        return cast(Endpoints, module.ENDPOINTS)
    except (ImportError, AttributeError) as e:
        logger.warning(
            f"No local endpoint registry found at {endpoints_path}. Please specify the model name (-m), "
            f"API host base URL (-b), and API key variable name (-k). Error details: {e}"
        )
        return {}


def _print_results(
    env: str, model: str, api_base_url: str, num_examples: int, r: int, results: Any
) -> tuple[list[Any], list[Any]]:
    """0.1.5's report on stdout; returns the printable prompts and completions."""
    print("--- Evaluation ---")
    print(f"Environment: {env}")
    print(f"Model: {model}")
    print(f"Provider: {api_base_url}")
    print(f"Examples: {num_examples}")
    print(f"Rollouts per example: {r}")
    print("--- Example ---")
    prompts = [messages_to_printable(p) for p in results.prompt]
    completions = [messages_to_printable(c) for c in results.completion]
    vf.print_prompt_completions_sample(prompts, completions, results.reward, step=0)
    print("--- All ---")
    print("Rewards:")
    print(f"reward: avg - {sum(results.reward) / len(results.reward):.3f}, std - {np.std(results.reward):.3f}")
    n = len(results.reward) // r
    for i in range(r):
        print(f"r{i + 1}: {[round(results.reward[(i * n) + j], 3) for j in range(n)]}")
    for k, v in results.metrics.items():
        print(f"{k}: avg - {sum(v) / len(v):.3f}, std - {np.std(v):.3f}")
        for i in range(r):
            print(f"r{i + 1}: {[round(v[(i * n) + j], 3) for j in range(n)]}")
    return prompts, completions


def _timing(state: Any, key: str) -> float:
    timing = state.get("timing") if isinstance(state, dict) else None
    return float(timing.get(key, 0.0)) if isinstance(timing, dict) else 0.0


def eval_environment(
    env: str,
    env_args: dict,
    env_dir_path: str,
    endpoints_path: str,
    model: str,
    api_key_var: str,
    api_base_url: str,
    num_examples: int,
    rollouts_per_example: int,
    max_concurrent: int,
    max_tokens: int | None,
    temperature: float | None,
    sampling_args: dict | None,
    verbose: bool,
    save_dataset: bool,
    save_to_hf_hub: bool,
    hf_hub_dataset_name: str,
    extra_headers: Dict[str, str],  # noqa: UP006
) -> None:
    """0.1.5's ``eval_environment``: load ``env`` with ``vf.load_environment``, evaluate, print, save."""
    setup_logging("DEBUG" if verbose else "INFO")
    endpoints = _load_endpoints(endpoints_path)
    if model in endpoints:
        api_key_var = endpoints[model]["key"]
        api_base_url = endpoints[model]["url"]
        model = endpoints[model]["model"]
    client = setup_client(
        api_base_url,
        api_key_var,
        timeout=3600.0,
        max_connections=28000,
        max_keepalive_connections=28000,
        max_retries=10,
        extra_headers=extra_headers,
    )
    vf_env = vf.load_environment(env_id=env, **env_args)
    merged_sampling_args: dict = dict(sampling_args or {})
    if "max_tokens" not in merged_sampling_args:
        merged_sampling_args["max_tokens"] = max_tokens
    if temperature is not None and "temperature" not in merged_sampling_args:
        merged_sampling_args["temperature"] = temperature
    logger.info(f"Starting evaluation with model: {model}")
    start_time = time.time()
    results = vf_env.evaluate(
        client=client,
        model=model,
        sampling_args=merged_sampling_args,
        num_examples=num_examples,
        rollouts_per_example=rollouts_per_example,
        max_concurrent=max_concurrent,
    )
    end_time = time.time()
    logger.info(f"Evaluation completed in {end_time - start_time:.2f} seconds")
    prompts, completions = _print_results(env, model, api_base_url, num_examples, rollouts_per_example, results)
    if not (save_dataset or save_to_hf_hub):
        return
    n = len(results.reward) // rollouts_per_example
    data_dict: dict[str, Any] = {
        "id": [i // rollouts_per_example for i in range(n * rollouts_per_example)],
        "prompt": [sanitize_tool_calls(p) for p in prompts],
        "completion": [sanitize_tool_calls(c) for c in completions],
        "task": results.task,
        "generation_ms": [_timing(s, "generation_ms") for s in results.state],
        "scoring_ms": [_timing(s, "scoring_ms") for s in results.state],
        "total_ms": [_timing(s, "total_ms") for s in results.state],
    }
    if results.info[0] != {}:
        data_dict["info"] = results.info
    if results.answer[0] != "":
        data_dict["answer"] = results.answer
    data_dict["reward"] = results.reward
    data_dict.update(results.metrics)
    dataset = Dataset.from_dict(data_dict)
    metadata = {
        "env": env,
        "model": model,
        "num_examples": n,
        "rollouts_per_example": rollouts_per_example,
        "sampling_args": merged_sampling_args,
        "date": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        "time_ms": (end_time - start_time) * 1000,
        "avg_reward": sum(results.reward) / len(results.reward),
    }
    for k, v in results.metrics.items():
        metadata[f"avg_{k}"] = sum(v) / len(v)
    env_model_str = f"{env}--{model.replace('/', '--')}"
    if save_dataset:
        local_env_dir = Path(env_dir_path) / env.replace("-", "_")
        base = local_env_dir / "outputs" if local_env_dir.exists() else Path("./outputs")
        results_path = base / "evals" / env_model_str / str(uuid.uuid4())[:8]
        results_path.parent.mkdir(parents=True, exist_ok=True)
        dataset.to_json(results_path / "results.jsonl")
        (results_path / "metadata.json").write_text(json.dumps(metadata))
        logger.info(f"Saved dataset to {results_path}")
    if save_to_hf_hub:
        name = hf_hub_dataset_name or f"{env}_{model.replace('/', '-')}_n{n}_r{rollouts_per_example}"
        dataset.push_to_hub(name)
        logger.info(f"Saved dataset to Hugging Face Hub: {name}")


def _load_through_vf(env_id: str, env_args: dict[str, Any]) -> Any:
    # `vf` is read from this module's globals at call time: patches of it apply
    return vf.load_environment(env_id=env_id, **env_args)


def main(argv: list[str] | None = None) -> int:
    """Run ``vf-eval`` with ``argv`` (default: the process arguments); returns the exit status.

    The environment is loaded with this module's ``vf.load_environment``.
    """
    return _vf_eval_main(argv, load_env=_load_through_vf)


if __name__ == "__main__":
    raise SystemExit(main())
