"""Browse saved eval runs and their rollouts in the terminal.

``view(root)`` lists the runs under a directory (default ``outputs/evals``);
``view(run_dir)`` shows one run: its metadata, the summary vf-eval printed, and a
table of rollouts, any of which can be opened as a transcript (messages by role,
tool calls with their arguments, tool results, reward and metrics, errors).

On a terminal it is a small prompt loop; without one (pipes, CI, tests) it prints
the listing and returns. Everything that came from a model or a dataset is
printed as `rich.text.Text`, never as markup, so ``[bold]`` in a completion is shown,
not interpreted.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel
from rich.console import Console, Group
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from verifiers.errors import ConfigError
from verifiers.eval.export import LoadedRun, find_runs, is_run_dir, load_run, read_metadata_dict
from verifiers.eval.summary import render_summary, summarize
from verifiers.terminal import escape_controls, plain_text
from verifiers.types import RolloutResult

__all__ = [
    "DEFAULT_ROOT",
    "RunInfo",
    "list_runs",
    "parse_rollout_ref",
    "render_rollout",
    "render_rollouts_table",
    "render_run",
    "render_runs_table",
    "select_rollouts",
    "sorted_results",
    "view",
]

DEFAULT_ROOT = Path("outputs/evals")
_STATUS_STYLE = {
    "complete": "green",
    "completed": "green",
    "running": "yellow",
    "interrupted": "red",
    "failed": "red",
}
_ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}
_ROLLOUT_COLUMNS: tuple[tuple[str, Literal["left", "right"]], ...] = (
    ("#", "right"),
    ("example", "right"),
    ("rollout", "right"),
    ("reward", "right"),
    ("stop reason", "left"),
    ("turns", "right"),
)
_FIXED_COLUMNS_WIDTH = sum(max(len(name), 3) + 3 for name, _ in _ROLLOUT_COLUMNS) + 4
"""Width the rollout table needs besides its error column (cell padding and borders included)."""
_SHOWN_IN_SUMMARY = ("avg_metrics", "avg_reward", "errors_by_type")
_MAX_LIST = 20
"""Metadata lists longer than this (e.g. example_ids) are shortened in the terminal."""
_SORT_LABEL = {"example": "example", "reward": "reward, lowest first", "reward-desc": "reward, highest first"}
_REF_RE = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")

Ask = Callable[[str], "str | None"]


class RunInfo(BaseModel):
    """One line of the run listing."""

    path: Path
    env_id: str
    model: str
    run_id: str
    status: str
    n: int | None = None
    expected: int | None = None
    reward_mean: float | None = None
    created_at: str = ""


# -- the run listing -------------------------------------------------------------------


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


def _run_info(path: Path) -> RunInfo:
    meta = read_metadata_dict(path)
    env, sep, model = path.parent.name.partition("--")
    counts = meta.get("counts") if isinstance(meta.get("counts"), dict) else {}
    n = counts.get("saved")
    avg = meta.get("avg_reward")
    if not isinstance(n, int):
        n = _count_lines(path / "results.jsonl")
    created = meta.get("created_at")
    if not isinstance(created, str) or not created:
        try:
            created = datetime.fromtimestamp(path.stat().st_mtime).astimezone().isoformat(timespec="seconds")
        except OSError:
            created = ""
    expected = counts.get("expected")
    return RunInfo(
        path=path,
        env_id=str(meta.get("env_id") or (env if sep else path.parent.name)),
        model=str(meta.get("model") or (model if sep else "")),
        run_id=str(meta.get("run_id") or path.name),
        status=str(meta.get("status") or ("unknown" if not meta else "?")),
        n=n,
        expected=expected if isinstance(expected, int) else None,
        reward_mean=float(avg) if isinstance(avg, int | float) else None,
        created_at=created,
    )


def list_runs(root: Path) -> list[RunInfo]:
    """Runs under ``root``, newest first."""
    infos = [_run_info(p) for p in find_runs(root)]
    infos.sort(key=lambda i: i.created_at, reverse=True)
    return infos


def render_runs_table(runs: Sequence[RunInfo], console: Console, root: Path | None = None) -> None:
    title = f"Eval runs under {root}" if root is not None else "Eval runs"
    table = Table(title=plain_text(title), title_justify="left")
    # Env and model above the run id in one cell: run ids are long and are what users copy.
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("env · model / run id", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("reward", justify="right", no_wrap=True)
    table.add_column("date", no_wrap=True)
    for i, run in enumerate(runs, 1):
        n = "?" if run.n is None else str(run.n)
        if run.expected is not None and run.expected != run.n:
            n = f"{n}/{run.expected}"
        name = plain_text(f"{run.env_id} · {run.model}", style="bold")
        name.append(escape_controls(f"\n{run.run_id}"), style="")
        day, _, clock = run.created_at.partition("T")
        table.add_row(
            str(i),
            name,
            plain_text(run.status, style=_STATUS_STYLE.get(run.status, "")),
            n,
            "-" if run.reward_mean is None else f"{run.reward_mean:.4f}",
            plain_text(f"{day}\n{clock[:5]}" if clock else day),
        )
    console.print(table)


# -- one run ---------------------------------------------------------------------------


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def render_run(
    run: LoadedRun, console: Console, *, show_rollouts: bool = True, sort: SortKey = "example"
) -> None:
    """Metadata, summary and (optionally) the rollout table of one run."""
    console.print(Rule(plain_text(f"{run.env_id} · {run.model} · {run.run_id}")))
    meta = Table(show_header=False, show_edge=False, box=None)
    meta.add_column("key", style="bold")
    meta.add_column("value", overflow="fold")
    meta.add_row("path", plain_text(str(run.path)))
    for key, value in run.metadata.items():
        if key in _SHOWN_IN_SUMMARY:
            continue
        if isinstance(value, list) and len(value) > _MAX_LIST:
            text = _plain(value[:_MAX_LIST])[:-1] + f", ... ({len(value)} in all)]"
        else:
            text = _plain(value)
        meta.add_row(plain_text(str(key)), plain_text(text))
    if not run.metadata:
        meta.add_row("metadata", plain_text("missing (the run may have died before writing it)", style="yellow"))
    if run.skipped_lines:
        meta.add_row(
            "skipped lines", plain_text(f"{run.skipped_lines} unreadable line(s) in results.jsonl", style="yellow")
        )
    if run.superseded:
        meta.add_row("superseded", plain_text(f"{run.superseded} row(s) replaced by a later write (resume)"))
    console.print(meta)
    render_summary(summarize(run.results, run.rollouts_per_example, wall_s=run.duration_s), console)
    if show_rollouts:
        title = "Rollouts" if sort == "example" else f"Rollouts by {_SORT_LABEL[sort]}"
        render_rollouts_table(sorted_results(run.results, sort), console, title=title)


SortKey = Literal["example", "reward", "reward-desc"]
SORT_KEYS: tuple[SortKey, ...] = ("example", "reward", "reward-desc")
"""Rollout orders: by example and rollout index, by reward lowest first, by reward highest first."""


def sorted_results(results: Sequence[RolloutResult], by: SortKey = "example") -> list[RolloutResult]:
    """Rollouts in the order ``by``; ties (equal rewards) stay in example order."""
    if by not in SORT_KEYS:
        raise ConfigError(f"cannot sort rollouts by {by!r}; use one of {', '.join(SORT_KEYS)}")
    rows = sorted(results, key=lambda r: (r.example_id, r.rollout_index))
    if by == "example":
        return rows
    return sorted(rows, key=lambda r: r.reward, reverse=by == "reward-desc")


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def render_rollouts_table(
    results: Sequence[RolloutResult], console: Console, *, start: int = 0, title: str = "Rollouts"
) -> None:
    """Rows are numbered from ``start + 1``; the number opens the rollout in interactive mode."""
    table = Table(title=plain_text(title), title_justify="left")
    for name, justify in _ROLLOUT_COLUMNS:
        table.add_column(name, justify=justify, no_wrap=True)
    table.add_column("error")
    # One line per rollout: long errors are cut to the room left and shown in full in the transcript.
    room = max(12, min(80, console.width - _FIXED_COLUMNS_WIDTH))
    for i, r in enumerate(results, start + 1):
        if r.error is not None:
            err = plain_text(_one_line(f"{r.error.type}: {r.error.message}", room), style="red")
        elif r.scoring_errors:
            where = ", ".join(e.where for e in r.scoring_errors)
            err = plain_text(_one_line(f"scoring: {where}", room), style="yellow")
        else:
            err = plain_text("")
        table.add_row(
            str(i),
            str(r.example_id),
            str(r.rollout_index),
            f"{r.reward:.4f}",
            plain_text(r.stop_reason, style="red" if r.stop_reason == "error" else ""),
            str(r.turns),
            err,
        )
    console.print(table)


# -- one rollout -------------------------------------------------------------------------


def _content_text(content: Any) -> Text:
    if content is None:
        return plain_text("")
    if isinstance(content, str):
        return plain_text(content)
    if isinstance(content, list):  # multimodal parts
        out = Text()
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(escape_controls(str(part.get("text", ""))))
            else:
                out.append(escape_controls(_plain(part)), style="dim")
            out.append("\n")
        return out
    return plain_text(_plain(content))


def _pretty_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
        except ValueError:
            return arguments  # malformed JSON: show exactly what the model sent
    return json.dumps(arguments, indent=2, ensure_ascii=False, default=str)


def _message_panel(msg: Any) -> Panel:
    if not isinstance(msg, dict):
        return Panel(plain_text(_plain(msg)), title=plain_text("?"))
    role = str(msg.get("role", "?"))
    title = plain_text(role)
    if role == "tool" and msg.get("tool_call_id"):
        title.append(escape_controls(f" · {msg['tool_call_id']}"), style="dim")
    parts: list[Any] = []
    body = _content_text(msg.get("content"))
    if body.plain:
        parts.append(body)
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        head = plain_text("tool call ", style="bold yellow")
        head.append(escape_controls(str(fn.get("name", "?"))), style="bold")
        if isinstance(call, dict) and call.get("id"):
            head.append(escape_controls(f"  ({call['id']})"), style="dim")
        parts.append(head)
        parts.append(plain_text(_pretty_arguments(fn.get("arguments", ""))))
    if not parts:
        parts.append(plain_text("(empty)", style="dim"))
    return Panel(Group(*parts), title=title, title_align="left", border_style=_ROLE_STYLE.get(role, "white"))


def _messages(messages: Any, label: str) -> list[Any]:
    if isinstance(messages, str):
        return [Panel(plain_text(messages), title=plain_text(label), title_align="left")]
    return [_message_panel(m) for m in messages or []]


def render_rollout(result: RolloutResult, console: Console) -> None:
    """The transcript of one rollout: prompt, completion, tool traffic, scores and errors."""
    console.print(Rule(plain_text(f"example {result.example_id} · rollout {result.rollout_index}")))
    head = Table(show_header=False, show_edge=False, box=None)
    head.add_column("key", style="bold")
    head.add_column("value", overflow="fold")
    head.add_row("task", plain_text(result.task))
    head.add_row("reward", f"{result.reward:.4f}")
    for name, value in result.metrics.items():
        head.add_row(plain_text(f"  {name}"), f"{value:.4f}")
    head.add_row(
        "stop reason", plain_text(result.stop_reason, style="red" if result.stop_reason == "error" else "")
    )
    head.add_row("turns", str(result.turns))
    if result.is_truncated:
        head.add_row("truncated", plain_text("yes", style="yellow"))
    if result.error is not None:
        e = result.error
        head.add_row("error", plain_text(f"{e.type} ({e.where}): {e.message}", style="bold red"))
    for e in result.scoring_errors:
        head.add_row("scoring error", plain_text(f"{e.type} ({e.where}): {e.message}", style="red"))
    head.add_row("answer", plain_text(result.answer))
    if result.info:
        head.add_row("info", plain_text(_plain(result.info)))
    t, u = result.timing, result.usage
    head.add_row(
        "time", f"generation {t.generation_s:.3f} s · scoring {t.scoring_s:.3f} s · total {t.total_s:.3f} s"
    )
    head.add_row("tokens", f"prompt {u.prompt_tokens} · completion {u.completion_tokens}")
    console.print(head)
    console.print(Rule(plain_text("prompt", style="dim"), style="dim"))
    for panel in _messages(result.prompt, "prompt"):
        console.print(panel)
    console.print(Rule(plain_text("completion", style="dim"), style="dim"))
    panels = _messages(result.completion, "completion")
    if not panels:
        console.print(plain_text("(no completion)", style="dim"))
    for panel in panels:
        console.print(panel)


def parse_rollout_ref(text: str) -> tuple[int, int | None]:
    """``"EX:R"`` → (EX, R); ``"EX"`` → (EX, None) meaning every rollout of example EX."""
    m = _REF_RE.match(text)
    if not m:
        raise ConfigError(f"cannot read rollout reference {text!r}; write EXAMPLE:ROLLOUT, e.g. 3:0")
    return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)


def select_rollouts(results: Sequence[RolloutResult], ref: str) -> list[RolloutResult]:
    """The rollouts ``ref`` (EX:R or EX) points at; ConfigError naming what exists when none."""
    ex, r = parse_rollout_ref(ref)
    picked = [
        x for x in sorted_results(results) if x.example_id == ex and (r is None or x.rollout_index == r)
    ]
    if not picked:
        have = sorted({x.example_id for x in results})
        shown = ", ".join(map(str, have[:20])) + (" ..." if len(have) > 20 else "")
        raise ConfigError(f"no rollout {ref} in this run; example ids present: {shown or 'none'}")
    return picked


# -- the interactive loop ------------------------------------------------------------------


def _make_ask(console: Console, stream: TextIO | None) -> Ask:
    """A prompt that returns None on end of input or Ctrl-C (so the loop ends instead of spinning)."""

    def ask(prompt: str) -> str | None:
        try:
            if stream is None:
                return console.input(plain_text(f"{prompt} > ", style="bold")).strip()
            console.print(plain_text(f"{prompt} > ", style="bold"), end="")
            line = stream.readline()
            if not line:
                return None
            console.print(plain_text(line.rstrip("\n"), style="dim"))
            return line.strip()
        except (EOFError, KeyboardInterrupt):
            return None

    return ask


_QUIT = {"q", "quit", "exit"}
Outcome = Literal["back", "quit"]


def _run_loop(
    path: Path, console: Console, ask: Ask, page_size: int, can_go_back: bool, sort: SortKey = "example"
) -> Outcome:
    run = load_run(path)
    render_run(run, console, show_rollouts=False)
    errors_only = False
    page = 0
    show_table = True
    while True:
        all_rows = sorted_results(run.results, sort)
        rows = [r for r in all_rows if r.error is not None or r.scoring_errors] if errors_only else all_rows
        pages = max(1, -(-len(rows) // page_size))
        page = min(max(page, 0), pages - 1)
        start = page * page_size
        if show_table:
            title = f"Rollouts {start + 1}-{min(start + page_size, len(rows))} of {len(rows)}"
            title += " (with errors)" if errors_only else ""
            title += "" if sort == "example" else f", by {_SORT_LABEL[sort]}"
            render_rollouts_table(rows[start : start + page_size], console, start=start, title=title)
        # After a transcript the table is not drawn again: it would push the transcript off the
        # screen. Enter (an empty answer) draws it.
        show_table = True
        hint = "#row or EX:R opens a rollout · n/p page · r sort by reward · e errors only · s summary"
        hint += " · enter table · b back · q quit" if can_go_back else " · enter table · q quit"
        answer = ask(hint)
        if answer is None or answer.lower() in _QUIT:
            return "quit"
        cmd = answer.lower()
        if cmd in ("b", "back") and can_go_back:
            return "back"
        if not cmd:
            continue  # redraw
        if cmd in ("n", "next"):
            page += 1
        elif cmd in ("p", "prev"):
            page -= 1
        elif cmd == "e":
            errors_only, page = not errors_only, 0
        elif cmd == "r":  # example order -> lowest reward first -> highest first -> example order
            sort, page = SORT_KEYS[(SORT_KEYS.index(sort) + 1) % len(SORT_KEYS)], 0
        elif cmd == "s":
            render_run(run, console, show_rollouts=False)
        elif ":" in cmd:
            try:
                for r in select_rollouts(all_rows, cmd):
                    render_rollout(r, console)
                show_table = False
            except ConfigError as exc:
                console.print(plain_text(str(exc), style="red"))
        elif cmd.isdigit() and 1 <= int(cmd) <= len(rows):
            render_rollout(rows[int(cmd) - 1], console)
            show_table = False
        else:
            console.print(plain_text(f"not understood: {answer!r}", style="red"))


def _root_loop(root: Path, console: Console, ask: Ask, page_size: int, sort: SortKey = "example") -> None:
    while True:
        runs = list_runs(root)
        render_runs_table(runs, console, root)
        if not runs:
            console.print(plain_text(f"no saved runs under {root} (vf-eval -s writes them)", style="yellow"))
            return
        answer = ask("# opens a run · q quit")
        if answer is None or answer.lower() in _QUIT:
            return
        if answer.isdigit() and 1 <= int(answer) <= len(runs):
            outcome = _run_loop(
                runs[int(answer) - 1].path, console, ask, page_size, can_go_back=True, sort=sort
            )
            if outcome == "quit":
                return
        elif answer:
            console.print(plain_text(f"not understood: {answer!r}", style="red"))


# -- entry point -----------------------------------------------------------------------


def view(
    path: Path | None,
    console: Console,
    *,
    interactive: bool | None = None,
    rollout: str | None = None,
    input_stream: TextIO | None = None,
    page_size: int = 30,
    sort: SortKey = "example",
) -> None:
    """Show runs under a root directory, or one run, in the terminal.

    Args:
        path: A run directory, or a directory holding runs (default ``outputs/evals``).
        console: Where to print.
        interactive: Prompt for what to open next. None: only when stdin and the console
            are terminals (or ``input_stream`` is given).
        rollout: ``EX:R`` (or ``EX`` for all rollouts of an example): print that
            transcript and return. Needs a run directory.
        input_stream: Read answers from this stream instead of the terminal (tests, scripts).
        page_size: Rollouts per page in interactive mode.
        sort: Order of the rollout table: ``example``, ``reward`` (lowest first) or
            ``reward-desc`` (highest first); ``r`` switches it in interactive mode.
    """
    target = Path(path) if path is not None else DEFAULT_ROOT
    if page_size < 1:
        raise ConfigError(f"page_size must be >= 1, got {page_size}")
    if sort not in SORT_KEYS:
        raise ConfigError(f"cannot sort rollouts by {sort!r}; use one of {', '.join(SORT_KEYS)}")
    if not target.exists():
        if path is None:
            console.print(plain_text(f"no saved runs: {target} does not exist (vf-eval -s writes runs there)"))
            return
        raise ConfigError(
            f"{target} does not exist; pass a run directory or a folder of runs (e.g. outputs/evals)"
        )
    run_dir = is_run_dir(target)
    if rollout is not None:
        if not run_dir:
            raise ConfigError(
                f"--rollout needs a run directory, but {target} is a folder of runs; pass one run"
            )
        for r in select_rollouts(load_run(target).results, rollout):
            render_rollout(r, console)
        return
    if interactive is None:
        interactive = input_stream is not None or (sys.stdin.isatty() and console.is_terminal)
    if not interactive:
        if run_dir:
            render_run(load_run(target), console, sort=sort)
        else:
            runs = list_runs(target)
            render_runs_table(runs, console, target)
            if not runs:
                console.print(plain_text(f"no saved runs under {target}"))
        return
    ask = _make_ask(console, input_stream)
    if run_dir:
        _run_loop(target, console, ask, page_size, can_go_back=False, sort=sort)
    else:
        _root_loop(target, console, ask, page_size, sort)
