"""The endpoints registry: short aliases for (model, base URL, key variable) triples.

Typing ``-m qwen3-8b`` instead of a model name, a URL and a key variable is what makes
evaluating against several servers bearable. An alias may list several endpoints
serving the same model; requests are then spread over them round-robin, which is the
cheapest way to use a few vLLM replicas without a load balancer.

The file is TOML. One endpoint per alias::

    [gpt-small]
    model = "gpt-4.1-mini"
    base_url = "https://api.openai.com/v1"
    api_key_var = "OPENAI_API_KEY"

several endpoints for one alias (an array of tables)::

    [[qwen3-8b]]
    model = "Qwen/Qwen3-8B"
    base_url = "http://10.0.0.1:8000/v1"

    [[qwen3-8b]]
    model = "Qwen/Qwen3-8B"
    base_url = "http://10.0.0.2:8000/v1"

Only the *name* of the variable holding the key is ever stored; the key itself is read
from the environment when the client is built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from verifiers.clients.balanced import ChatTarget, make_chat_client
from verifiers.clients.balanced import RoundRobinClient as RoundRobinClient  # re-exported: it lived here
from verifiers.clients.openai_client import ChatClient
from verifiers.config import explain, load_toml
from verifiers.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_API_KEY_VAR = "OPENAI_API_KEY"
PLACEHOLDER_API_KEY = "EMPTY"
"""Sent when the key variable is unset: local servers (vLLM, vf-serve) accept any key."""

DEFAULT_ENDPOINTS_PATHS = (
    Path("configs/endpoints.toml"),
    Path("configs/endpoints.py"),
    Path("~/.config/verifiers/endpoints.toml"),
)
"""Searched in this order when ``-e`` is not given (the first two relative to the working directory).

``configs/endpoints.py`` is the 0.1.x registry: a Python module defining
``ENDPOINTS = {alias: {"model": ..., "url": ..., "key": ...}}``."""


class Endpoint(BaseModel):
    """One OpenAI-compatible server and the model name to ask it for.

    ``url`` and ``key`` are accepted as spellings of ``base_url`` and ``api_key_var``
    (the keys of the upstream Python registry), so old registries convert line by line.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    model: str = Field(min_length=1)
    base_url: str = Field(min_length=1, validation_alias=AliasChoices("base_url", "url"))
    api_key_var: str = Field(
        DEFAULT_API_KEY_VAR, min_length=1, validation_alias=AliasChoices("api_key_var", "key")
    )


def find_endpoints_file(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The registry to use: ``path`` if given (it must exist), else the first default that exists."""
    if path is not None:
        p = Path(path).expanduser()
        if p.is_dir():  # 0.1.x accepted the folder holding endpoints.py
            for name in ("endpoints.toml", "endpoints.py"):
                if (p / name).is_file():
                    return p / name
        if not p.is_file():
            raise ConfigError(
                f"endpoints file {str(p)!r} does not exist; fix the path given to -e/--endpoints"
            )
        return p
    for candidate in DEFAULT_ENDPOINTS_PATHS:
        p = candidate.expanduser()
        if p.is_file():
            return p
    return None


def load_endpoints(path: str | os.PathLike[str]) -> dict[str, list[Endpoint]]:
    """Parse a registry file into ``alias -> [Endpoint, ...]`` (every alias has at least one)."""
    p = Path(path).expanduser()
    if p.suffix == ".py":
        raw = _load_python_registry(p)
    else:
        raw = load_toml(
            p,
            missing="endpoints file {path!r} does not exist",
            invalid="endpoints file {path!r} is not valid TOML: {error}",
        )
    registry: dict[str, list[Endpoint]] = {}
    for alias, value in raw.items():
        entries: list[Any] = value if isinstance(value, list) else [value]
        if not entries or not all(isinstance(e, dict) for e in entries):
            raise ConfigError(
                f"endpoints file {str(p)!r}: alias {alias!r} must be a table ([{alias}]) "
                f"or an array of tables ([[{alias}]]) with model and base_url"
            )
        try:
            registry[alias] = [Endpoint.model_validate(e) for e in entries]
        except ValidationError as exc:
            problems = "; ".join(explain(exc, Endpoint))
            raise ConfigError(f"endpoints file {str(p)!r}: alias {alias!r}: {problems}") from None
    return registry


def _load_python_registry(p: Path) -> dict[str, Any]:
    """The ``ENDPOINTS`` dict of a 0.1.x ``endpoints.py`` (executed as a module, as 0.1.x did)."""
    import importlib.util

    if not p.is_file():
        raise ConfigError(f"endpoints file {str(p)!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"_vf_endpoints_{abs(hash(str(p)))}", p)
    if spec is None or spec.loader is None:
        raise ConfigError(f"endpoints file {str(p)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"endpoints file {str(p)!r} failed to run: {type(exc).__name__}: {exc}") from exc
    endpoints = getattr(module, "ENDPOINTS", None)
    if not isinstance(endpoints, dict):
        raise ConfigError(
            f"endpoints file {str(p)!r} must define ENDPOINTS = {{alias: {{'model': ..., 'url': ..., 'key': ...}}}}"
        )
    return endpoints


def resolve_endpoints(
    model: str,
    *,
    base_url: str | None = None,
    api_key_var: str | None = None,
    endpoints_path: str | os.PathLike[str] | None = None,
    default_base_url: str = "https://api.openai.com/v1",
) -> tuple[list[Endpoint], str | None]:
    """What ``-m MODEL [-b URL] [-k VAR] [-e FILE]`` means: the endpoints to use and the alias (if any).

    A name found in the registry is an alias and fills model, base URL and key variable;
    ``base_url``/``api_key_var`` given explicitly still override those fields. A name not
    in the registry is just a model name served at ``base_url`` (or the default).
    """
    registry_file = find_endpoints_file(endpoints_path)
    from_working_dir = endpoints_path is None and registry_file is not None and not registry_file.is_absolute()
    if from_working_dir:
        _announce_registry(registry_file)
    registry = load_endpoints(registry_file) if registry_file is not None else {}
    if from_working_dir:
        for name, entries in registry.items():
            for e in entries:
                log.warning("  alias %r -> model %r at %s (key from $%s)", name, e.model, e.base_url, e.api_key_var)
    if model in registry:
        resolved: list[Endpoint] = []
        for e in registry[model]:
            ep = Endpoint(
                model=e.model,
                base_url=base_url or e.base_url,
                api_key_var=api_key_var or e.api_key_var,
            )
            if ep not in resolved:  # an override of base_url can make entries identical
                resolved.append(ep)
        return resolved, model
    ep = Endpoint(
        model=model, base_url=base_url or default_base_url, api_key_var=api_key_var or DEFAULT_API_KEY_VAR
    )
    return [ep], None


def _announce_registry(path: Path) -> None:
    """Say which registry from the working directory is used, before it runs or is read.

    A cloned repository's ``configs/endpoints.*`` decides where a model name (and the key for
    it) goes, and ``endpoints.py`` is executed: neither may act unseen (docs/security.md).
    """
    action = "executing the 0.1.x Python registry" if path.suffix == ".py" else "reading the endpoints registry"
    log.warning(
        "vf-eval: %s %s from the working directory; model aliases below send requests and the key there "
        "(pass -e FILE to choose a registry explicitly)", action, path.resolve(),
    )


def api_key_for(endpoint: Endpoint) -> tuple[str, bool]:
    """The key to send and whether it came from the environment (False: placeholder ``EMPTY``)."""
    key = os.environ.get(endpoint.api_key_var)
    if key:
        return key, True
    return PLACEHOLDER_API_KEY, False


def build_client(
    endpoints: Sequence[Endpoint],
    *,
    timeout: float = 600.0,
    max_retries: int = 3,
    headers: dict[str, str] | None = None,
) -> ChatClient:
    """One `ChatClient` for the endpoints: the endpoint's own client, or a `RoundRobinClient` over several."""
    if not endpoints:
        raise ConfigError(
            "no endpoint to evaluate against: give -m MODEL (and -b BASE_URL) or an endpoints alias"
        )
    targets = [ChatTarget(ep.base_url, ep.model, api_key_for(ep)[0]) for ep in endpoints]
    return make_chat_client(
        targets, balance="round_robin", timeout=timeout, max_retries=max_retries, headers=headers
    )
