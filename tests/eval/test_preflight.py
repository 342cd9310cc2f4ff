"""The endpoint check before vf-eval runs, and `Environment.evaluate`'s warning when rollouts errored.

Against real HTTP servers on 127.0.0.1: `StrictServer` behaves like vLLM (lists its
models, refuses other names with vLLM's wording, checks the key, and has an HTML page
outside /v1), `ScriptedServer` accepts any model name. The CLI cases run the real command.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

import verifiers as vf
from verifiers.cli.eval import main
from verifiers.errors import EndpointCheckError
from verifiers.eval.endpoints import Endpoint
from verifiers.eval.preflight import check_endpoint
from verifiers.rollout.error_report import RolloutErrorsWarning
from verifiers.testing import ScriptedServer

from .conftest import TEST_ENVS, LoopbackApp, RecordingServer, make_echo_env, run_cli, run_dirs

KEY = "sk-strict-key"


class StrictServer(LoopbackApp):
    """An OpenAI-compatible server as strict as vLLM with ``--api-key``: known models only, key required."""

    def __init__(self, models: tuple[str, ...] = ("Qwen/Qwen3-0.6B", "tiny")) -> None:
        self.models = models

    def _refused(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": {"message": "Unauthorized", "code": 401}}, status=401)
        return None

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model"} for m in self.models]
        return self._refused(request) or web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        model = (await request.json()).get("model")
        if model not in self.models:
            message = f"The model `{model}` does not exist."
            return web.json_response({"error": {"message": message, "code": 404}}, status=404)
        message = {"role": "assistant", "content": "q0"}
        return web.json_response(
            {"id": "x", "object": "chat.completion", "created": 0, "model": model,
             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        )  # fmt: skip

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text="<html><body>dashboard</body></html>", content_type="text/html")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/models", self._page)  # a web UI outside /v1, as some servers have

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def strict() -> Iterator[StrictServer]:
    with StrictServer() as srv:
        yield srv


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STRICT_KEY", KEY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ep(base_url: str, model: str = "tiny", key_var: str = "VF_STRICT_KEY") -> Endpoint:
    return Endpoint(model=model, base_url=base_url, api_key_var=key_var)


# -- the check itself ----------------------------------------------------------------------


def test_url_without_scheme_gets_the_fixed_url() -> None:
    with pytest.raises(EndpointCheckError, match=r"no scheme; did you mean -b http://localhost:8000/v1"):
        check_endpoint(ep("localhost:8000/v1"))
    with pytest.raises(EndpointCheckError, match=r"-b https://api\.example\.com/v1"):
        check_endpoint(ep("api.example.com/v1"))


def test_nothing_listening_names_the_url_and_how_to_start_a_server() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EndpointCheckError) as info:
        check_endpoint(ep(url))
    assert f"cannot connect to {url}" in str(info.value) and "vf-serve" in str(info.value)


def test_url_without_v1_gets_the_v1_hint(strict: StrictServer, key: None) -> None:
    for root in (strict.root, strict.root + "/"):  # /models is an HTML page here, not a model list
        with pytest.raises(EndpointCheckError, match=rf"did you mean -b {strict.root}/v1 \?"):
            check_endpoint(ep(root))
    with ScriptedServer() as srv:  # /models is a 404 there
        root = srv.base_url.removesuffix("/v1")
        with pytest.raises(EndpointCheckError, match=r"HTTP 404 .*did you mean -b .*/v1 \?"):
            check_endpoint(ep(root))


def test_refused_key_names_the_variable_and_the_flag(strict: StrictServer) -> None:
    with pytest.raises(EndpointCheckError) as info:
        check_endpoint(ep(strict.root + "/v1", key_var="VF_UNSET_KEY_VAR"))
    msg = str(info.value)
    assert "HTTP 401" in msg and "VF_UNSET_KEY_VAR is not set" in msg and "-k/--api-key-var" in msg


def test_unknown_model_gets_did_you_mean_and_the_list(strict: StrictServer, key: None) -> None:
    with pytest.raises(EndpointCheckError) as info:
        check_endpoint(ep(strict.root + "/v1", model="tinny"))
    msg = str(info.value)
    assert "model 'tinny' is not served" in msg and "did you mean 'tiny'" in msg
    assert "Qwen/Qwen3-0.6B, tiny" in msg
    ok = check_endpoint(ep(strict.root + "/v1", model="tiny"))
    assert ok.listed_models == ["Qwen/Qwen3-0.6B", "tiny"] and not ok.warnings


def test_scripted_server_accepts_any_name_and_a_v1_url_without_models_only_warns() -> None:
    with ScriptedServer() as srv:
        result = check_endpoint(ep(srv.base_url, model="anything-at-all"))
    assert result.accepts_any_model and not result.warnings
    with RecordingServer() as rec:  # chat only: /v1/models is a 404
        result = check_endpoint(ep(rec.base_url, model="m"))
    assert result.listed_models is None and "cannot check" in result.warnings[0]


# -- the command -----------------------------------------------------------------------------


def test_vf_eval_stops_before_the_run_on_a_wrong_model(strict: StrictServer, tmp_path: Path) -> None:
    wrong_model = run_cli(
        ["vf-eval-test-echo", "-m", "tinny", "-b", strict.root + "/v1", "-k", "VF_STRICT_KEY", "-s",
         "-o", str(tmp_path)],
        cwd=tmp_path, VF_STRICT_KEY=KEY,
    )  # fmt: skip
    assert wrong_model.returncode == 2, wrong_model.stderr
    assert "did you mean 'tiny'" in wrong_model.stderr and "Traceback" not in wrong_model.stderr
    assert not (tmp_path / "evals").exists()  # no run directory with a fake summary



def test_vf_eval_main_stops_when_nothing_listens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process (the same main() as the script; the process case above covers the wiring)."""
    monkeypatch.syspath_prepend(str(TEST_ENVS))
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(["vf-eval-test-echo", "-b", url, "-s", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot connect to {url}" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "evals").exists()


def test_no_check_runs_anyway_and_shows_the_first_error_live(strict: StrictServer, tmp_path: Path) -> None:
    proc = run_cli(
        ["vf-eval-test-echo", "-m", "tinny", "-b", strict.root + "/v1", "-k", "VF_STRICT_KEY", "-n", "2",
         "-r", "1", "--max-retries", "0", "-s", "-o", str(tmp_path), "--no-check"],
        cwd=tmp_path, VF_STRICT_KEY=KEY,
    )  # fmt: skip
    assert proc.returncode == 1  # every rollout errored
    live = [line for line in proc.stderr.splitlines() if line.startswith("first ")]
    assert len(live) == 1 and "The model `tinny` does not exist" in live[0]  # once per type, not per rollout
    assert "The model `tinny` does not exist" in proc.stdout  # and again in the summary
    assert len(run_dirs(tmp_path)) == 1


# -- Environment.evaluate ----------------------------------------------------------------------


def test_evaluate_warns_when_every_rollout_errored(strict: StrictServer) -> None:
    env = make_echo_env(2)
    client = vf.make_client(strict.root + "/v1", api_key=KEY, max_retries=0)
    with pytest.warns(RolloutErrorsWarning) as caught:
        out = env.evaluate(client, "tinny", rollouts_per_example=2)
    assert out.reward == [0.0] * 4
    text = str(caught[0].message)
    assert "4 of 4 rollouts ended with an error" in text and "The model `tinny` does not exist" in text

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RolloutErrorsWarning)  # a working run stays quiet
        good = env.evaluate(vf.make_client(strict.root + "/v1", api_key=KEY), "tiny")
    assert good.reward == [1.0, 0.0]
