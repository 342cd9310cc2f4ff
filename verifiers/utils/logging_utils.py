"""0.1.x path ``verifiers.utils.logging_utils``: opt-in logging setup and a sample printer.

Unlike upstream, importing verifiers configures no logging: call `setup_logging`
(as 0.1.x scripts already do) to get upstream's handler and format.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from verifiers.types import Messages

__all__ = ["print_prompt_completions_sample", "setup_logging"]

_DEFAULT_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"
_DEFAULT_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def setup_logging(level: str = "INFO", log_format: str | None = None, date_format: str | None = None) -> None:
    """Send the ``verifiers`` loggers to stderr at ``level``, not propagating to the root logger.

    Calling it again replaces the handler it installed (no duplicated lines).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(fmt=log_format or _DEFAULT_FORMAT, datefmt=date_format or _DEFAULT_DATE_FORMAT)
    )
    handler._vf_setup_logging = True  # type: ignore[attr-defined]
    logger = logging.getLogger("verifiers")
    for old in [h for h in logger.handlers if getattr(h, "_vf_setup_logging", False)]:
        logger.removeHandler(old)
    logger.setLevel(level.upper())
    logger.addHandler(handler)
    logger.propagate = False


def _get(obj: Any, key: str, default: Any = None) -> Any:
    value = getattr(obj, key, None)
    if value is not None:
        return value
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return default


def _tool_call_payload(tc: Any) -> dict[str, str]:
    src = _get(tc, "function") or tc
    args = _get(src, "arguments", {}) or {}
    if not isinstance(args, str):
        try:
            args = json.dumps(args)
        except (TypeError, ValueError):
            args = str(args)
    return {"name": _get(src, "name", "") or "", "args": args}


def _format_messages(messages: Any) -> Any:
    from rich.text import Text

    if isinstance(messages, str):
        return Text(messages)
    out = Text()
    for idx, msg in enumerate(messages):
        if idx:
            out.append("\n\n")
        role = _get(msg, "role", "") or ""
        content = _get(msg, "content", "") or ""
        if not isinstance(content, str):
            content = "".join(str(_get(p, "text", "")) for p in content)
        style = "bright_cyan" if role == "assistant" else "bright_magenta"
        out.append(f"{role}: ", style="bold")
        out.append(content, style=style)
        for tc in _get(msg, "tool_calls") or []:
            payload = json.dumps(_tool_call_payload(tc), indent=2, ensure_ascii=False)
            out.append("\n\n[tool call]\n" + payload, style=style)
    return out


def print_prompt_completions_sample(
    prompts: list[Messages],
    completions: list[Messages],
    rewards: list[float],
    step: int,
    num_samples: int = 1,
) -> None:
    """Print the first ``num_samples`` (prompt, completion, reward) rows as a rich table."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=True, header_style="bold white", expand=True)
    table.add_column("Prompt", style="bright_yellow")
    table.add_column("Completion", style="bright_green")
    table.add_column("Reward", style="bold cyan", justify="right")
    padded = list(rewards) + [0.0] * max(0, len(prompts) - len(rewards))
    shown = min(num_samples, len(prompts))
    for i in range(shown):
        table.add_row(
            _format_messages(prompts[i]), _format_messages(completions[i]), Text(f"{padded[i]:.2f}")
        )
        if i < shown - 1:
            table.add_section()
    Console().print(Panel(table, expand=False, title=f"Step {step}", border_style="bold white"))
