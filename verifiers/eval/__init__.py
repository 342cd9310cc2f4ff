"""Evaluation: run an environment against a model, save every rollout, resume, summarise, view.

``vf-eval`` (`verifiers.cli.eval`) is a thin layer over `run_eval`; the run directory
format (results.jsonl + metadata.json) is defined in `verifiers.eval.run_store`.
"""

from verifiers.eval.display import EvalDisplay, EvalProgress
from verifiers.eval.endpoints import (
    Endpoint,
    RoundRobinClient,
    build_client,
    load_endpoints,
    resolve_endpoints,
)
from verifiers.eval.export import load_run as load_run
from verifiers.eval.export import save_dataset as save_dataset
from verifiers.eval.export import to_dataset as to_dataset
from verifiers.eval.report import write_report as write_report
from verifiers.eval.run_store import RunMetadata, RunStore, find_resumable_run, read_results, scan_results
from verifiers.eval.runner import EvalConfig, EvalResult, run_eval
from verifiers.eval.summary import EvalSummary as EvalSummary
from verifiers.eval.summary import render_summary as render_summary
from verifiers.eval.summary import summarize as summarize
from verifiers.eval.viewer import view as view

__all__ = [
    "Endpoint",
    "EvalConfig",
    "EvalDisplay",
    "EvalProgress",
    "EvalResult",
    "RoundRobinClient",
    "RunMetadata",
    "RunStore",
    "build_client",
    "find_resumable_run",
    "load_endpoints",
    "read_results",
    "resolve_endpoints",
    "run_eval",
    "scan_results",
]
