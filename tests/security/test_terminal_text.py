"""Model and environment text reaches the terminal escaped, never as control sequences or markup.

A completion can hold terminal control sequences: OSC 52 writes the user's clipboard, CSI 2J
clears the screen, OSC 0 retitles the window, OSC 8 hides a link, U+202E reverses what a
reviewer reads. vf-eval's progress, first-error lines and summary, and vf-view's tables and
transcripts must show such text with its controls escaped, and must not parse it as rich
markup. The consoles here have no colour system, so any ESC byte in their output came from
the model, not from rich.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

import verifiers as vf
from verifiers.eval.runner import EvalConfig, run_eval
from verifiers.eval.viewer import view
from verifiers.terminal import escape_controls
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

HOSTILE = (
    "\x1b]52;c;cHduZWQ=\x07 \x1b[2J\x1b[H \x1b]0;owned\x07 "
    "\x1b]8;;http://evil.invalid\x1b\\click\x1b]8;;\x1b\\ \u202eevil\u202c \x9b31m [/bold] [red]x[/red] \x08\x7f done"
)
RAW_CONTROLS = ("\x1b", "\x07", "\x08", "\x7f", "\x9b", "\u202e")


def hostile_reward(completion) -> float:
    raise ValueError(f"reward crashed on {HOSTILE}")


def run_hostile_eval(output_dir: Path) -> tuple[str, Path]:
    env = vf.SingleTurnEnv(
        dataset=[{"question": "q", "answer": "a"}], rubric=vf.Rubric(funcs=[hostile_reward])
    )
    shown = io.StringIO()
    with ScriptedServer(ServerScript(replies=[ScriptedReply(content=HOSTILE)])) as server:
        config = EvalConfig(
            env_id="hostile-env",
            model="m",
            base_url=server.base_url,
            num_examples=1,
            rollouts_per_example=2,
            save=True,
            output_dir=output_dir,
            show_progress=True,
        )
        result = run_eval(config, env=env, console=Console(file=shown, width=200, color_system=None))
    assert result.run_dir is not None
    return shown.getvalue(), result.run_dir


def assert_escaped(text: str) -> None:
    leaked = [repr(c) for c in RAW_CONTROLS if c in text]
    assert not leaked, f"raw control characters reached the terminal: {leaked}"


def test_escape_controls_keeps_text_and_layout() -> None:
    assert escape_controls("héllo 世界 🙂\n\tx") == "héllo 世界 🙂\n\tx"
    assert escape_controls("\x1b[2J\x00\u202e") == "\\x1b[2J\\x00\\u202e"


def test_vf_eval_and_vf_view_show_hostile_text_escaped(tmp_path: Path) -> None:
    eval_out, run_dir = run_hostile_eval(tmp_path)
    assert_escaped(eval_out)

    console_buf = io.StringIO()
    console = Console(file=console_buf, width=200, color_system=None)
    view(run_dir, console, interactive=False)
    view(run_dir, console, interactive=False, rollout="0:0")
    shown = console_buf.getvalue()
    assert_escaped(shown)
    assert "\\x1b]52;c;" in shown and "\\u202e" in shown  # shown, escaped, in the transcript
    assert "[/bold] [red]x[/red]" in shown  # markup-like text is printed literally, and did not crash
    assert "reward crashed on" in shown  # the scoring error's message is shown too


def test_vf_train_sample_table_shows_model_text_escaped() -> None:
    """Before the fix a completion holding `[/bold]` crashed vf-train at the end of the run (rich markup)."""
    reporting = pytest.importorskip("trainers.grpo.run.reporting")
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(
        reporting.samples_table([("Say [bold]a", HOSTILE, 0.5)], "samples at step 3"))
    shown = buf.getvalue()
    assert_escaped(shown)
    assert "[/bold]" in shown and "Say [bold]a" in shown
