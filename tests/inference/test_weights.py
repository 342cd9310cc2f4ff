"""Weight updates under a running server: shared in-place edits, update_weights, disk reload, versions.

After an update, greedy output must be exactly the new weights' greedy output (checked by
a direct forward pass), and every response names the version it was produced under,
in the body (``weight_version``) and the ``x-weight-version`` header.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from verifiers.inference.engine import InferenceEngine
from verifiers.inference.engine.loading import load_model_and_tokenizer
from verifiers.inference.engine.sampling import SamplingParams

MODEL = "tiny"
TEXT = "weights"


@pytest.fixture(scope="module")
def original_state(engine: InferenceEngine) -> dict[str, Any]:
    return {k: v.clone() for k, v in engine.model.state_dict().items()}


@pytest.fixture(autouse=True)
def restore_weights(engine: InferenceEngine, original_state: dict[str, Any]) -> Iterator[None]:
    """Each test starts from the served directory's weights."""
    engine.update_weights(original_state)
    yield


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory: pytest.TempPathFactory, procs: Any) -> Path:
    """A second model of the same shape with different weights."""
    return procs.make_model_dir(tmp_path_factory.mktemp("other") / "model", seed=1)


@pytest.fixture(scope="module")
def other_model(other_dir: Path) -> Any:
    return load_model_and_tokenizer(other_dir, with_tokenizer=False)[0]


def greedy_request(client: Any) -> tuple[list[int], int, str, list[int]]:
    """``(completion ids, body weight_version, header x-weight-version, prompt ids)``."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": TEXT}], temperature=0, max_tokens=12,
        extra_body={"return_token_ids": True},
    )
    r = raw.parse()
    return list(r.choices[0].token_ids), r.weight_version, raw.headers["x-weight-version"], list(r.prompt_token_ids)


def test_in_place_edit_under_pause_then_bump_version(engine, client, ref) -> None:
    before, v0, header0, prompt = greedy_request(client)
    assert header0 == str(v0) and v0 == engine.weight_version
    gen = torch.Generator().manual_seed(3)
    with engine.paused(), torch.no_grad():
        for p in engine.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    assert engine.bump_version() == v0 + 1
    after, v1, header1, _ = greedy_request(client)
    assert v1 == v0 + 1 and header1 == str(v0 + 1)
    assert after != before
    assert after == ref.greedy(prompt, 12, model=engine.model)


def test_update_weights_from_another_model(engine, client, ref, other_model) -> None:
    _, v0, _, prompt = greedy_request(client)
    assert engine.update_weights(other_model.state_dict()) == v0 + 1
    got, v1, _, _ = greedy_request(client)
    assert v1 == v0 + 1
    assert got == ref.greedy(prompt, 12, model=other_model)
    assert got != ref.greedy(prompt, 12)


def test_update_weights_rejects_a_mismatched_state_dict(engine) -> None:
    v0 = engine.weight_version
    with pytest.raises(RuntimeError):
        engine.update_weights({"not.a.weight": torch.zeros(1)})
    assert engine.weight_version == v0


def test_reload_from_disk_over_http(server, client, ref, other_dir, other_model, raw_http) -> None:
    root = server.base_url.removesuffix("/v1")
    _, v0, _, prompt = greedy_request(client)
    status, _, body = raw_http("POST", f"{root}/weights/reload", {"path": str(other_dir)})
    assert status == 200 and body["weight_version"] == v0 + 1
    assert raw_http("GET", f"{root}/weights/version")[2] == {"weight_version": v0 + 1}
    assert raw_http("GET", f"{root}/health")[2]["weight_version"] == v0 + 1
    got, v1, _, _ = greedy_request(client)
    assert v1 == v0 + 1
    assert got == ref.greedy(prompt, 12, model=other_model)


def test_reload_from_a_bad_path_is_400(server, raw_http, tmp_path) -> None:
    root = server.base_url.removesuffix("/v1")
    status, _, body = raw_http("POST", f"{root}/weights/reload", {"path": str(tmp_path / "missing")})
    assert status == 400 and body["error"]["param"] == "path"
    assert "config.json" in body["error"]["message"]


def test_paused_holds_generation_between_steps(engine) -> None:
    done = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["out"] = engine.generate_sync([5, 6, 7], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
        done.set()

    tokens0 = engine.stats["tokens"]
    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60
    while engine.stats["tokens"] < tokens0 + 3 and time.monotonic() < deadline:  # decoding has started
        time.sleep(0.002)
    with engine.paused():
        steps = engine.stats["steps"]
        time.sleep(0.2)
        assert engine.stats["steps"] == steps
        assert not done.is_set()
    t.join(timeout=60)
    assert done.is_set() and len(result["out"].outputs[0].token_ids) == 200


def test_a_request_reports_the_version_it_started_under(engine, client) -> None:
    v0 = engine.weight_version
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": TEXT}], max_tokens=4, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].weight_version == v0
    comp = client.completions.with_raw_response.create(model=MODEL, prompt="x", max_tokens=2)
    assert comp.parse().weight_version == v0 and comp.headers["x-weight-version"] == str(v0)
