"""vf-init: names, the generated package passing its own tests and check_environment, pip-installability."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from verifiers.cli.init import main as vf_init
from verifiers.errors import ConfigError
from verifiers.hub.scaffold import KINDS, env_names, scaffold_environment
from verifiers.testing import check_environment


@pytest.mark.parametrize(
    ("name", "env_id", "module"),
    [("my-env", "my-env", "my_env"), ("My_Env2", "my-env2", "my_env2"), ("a-b_c", "a-b-c", "a_b_c")],
)
def test_names_map_id_module_and_distribution(name: str, env_id: str, module: str) -> None:
    names = env_names(name)
    assert (names.env_id, names.module, names.project) == (env_id, module, env_id)


@pytest.mark.parametrize(
    "name", ["1env", "my--env", "my env", "env-", "", "json", "class", "verifiers", "a.b"]
)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        env_names(name)


@pytest.fixture
def load_by_path() -> Iterator[Callable[[Path, str], ModuleType]]:
    """Import a generated package from its folder; forget it afterwards."""
    added: list[str] = []

    def load(package_dir: Path, module: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(
            module,
            package_dir / module / "__init__.py",
            submodule_search_locations=[str(package_dir / module)],
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module] = mod
        added.append(module)
        spec.loader.exec_module(mod)
        return mod

    yield load
    for module in added:
        sys.modules.pop(module, None)


def _table_rows(readme: str, heading: str) -> list[list[str]]:
    section = readme.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize("kind", KINDS)
def test_generated_package_passes_check_environment_and_documents_itself(
    kind: str, tmp_path: Path, load_by_path: Callable[[Path, str], ModuleType]
) -> None:
    env_id = f"gen-{kind}-env"
    result = scaffold_environment(env_id, tmp_path, kind=kind)  # type: ignore[arg-type]
    package_dir = Path(result.package_dir)
    assert package_dir == tmp_path / f"gen_{kind}_env"
    module = load_by_path(package_dir, result.names.module)

    env = module.load_environment()
    report = check_environment(env)
    assert report.ok, report.problems
    assert report.rollouts > 0

    readme = (package_dir / "README.md").read_text()
    assert readme.startswith(f"# {env_id}\n")
    documented_args = {row[0] for row in _table_rows(readme, "Environment arguments")}
    params = [
        p for p in inspect.signature(module.load_environment).parameters.values() if p.kind != p.VAR_KEYWORD
    ]
    assert documented_args == {p.name for p in params}
    for row in _table_rows(readme, "Environment arguments"):
        default = next(p.default for p in params if p.name == row[0])
        assert row[1] == repr(default) or row[0] == "system_prompt"
    metrics = {row[0]: float(row[1]) for row in _table_rows(readme, "Metrics")}
    rubric = env.rubric
    assert metrics == dict(zip(rubric.get_reward_func_names(), rubric.get_reward_weights(), strict=True))

    pyproject = (package_dir / "pyproject.toml").read_text()
    assert f'{env_id} = "{result.names.module}:load_environment"' in pyproject
    assert '[project.entry-points."verifiers.environments"]' in pyproject


@pytest.mark.parametrize("kind", KINDS)
def test_generated_tests_pass_as_generated(kind: str, tmp_path: Path) -> None:
    result = scaffold_environment(f"own-{kind}-tests", tmp_path, kind=kind)  # type: ignore[arg-type]
    # Run from the package folder, as an author would: its pyproject puts the package on sys.path.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"],
        cwd=result.package_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b4 passed\b", proc.stdout), proc.stdout[-2000:]


def test_pip_install_exposes_the_entry_point(tmp_path: Path) -> None:
    result = scaffold_environment("entry-point-env", tmp_path / "src", kind="tool")
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            result.package_dir,
        ],
        check=True,
        capture_output=True,
    )
    eps = [
        ep
        for dist in importlib.metadata.distributions(path=[str(target)])
        for ep in dist.entry_points
        if ep.group == "verifiers.environments"
    ]
    assert [(ep.name, ep.value) for ep in eps] == [("entry-point-env", "entry_point_env:load_environment")]
    # The installed copy loads by id in a fresh process (cwd elsewhere, so only the install can be found).
    code = (
        "import verifiers, entry_point_env; env = verifiers.load_environment('entry-point-env'); "
        "print(type(env).__name__, env.env_id, entry_point_env.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(target)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    class_name, env_id, file = proc.stdout.split()
    assert (class_name, env_id) == ("ToolEnv", "entry-point-env")
    assert Path(file).is_relative_to(target)


def test_cli_refuses_to_overwrite_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert vf_init(["cli-env", "--path", str(tmp_path), "--kind", "multi", "-d", "A test game."]) == 0
    module_file = tmp_path / "cli_env" / "cli_env" / "__init__.py"
    assert "class EchoGameEnv(vf.MultiTurnEnv)" in module_file.read_text()
    assert 'description = "A test game."' in (tmp_path / "cli_env" / "pyproject.toml").read_text()
    module_file.write_text("# edited by the author\n")
    extra = tmp_path / "cli_env" / "NOTES.md"
    extra.write_text("mine")
    capsys.readouterr()

    assert vf_init(["cli-env", "--path", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert module_file.read_text() == "# edited by the author\n"

    assert vf_init(["cli-env", "--path", str(tmp_path), "--force"]) == 0
    assert "vf.SingleTurnEnv(" in module_file.read_text()
    assert extra.read_text() == "mine"  # --force rewrites generated files only
    assert vf_init(["no good", "--path", str(tmp_path)]) == 2
    assert "invalid environment name" in capsys.readouterr().err


def test_scaffold_refuses_a_name_that_is_already_importable(tmp_path: Path) -> None:
    # `pytest` is importable here; a new package of that name would shadow it.
    with pytest.raises(ConfigError, match="already importable"):
        scaffold_environment("pytest", tmp_path)
    assert not (tmp_path / "pytest").exists()


@pytest.mark.parametrize("has_pytest", [True, False], ids=["with-pytest", "without-pytest"])
def test_next_steps_run_this_environments_pytest(has_pytest: bool, tmp_path: Path) -> None:
    # The Quickstart install (the train extra) has no pytest; a bare `pytest` from elsewhere
    # cannot import verifiers. Hidden as in such an install: sys.modules["pytest"] = None.
    hide = "" if has_pytest else "sys.modules['pytest'] = None; "
    code = (f"import runpy, sys; {hide}sys.argv = ['vf-init', 'hint-env', '--path', {str(tmp_path)!r}]; "
            "runpy.run_module('verifiers.cli.init', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    steps = done.stdout.split("Next steps:\n")[1].splitlines()
    run = f"  python -m pytest {tmp_path / 'hint_env'}    (its tests pass as generated)"
    if has_pytest:
        assert steps[0] == run
    else:
        assert steps[:2] == ["  pip install pytest    (not in this environment yet; the dev extra has it too)", run]
    assert not any(s.strip().startswith("pytest ") for s in steps)
