"""Every flag the docs give a command exists in that command's parser (or, for vf-train, its config).

Commands are read from shell blocks and from inline code spans of README.md and docs/*.md,
skipped snippets included: a flag a doc names but the CLI lacks fails here, with the place.
Each CLI's own parser is taken from its ``main`` (its ``parse_args`` stopped before anything
runs), so the check follows the code without a second list of flags.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import types
import typing
from typing import Any
from unittest import mock

import pytest
from pydantic import BaseModel

from verifiers.v1.cli import knows_flag as knows_v1_flag  # vf-eval's v1 dialect (a taskset's command line)

from .conftest import S

# command (as typed) -> the module whose main(argv) parses its arguments
CLIS = {
    "vf-eval": "verifiers.cli.eval",
    "vf-view": "verifiers.cli.view",
    "vf-init": "verifiers.cli.init",
    "vf-build": "verifiers.cli.build",
    "vf-install": "verifiers.cli.install",
    "vf-serve": "verifiers.cli.serve",
    "vf-vllm": "verifiers.cli.vllm",
    "vf-model": "verifiers.cli.model",
    "vf-tiny": "verifiers.models.tiny",
    "python -m verifiers.testing.server": "verifiers.testing.spawn",
}
TRAIN = ("vf-train", "python -m trainers.grpo.cli", "-m trainers.grpo.cli")
TRAIN_CLI_FLAGS = {"--resume", "--overwrite", "--num_processes", "--fsdp", "-h", "--help"}  # trainers/grpo/cli.py
TRAIN_USAGE = {"--key"}  # usage notation: `vf-train CONFIG.toml [--key value ...]`


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def cli_parser(module: str) -> argparse.ArgumentParser:
    """The parser ``module.main`` builds, caught at its first ``parse_args`` (nothing runs)."""
    def stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Parsed(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", stop):
        try:
            importlib.import_module(module).main([])
        except _Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{module}.main did not call parse_args")


def options(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of ``parser`` and of its sub-commands (``vf-model get --output``)."""
    found = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= options(sub)
    return found


def _unwrap(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _unwrap(arg)
            if found is not None:
                return found
    return None


def train_key_exists(key: str) -> bool:
    """``a.b.c`` names a field of TrainConfig (through its nested models)."""
    from trainers.grpo.config import TrainConfig

    model: type[BaseModel] | None = TrainConfig
    for part in key.replace("-", "_").split("."):  # cli: `-` in a key becomes `_`
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        if typing.get_origin(annotation) is dict or annotation is dict:
            return True  # a free-form table (algorithm_overrides): any key below it
        model = _unwrap(annotation)
    return True


def _commands(text: str) -> list[str]:
    """Shell text as single commands: continuations joined, comments dropped, split at && ; | &."""
    text = text.replace("\\\n", " ")
    out: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        out += [c.strip() for c in re.split(r"&&|;|\|\||(?<![\\|])\|(?!\|)|&(?!&)", line) if c.strip()]
    return out


def _flags(command_tail: str) -> list[str]:
    """The option names in a command's arguments; usage notation ([...], A|B, =VALUE, ...) allowed."""
    tail = command_tail.split(" -- ")[0]  # after `--`: arguments for another program (vLLM)
    tail = tail.replace("/-", " -")  # -s/--save-results: both spellings
    tokens = re.findall(r"(?<![\w/.:'\"{])(--?[A-Za-z][\w.\-]*)", tail)
    return [t.rstrip(".") for t in tokens]


# Flags of other programs the docs name on their own (in `...`), and whose they are: a path is
# checked (the flag must be in that file), a program name is taken as documented.
FOREIGN = {
    "--no-build-isolation": "pip", "--no-deps": "pip", "--trusted-host": "pip", "-W": "python", "--multi_gpu": "accelerate",
    "--weight-transfer-config": "vLLM", "--enable-auto-tool-choice": "vLLM", "--tool-call-parser": "vLLM",
    "--gpu-memory-utilization": "vLLM", "--middleware": "vLLM", "--no-enable-chunked-prefill": "vLLM",
    "--enable-scale-out": "vLLM", "--eval-engine": "benchmarks/real_model.py",
    "--test-only": "scripts/update-constraints.sh", "--learn": "benchmarks/scale.py",
    "--steps": "benchmarks/scale.py", "--loss": "benchmarks/agentic_copy_probe.py",
    "--tools": "benchmarks/agentic_copy_probe.py", "--ahead": "benchmarks/trainer_step.py",
    "--cpu": "accelerate", "--modes": "benchmarks/scale.py",
    "--size": "benchmarks/trainer_step.py", "--rounds": "benchmarks/trainer_step.py",
    "--train": "benchmarks/real_model.py", "--program": "benchmarks/real_agent.py",
    "--stream": "tests/agents/programs/openai_agents_default.py",
    "--chain": "tests/agents/programs/openai_agents_default.py",
}


def _in_file(flag: str, rel: str) -> bool:
    text = (S.ROOT / rel).read_text(encoding="utf-8")
    return re.search(rf"{re.escape(flag)}(?![\w-])", text) is not None


def prose_flags() -> list[tuple[str, str]]:
    """(where, flag) for inline code spans that are only flags, e.g. `--no-check`."""
    found: list[tuple[str, str]] = []
    for rel in S.doc_files(S.ROOT):
        text = (S.ROOT / rel).read_text(encoding="utf-8")
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for m in re.finditer(r"`(--?[A-Za-z][^`\n]*)`", prose):
            line = text[: text.find(m.group(0))].count("\n") + 1
            found += [(f"{rel}:{line}", f) for f in _flags(" " + m.group(1))]
    return found


def doc_commands() -> list[tuple[str, str]]:
    """(where, command) for every command in shell blocks and inline code spans."""
    found: list[tuple[str, str]] = []
    for rel in S.doc_files(S.ROOT):
        text = (S.ROOT / rel).read_text(encoding="utf-8")
        for snippet in S.extract(S.ROOT, rel):
            if snippet.lang in ("bash", "sh", "shell", "console"):
                found += [(f"{rel}:{snippet.line}", c) for c in _commands(snippet.code)]
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for m in re.finditer(r"`([^`\n]+)`", prose):
            line = text[: text.find(m.group(0))].count("\n") + 1
            found += [(f"{rel}:{line}", c) for c in _commands(m.group(1).replace("\\|", "|"))]
    return found


def _which(command: str) -> tuple[str, str] | None:
    """(cli, argument text) when ``command`` runs one of ours."""
    command = re.sub(r"^(?:[A-Z_]+=\S*\s+)+", "", command)  # VAR=value prefixes
    script = re.match(r"(?:python|bash) ((?:benchmarks|scripts)/[\w.\-]+)(.*)$", command)
    if script:
        return script.group(1), script.group(2)
    for train in TRAIN:
        i = command.find(train)
        if i >= 0 and (i == 0 or command.startswith("accelerate launch")):
            return "vf-train", command[i + len(train):]
    for cli in CLIS:
        if command == cli or command.startswith(cli + " "):
            return cli, command[len(cli):]
    return None


def test_every_documented_flag_exists() -> None:
    parsers = {cli: options(cli_parser(module)) for cli, module in CLIS.items()}
    checked, missing = 0, []
    for where, command in doc_commands():
        which = _which(command)
        if which is None:
            continue
        cli, tail = which
        for flag in _flags(tail):
            checked += 1
            if cli.startswith(("benchmarks/", "scripts/")):
                ok = _in_file(flag, cli)
            elif cli == "vf-train":
                ok = flag in TRAIN_CLI_FLAGS | TRAIN_USAGE or train_key_exists(flag.lstrip("-"))
            else:
                ok = flag in parsers[cli] or (cli == "vf-eval" and knows_v1_flag(flag))
            if not ok:
                missing.append(f"{where}: {cli} has no {flag} (in `{command}`)")
    assert not missing, "flags the docs name that the commands do not have:\n" + "\n".join(missing)
    assert checked > 80, f"only {checked} flags found: is the extraction broken?"


def test_every_flag_named_on_its_own_exists_somewhere() -> None:
    """`--no-check` in a sentence: a flag of one of our commands, a vf-train key, or a listed other program's."""
    ours = set(TRAIN_CLI_FLAGS | TRAIN_USAGE)
    for module in CLIS.values():
        ours |= options(cli_parser(module))
    missing = []
    for where, flag in prose_flags():
        owner = FOREIGN.get(flag)
        if flag in ours or knows_v1_flag(flag) or train_key_exists(flag.lstrip("-")):
            continue
        if owner is None:
            missing.append(f"{where}: {flag} is no flag of ours (nor listed in FOREIGN)")
        elif "/" in owner and not _in_file(flag, owner):
            missing.append(f"{where}: {flag} is not in {owner}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(("text", "flags"), [
    ("vf-eval ENV -m MODEL -b URL -n 5 -s", ["-m", "-b", "-n", "-s"]),
    ("vf-view [RUN_DIR] [--sort reward] [--report]", ["--sort", "--report"]),
    ("vf-vllm base --port 8000 -- --enforce-eager", ["--port"]),
    ("vf-eval x -S '{\"a\": 1}' --header 'X-A: b'", ["-S", "--header"]),
])
def test_flag_extraction(text: str, flags: list[str]) -> None:
    assert _flags(text.split(" ", 1)[1]) == flags


def test_unknown_flags_and_keys_are_caught() -> None:
    assert "--no-such-flag" not in cli_parser("verifiers.cli.eval")._option_string_actions
    assert train_key_exists("vllm.num_servers") and train_key_exists("learning_rate")
    assert not train_key_exists("vllm.no_such_key") and not train_key_exists("learning_rat")


def training_table_keys() -> dict[str, int]:
    """The keys in docs/training.md's `| field | default | meaning |` tables, with their lines."""
    keys: dict[str, int] = {}
    in_table = False
    for n, line in enumerate((S.ROOT / "docs" / "training.md").read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("| field | default | meaning |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            first = line.split("|")[1]
            for key in re.findall(r"`\[?([\w.]+)\]?`", first):
                keys[key] = n
    return keys


def test_training_md_documents_exactly_the_config_fields() -> None:
    from trainers.grpo.config import TrainConfig

    keys = training_table_keys()
    unknown = [f"docs/training.md:{n}: {k}" for k, n in keys.items() if not train_key_exists(k)]
    undocumented = sorted(set(TrainConfig.model_fields) - set(keys))
    assert not unknown, f"keys documented but not in TrainConfig: {unknown}"
    assert not undocumented, f"TrainConfig fields with no row in docs/training.md's field tables: {undocumented}"
