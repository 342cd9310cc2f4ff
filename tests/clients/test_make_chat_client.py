"""make_chat_client: the one factory behind vf-eval's endpoint aliases and vf-train's vLLM servers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainers.grpo.sync.vllm import VLLMSync
from verifiers.clients.balanced import AffinityClient, ChatTarget, RoundRobinClient, make_chat_client
from verifiers.errors import ConfigError
from verifiers.eval import endpoints
from verifiers.eval.endpoints import Endpoint, build_client


def test_one_target_is_its_own_client_several_are_balanced() -> None:
    single = make_chat_client([ChatTarget("http://127.0.0.1:1/v1", "m")], balance="affinity")
    assert not isinstance(single, (AffinityClient, RoundRobinClient))
    assert str(single.base_url).startswith("http://127.0.0.1:1/v1")  # type: ignore[attr-defined]
    targets = [ChatTarget("http://127.0.0.1:1/v1", "a"), ChatTarget("http://127.0.0.1:2/v1", "b", api_key="k")]
    rr = make_chat_client(targets)
    assert isinstance(rr, RoundRobinClient) and rr.models == ["a", "b"]
    sticky = make_chat_client(targets, balance="affinity")
    assert isinstance(sticky, AffinityClient) and sticky.models == ["a", "b"]
    assert sticky.names == ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]  # what retire() is given


def test_bad_requests_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown balance 'random'"):
        make_chat_client([ChatTarget("http://x/v1", "m")], balance="random")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least one target"):
        make_chat_client([])


def test_vf_eval_builds_round_robin_through_it() -> None:
    assert endpoints.RoundRobinClient is RoundRobinClient  # the old import path still works
    eps = [Endpoint(model="a", base_url="http://127.0.0.1:1/v1"), Endpoint(model="b", base_url="http://127.0.0.1:2/v1")]
    client = build_client(eps, max_retries=0)
    assert isinstance(client, RoundRobinClient) and client.models == ["a", "b"]


def test_vllm_sync_builds_an_affinity_client_over_several_servers() -> None:
    sync = object.__new__(VLLMSync)  # no servers to talk to: only make_client's inputs are set
    sync.model_name = "policy"
    sync.admins = [SimpleNamespace(base_url=f"http://127.0.0.1:{p}/v1", api_key=None) for p in (1, 2)]
    client = sync.make_client()
    assert isinstance(client, AffinityClient) and sync._client is client
    assert client.models == ["policy", "policy"] and client.names == [a.base_url for a in sync.admins]
    sync.admins = sync.admins[:1]
    assert not isinstance(sync.make_client(), AffinityClient) and sync._client is None
