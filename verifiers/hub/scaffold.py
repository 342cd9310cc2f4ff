"""Scaffold a new environment package (``vf-init``) that passes ``check_environment`` as generated.

The package follows the layout of the bundled environments::

    environments/<module>/pyproject.toml      distribution <env-id>, entry point in ``verifiers.environments``
    environments/<module>/<module>/__init__.py  load_environment(**kwargs)
    environments/<module>/README.md           what it is, env-args table, metrics table
    environments/<module>/tests/test_<module>.py

Names: an id such as ``my-env`` (what users type in ``vf-eval my-env``) maps to the
module ``my_env`` (what `verifiers.load_environment` imports) and to the PEP 503
distribution name ``my-env`` (what pip and the hub use). The three kinds are working
examples of the environment shapes: one model call (``single``), a turn loop with
environment replies (``multi``), tool calls (``tool``) and an agent program run through
the interception gateway (``agent``, templates in `verifiers.hub.scaffold_agent`).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from string import Template
from typing import Literal

from pydantic import BaseModel

from verifiers.envs.names import EnvNames, env_names
from verifiers.errors import ConfigError
from verifiers.hub.scaffold_agent import AGENT_DOCS, AGENT_MODULE, AGENT_PROGRAM, AGENT_TEST

__all__ = ["KINDS", "EnvKind", "EnvNames", "ScaffoldResult", "env_names", "scaffold_environment"]

EnvKind = Literal["single", "multi", "tool", "agent"]
KINDS: tuple[EnvKind, ...] = ("single", "multi", "tool", "agent")
class ScaffoldResult(BaseModel):
    """Where the package was written and how to use it."""

    names: EnvNames
    kind: EnvKind
    package_dir: str
    files: list[str]


_PYPROJECT = Template("""\
[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "$env_id"
version = "0.1.0"
description = $description_toml
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["verifiers"]

[project.entry-points."verifiers.environments"]
$env_id = "$module:load_environment"

[tool.setuptools]
packages = ["$module"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
""")

_SINGLE_MODULE = Template('''\
"""$env_id: $description

A single-turn environment: one model call per example, scored by a rubric. Replace
the example data, the prompt and the reward with your task; keep ``load_environment``
(``vf.load_environment("$env_id", **env_args)`` calls it with the env args).
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

__all__ = ["EVAL_EXAMPLES", "SYSTEM_PROMPT", "TRAIN_EXAMPLES", "exact_answer", "load_environment"]

SYSTEM_PROMPT = "Repeat the user's text exactly, inside <answer>...</answer>."

# Rows need a "question" (or a chat "prompt") and usually an "answer"; "info" may hold
# anything JSON-serialisable. A datasets.Dataset works as well as a list of dicts.
TRAIN_EXAMPLES = [
    {"question": "red apple", "answer": "red apple"},
    {"question": "blue sky", "answer": "blue sky"},
    {"question": "green grass", "answer": "green grass"},
    {"question": "yellow sun", "answer": "yellow sun"},
]
EVAL_EXAMPLES = [
    {"question": "white snow", "answer": "white snow"},
    {"question": "black night", "answer": "black night"},
    {"question": "grey stone", "answer": "grey stone"},
]


def exact_answer(completion: vf.Messages, answer: str, parser: vf.Parser) -> float:
    """1.0 when the text inside <answer> equals the expected answer, else 0.0."""
    parsed = parser.parse_answer(completion)
    return float(parsed is not None and parsed.strip() == answer.strip())


def load_environment(
    num_eval_examples: int = -1, system_prompt: str = SYSTEM_PROMPT, **kwargs: Any
) -> vf.Environment:
    """Build the $env_id environment.

    Args:
        num_eval_examples: Evaluation examples to keep (-1: all).
        system_prompt: Instructions shown before each example.
        **kwargs: Passed on to ``vf.SingleTurnEnv`` (e.g. ``sampling_args``).
    """
    if num_eval_examples == 0 or num_eval_examples < -1:
        raise ValueError(f"num_eval_examples must be -1 (all) or positive, got {num_eval_examples}")
    evaluation = EVAL_EXAMPLES if num_eval_examples == -1 else EVAL_EXAMPLES[:num_eval_examples]
    parser = vf.XMLParser(["answer"], answer_field="answer")
    rubric = vf.Rubric(
        funcs=[exact_answer, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser
    )
    return vf.SingleTurnEnv(
        dataset=TRAIN_EXAMPLES,
        eval_dataset=evaluation,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        **kwargs,
    )
''')

_MULTI_MODULE = Template('''\
"""$env_id: $description

A multi-turn environment: the environment answers each model turn until the episode
is over. Here it is an echo game: each round the user sends a word and the model must
repeat it inside <answer>...</answer>; after the last round the environment sends a
final score message. Replace the game with your task; keep ``load_environment``
(``vf.load_environment("$env_id", **env_args)`` calls it with the env args).
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

__all__ = ["SYSTEM_PROMPT", "EchoGameEnv", "accuracy", "load_environment", "make_rows"]

SYSTEM_PROMPT = (
    "We play several rounds. Each round I send one word; reply with exactly that word "
    "inside <answer>...</answer>."
)
WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "piano", "lemon", "comet", "amber"]


def make_rows(num_games: int, rounds: int, offset: int = 0) -> list[dict[str, Any]]:
    """One row per game: the first word is the prompt, every word of the game is in ``info``."""
    rows = []
    for game in range(num_games):
        words = [WORDS[(offset + game * rounds + k) % len(WORDS)] for k in range(rounds)]
        rows.append({"question": words[0], "answer": " ".join(words), "info": {"words": words}})
    return rows


class EchoGameEnv(vf.MultiTurnEnv):
    """Sends the next word after each model turn and a score message after the last one."""

    async def setup_state(self, state: vf.State, **kwargs: Any) -> vf.State:
        state["round"] = 0
        state["correct"] = 0
        return state

    async def is_completed(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> bool:
        return state["round"] >= len(state["info"]["words"])

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> list[vf.Message]:
        words = state["info"]["words"]
        guess = self.parser.parse_answer(messages[-1:])
        if guess is not None and guess.strip() == words[state["round"]]:
            state["correct"] += 1
        state["round"] += 1
        if state["round"] >= len(words):
            # A final environment message: the episode ends here and the rubric sees it.
            return [{"role": "user", "content": f"Game over: {state['correct']}/{len(words)} correct."}]
        return [{"role": "user", "content": words[state["round"]]}]


def accuracy(state: vf.State, info: vf.Info) -> float:
    """Fraction of rounds in which the model repeated the word exactly."""
    return state.get("correct", 0) / max(1, len(info["words"]))


def load_environment(
    num_train_examples: int = 8,
    num_eval_examples: int = 4,
    rounds: int = 3,
    max_turns: int = 10,
    system_prompt: str = SYSTEM_PROMPT,
    **kwargs: Any,
) -> vf.Environment:
    """Build the $env_id environment.

    Args:
        num_train_examples: Games in the training split (0: evaluation only).
        num_eval_examples: Games in the evaluation split (0: none).
        rounds: Words per game.
        max_turns: Most model turns per game (a game needs ``rounds`` turns).
        system_prompt: Instructions shown before each game.
        **kwargs: Passed on to ``vf.MultiTurnEnv`` (e.g. ``sampling_args``).
    """
    if num_train_examples < 0 or num_eval_examples < 0 or num_train_examples + num_eval_examples == 0:
        raise ValueError("ask for at least one training or evaluation game, and no negative counts")
    if not 1 <= rounds <= max_turns:
        raise ValueError(f"need 1 <= rounds <= max_turns, got rounds={rounds}, max_turns={max_turns}")
    train = make_rows(num_train_examples, rounds)
    evaluation = make_rows(num_eval_examples, rounds, offset=num_train_examples * rounds + 1)
    parser = vf.XMLParser(["answer"], answer_field="answer")
    rubric = vf.Rubric(funcs=[accuracy, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser)
    return EchoGameEnv(
        max_turns=max_turns,
        dataset=train or None,
        eval_dataset=evaluation or None,
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        **kwargs,
    )
''')

_TOOL_MODULE = Template('''\
"""$env_id: $description

A tool environment: the model may call the Python functions in ``tools`` (their
signatures and docstrings become the tool schemas) until it answers without a tool
call. Replace the tool, the data and the reward with your task; keep
``load_environment`` (``vf.load_environment("$env_id", **env_args)`` calls it).
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

__all__ = ["EXAMPLES", "SYSTEM_PROMPT", "count_letter", "exact_answer", "load_environment", "used_tool"]

SYSTEM_PROMPT = (
    "Answer the question. Use the count_letter tool to count letters, then give only the "
    "number inside <answer>...</answer>."
)
WORDS = [("strawberry", "r"), ("banana", "a"), ("mississippi", "s"), ("bookkeeper", "e"), ("committee", "t")]
EXAMPLES = [
    {
        "question": f"How many times does the letter {letter!r} appear in {word!r}?",
        "answer": str(word.count(letter)),
        "info": {"word": word, "letter": letter},
    }
    for word, letter in WORDS
]


def count_letter(word: str, letter: str) -> int:
    """Count how often a letter occurs in a word (case-insensitive).

    Args:
        word: The word to search.
        letter: The letter to count.
    """
    return word.lower().count(letter.lower())


def exact_answer(completion: vf.Messages, answer: str, parser: vf.Parser) -> float:
    """1.0 when the text inside <answer> equals the expected number, else 0.0."""
    parsed = parser.parse_answer(completion)
    return float(parsed is not None and parsed.strip() == answer)


def used_tool(completion: vf.Messages) -> float:
    """1.0 when the model called a tool at least once (a metric, weight 0)."""
    return float(any(m.get("role") == "tool" for m in completion if isinstance(m, dict)))


def load_environment(max_turns: int = 4, system_prompt: str = SYSTEM_PROMPT, **kwargs: Any) -> vf.Environment:
    """Build the $env_id environment.

    Args:
        max_turns: Most model turns per rollout (tool calls plus the final answer).
        system_prompt: Instructions shown before each question.
        **kwargs: Passed on to ``vf.ToolEnv`` (e.g. ``tool_timeout_s``).
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    parser = vf.XMLParser(["answer"], answer_field="answer")
    rubric = vf.Rubric(funcs=[exact_answer, used_tool], weights=[1.0, 0.0], parser=parser)
    return vf.ToolEnv(
        tools=[count_letter],
        max_turns=max_turns,
        dataset=EXAMPLES[:3],
        eval_dataset=EXAMPLES[3:],
        system_prompt=system_prompt,
        parser=parser,
        rubric=rubric,
        **kwargs,
    )
''')

_TEST_HEADER = Template('''\
"""$env_id: the conformance check, plus rollouts against a scripted model over HTTP."""

from __future__ import annotations
$stdlib_imports
import $module$pytest_import

import verifiers as vf
from verifiers.testing import $testing_names


def run(env: vf.Environment, *replies: ScriptedReply, num_examples: int = 2) -> vf.GenerateOutputs:
    """Evaluate ``env`` against a local scripted server that answers with ``replies``."""
    with ScriptedServer(ServerScript(replies=list(replies))) as server:
        client = vf.make_client(server.base_url, max_retries=0)
        return env.evaluate(client, "scripted", num_examples=num_examples)


def test_environment_passes_the_conformance_check() -> None:
    report = check_environment($module.load_environment())
    assert report.ok, report.problems


def test_loads_by_id() -> None:
    env = vf.load_environment("$env_id")
    assert env.env_id == "$env_id"
''')

_SINGLE_TEST = Template("""

def test_right_answers_score_full_reward() -> None:
    out = run($module.load_environment(), ScriptedReply(content="<answer>{last_user}</answer>"))
    assert out.metrics["exact_answer"] == [1.0, 1.0]
    assert out.reward == [pytest.approx(1.2)] * 2


def test_wrong_or_unformatted_answers_score_zero() -> None:
    out = run($module.load_environment(), ScriptedReply(content="<answer>something else</answer>"))
    assert out.metrics["exact_answer"] == [0.0, 0.0]
    out = run($module.load_environment(), ScriptedReply(content="{last_user}"))
    assert out.reward == [0.0, 0.0]
""")

_MULTI_TEST = Template("""

def test_perfect_play_scores_full_accuracy_and_sees_the_final_message() -> None:
    out = run($module.load_environment(rounds=3), ScriptedReply(content="<answer>{last_user}</answer>"))
    assert out.metrics["accuracy"] == [1.0, 1.0]
    for completion in out.completion:
        assert sum(m["role"] == "assistant" for m in completion) == 3
        assert completion[-1] == {"role": "user", "content": "Game over: 3/3 correct."}


def test_wrong_words_score_zero() -> None:
    out = run($module.load_environment(rounds=2), ScriptedReply(content="<answer>nope</answer>"))
    assert out.metrics["accuracy"] == [0.0, 0.0]
""")

_TOOL_TEST = Template("""

def test_tool_call_then_answer_scores_full_reward() -> None:
    env = $module.load_environment()
    info = env.eval_dataset[0]["info"]
    out = run(
        env,
        ScriptedReply(turn=0, tool_calls=[ScriptedToolCall(name="count_letter", arguments=json.dumps(info))]),
        ScriptedReply(content="<answer>{last_message}</answer>"),  # the tool's result
        num_examples=1,
    )
    assert out.error == [None]
    assert out.metrics["used_tool"] == [1.0]
    assert out.metrics["exact_answer"] == [1.0]
    assert out.reward == [1.0]


def test_wrong_answer_without_tool_scores_zero() -> None:
    out = run($module.load_environment(), ScriptedReply(content="<answer>-1</answer>"), num_examples=1)
    assert out.metrics["used_tool"] == [0.0]
    assert out.reward == [0.0]
""")

_README = Template("""\
# $env_id

$description

$what

## Install and run

```bash
pip install -e environments/$module          # or: vf-install $env_id
vf-eval $env_id -n 5 -r 1 -m MODEL -b http://localhost:8000/v1
```

or from Python:

```python
import verifiers as vf

env = vf.load_environment("$env_id")
out = env.evaluate(vf.make_client("http://localhost:8000/v1"), "MODEL", num_examples=5)
```

Run its tests with `python -m pytest environments/$module` (they use a scripted model, no server
needed; `pip install pytest` first if this environment has no pytest).

## Environment arguments

| argument | default | meaning |
|---|---|---|
$args_rows

## Metrics

| metric | weight | meaning |
|---|---|---|
$metric_rows
""")

_KIND_DOCS: dict[str, dict[str, str]] = {
    "single": {
        "what": "Single-turn: the model repeats the user's text inside `<answer>...</answer>` "
        "(a placeholder task; replace the data and the reward in `$module/__init__.py`).",
        "args": "| `num_eval_examples` | `-1` | evaluation examples to keep (-1: all) |\n"
        "| `system_prompt` | see `$module.SYSTEM_PROMPT` | the instructions |\n"
        "| other keyword arguments | | passed to `vf.SingleTurnEnv` (e.g. `sampling_args`) |",
        "metrics": "| `exact_answer` | 1.0 | 1.0 when the `<answer>` text equals the expected answer |\n"
        '| `format_reward_func` | 0.2 | `XMLParser(["answer"])` format score of the reply |',
    },
    "multi": {
        "what": "Multi-turn echo game: each round the environment sends a word and the model repeats it "
        "inside `<answer>...</answer>`; after the last round the environment sends the score "
        "(a placeholder task; replace the game in `$module/__init__.py`).",
        "args": "| `num_train_examples` | `8` | games in the training split (0: evaluation only) |\n"
        "| `num_eval_examples` | `4` | games in the evaluation split (0: none) |\n"
        "| `rounds` | `3` | words per game |\n"
        "| `max_turns` | `10` | most model turns per game |\n"
        "| `system_prompt` | see `$module.SYSTEM_PROMPT` | the instructions |\n"
        "| other keyword arguments | | passed to `vf.MultiTurnEnv` |",
        "metrics": "| `accuracy` | 1.0 | fraction of rounds answered with exactly the word sent |\n"
        '| `format_reward_func` | 0.2 | mean `XMLParser(["answer"])` format score over the model\'s turns |',
    },
    "tool": {
        "what": "Tool use: the model counts letters with the `count_letter` tool and answers inside "
        "`<answer>...</answer>` (a placeholder task; replace the tool and data in `$module/__init__.py`).",
        "args": "| `max_turns` | `4` | most model turns per rollout (tool calls plus the answer) |\n"
        "| `system_prompt` | see `$module.SYSTEM_PROMPT` | the instructions |\n"
        "| other keyword arguments | | passed to `vf.ToolEnv` (e.g. `tool_timeout_s`) |",
        "metrics": "| `exact_answer` | 1.0 | 1.0 when the `<answer>` text equals the expected count |\n"
        "| `used_tool` | 0.0 | 1.0 when the model called a tool (a metric only) |",
    },
}
_KIND_DOCS["agent"] = AGENT_DOCS
_MODULES = {"single": _SINGLE_MODULE, "multi": _MULTI_MODULE, "tool": _TOOL_MODULE, "agent": AGENT_MODULE}
_PROGRAMS = {"agent": AGENT_PROGRAM}
_TESTS = {"single": _SINGLE_TEST, "multi": _MULTI_TEST, "tool": _TOOL_TEST, "agent": AGENT_TEST}
_TESTING = "ScriptedReply, ScriptedServer, ServerScript, check_environment"
_TEST_IMPORTS = {
    "single": {"stdlib_imports": "", "pytest_import": "\nimport pytest", "testing_names": _TESTING},
    "multi": {"stdlib_imports": "", "pytest_import": "", "testing_names": _TESTING},
    "tool": {
        "stdlib_imports": "\nimport json\n",
        "pytest_import": "",
        "testing_names": "ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript, check_environment",
    },
    "agent": {
        "stdlib_imports": "",
        "pytest_import": "",
        "testing_names": "ScriptedReply, ScriptedServer, ScriptedToolCall, ServerScript, check_environment",
    },
}
_DEFAULT_DESCRIPTION = {
    "single": "a single-turn verifiers environment",
    "multi": "a multi-turn verifiers environment",
    "tool": "a tool-use verifiers environment",
    "agent": "an agent-program verifiers environment",
}


def _check_description(description: str) -> str:
    description = description.strip()
    if not description or "\n" in description or "\\" in description or '"""' in description:
        raise ConfigError("the description must be one non-empty line without backslashes or triple quotes")
    return description


def _render(kind: EnvKind, names: EnvNames, description: str) -> dict[str, str]:
    values = {
        "env_id": names.env_id,
        "module": names.module,
        "description": description,
        "description_toml": json.dumps(description),
    }
    docs = {k: Template(v).substitute(values) for k, v in _KIND_DOCS[kind].items()}
    readme = _README.substitute(
        values, what=docs["what"], args_rows=docs["args"], metric_rows=docs["metrics"]
    )
    files = {
        "pyproject.toml": _PYPROJECT.substitute(values),
        f"{names.module}/__init__.py": _MODULES[kind].substitute(values),
        "README.md": readme,
        f"tests/test_{names.module}.py": _TEST_HEADER.substitute(values, **_TEST_IMPORTS[kind])
        + _TESTS[kind].substitute(values),
    }
    if kind in _PROGRAMS:
        files[f"{names.module}/agent.py"] = _PROGRAMS[kind].substitute(values)
    return files


def _check_not_shadowing(module: str, package_dir: Path) -> None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if spec is not None and (origin is None or package_dir.resolve() not in origin.parents):
        raise ConfigError(
            f"a module named {module!r} is already importable ({spec.origin or 'namespace package'}); "
            "a new environment with that name would clash with it. Pick another name, or pass "
            "--force if that module is an earlier install of this same environment."
        )


def scaffold_environment(
    name: str,
    environments_dir: Path = Path("environments"),
    *,
    kind: EnvKind = "single",
    description: str | None = None,
    force: bool = False,
) -> ScaffoldResult:
    """Write a new environment package under ``environments_dir/<module>/`` and return what was written.

    Refuses to touch an existing folder unless ``force`` (then only the generated
    files are overwritten; other files stay).
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    names = env_names(name)
    text = _check_description(description or _DEFAULT_DESCRIPTION[kind])
    package_dir = Path(environments_dir) / names.module
    if package_dir.exists() and not force:
        raise ConfigError(
            f"{package_dir} already exists; pick another name, or pass --force to overwrite its generated files"
        )
    if not force:
        _check_not_shadowing(names.module, package_dir)
    written = []
    for rel, content in _render(kind, names, text).items():
        path = package_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(str(path))
    return ScaffoldResult(names=names, kind=kind, package_dir=str(package_dir), files=written)
