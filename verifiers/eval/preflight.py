"""Check an endpoint before an evaluation starts: reachable, the right URL, the key accepted, the model served.

Without this check a typo in ``-b`` or ``-m`` turns every rollout into an error and the
run ends with a normal-looking summary of reward 0.0; the real message is buried in
results.jsonl. One ``GET {base_url}/models`` with a short timeout tells the usual
mistakes apart, and each gets an error saying how to fix it:

- no scheme (``localhost:8000/v1``): the URL with ``http://`` added;
- nothing listening / unknown host: the URL, and how to start a local server;
- 404 or an HTML page at ``/models`` on a URL without ``/v1``: add ``/v1``;
- 401/403: which variable the key is read from and the ``-k`` flag;
- a model name the server does not list: the closest listed names.

Servers that accept any model name (our `ScriptedServer`) say so with the extension
field ``"vf_accepts_any_model": true`` in their ``/models`` answer, and the name check
is skipped. A ``/v1`` base whose ``/models`` is missing (404) or failing (5xx) may still
serve chat, so that only warns: the check must never block a server that works.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx2 as httpx  # the HTTP library of the openai SDK (openai>=3)

from verifiers.errors import EndpointCheckError
from verifiers.eval.endpoints import Endpoint, api_key_for

ACCEPTS_ANY_MODEL_FIELD = "vf_accepts_any_model"
"""Extension field of a ``/models`` answer: true when the server answers for any model name."""
DEFAULT_TIMEOUT_S = 5.0
START_HINT = (
    "is the server running? Start a local one with `vf-serve MODEL_DIR --port PORT` "
    "(or `python -m verifiers.testing.server --port PORT` for a scripted stand-in), or fix -b/--base-url"
)
_LOCAL_HOSTS = ("localhost", "127.", "0.0.0.0", "[::1]", "::1")
_SHOWN_IDS = 20


@dataclass
class PreflightResult:
    """What the check found about one endpoint."""

    base_url: str
    model: str
    listed_models: list[str] | None = None
    """Ids from ``/models``; None when the server does not list models."""
    accepts_any_model: bool = False
    warnings: list[str] = field(default_factory=list)
    """Problems that do not stop the run (e.g. no ``/models`` endpoint on a ``/v1`` URL)."""


def check_base_url(base_url: str) -> None:
    """A base URL must have an http(s) scheme and a host; the error shows the corrected URL."""
    if "://" not in base_url:
        host = base_url.lstrip("/")
        scheme = "http" if host.startswith(_LOCAL_HOSTS) else "https"
        raise EndpointCheckError(f"base URL {base_url!r} has no scheme; did you mean -b {scheme}://{host} ?")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointCheckError(
            f"base URL {base_url!r} must start with http:// or https:// and name a host, "
            "e.g. -b http://localhost:8000/v1"
        )


def _with_v1(base_url: str) -> str:
    return base_url.rstrip("/") + "/v1"


def _ends_with_v1(base_url: str) -> bool:
    return urlsplit(base_url).path.rstrip("/").endswith("/v1")


def _model_ids(body: object) -> list[str] | None:
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    return [str(m["id"]) for m in body["data"] if isinstance(m, dict) and "id" in m]


MODEL_FIX = "fix -m/--model, or skip this check with --no-check"


def _unknown_model_error(ep: Endpoint, ids: list[str], model_fix: str = MODEL_FIX) -> EndpointCheckError:
    close = difflib.get_close_matches(ep.model, ids, n=3, cutoff=0.5)
    shown = ", ".join(ids[:_SHOWN_IDS]) + (f" ... ({len(ids)} in all)" if len(ids) > _SHOWN_IDS else "")
    guess = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return EndpointCheckError(
        f"model {ep.model!r} is not served at {ep.base_url}; {guess}the server lists: {shown} ({model_fix})"
    )


def check_endpoint(
    endpoint: Endpoint,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    transport: httpx.BaseTransport | None = None,
    model_fix: str = MODEL_FIX,
) -> PreflightResult:
    """``GET {base_url}/models`` once and judge the answer; `EndpointCheckError` when the run cannot work.

    ``model_fix`` says how to fix an unknown model name in the caller's terms (vf-eval's flag,
    vf-train's config key).
    """
    check_base_url(endpoint.base_url)
    result = PreflightResult(base_url=endpoint.base_url, model=endpoint.model)
    key, from_env = api_key_for(endpoint)
    request_headers = {"Authorization": f"Bearer {key}", **(headers or {})}
    url = endpoint.base_url.rstrip("/") + "/models"
    try:
        with httpx.Client(timeout=timeout_s, transport=transport, follow_redirects=True) as http:
            resp = http.get(url, headers=request_headers)
    except httpx.TimeoutException:
        raise EndpointCheckError(
            f"no answer from {endpoint.base_url} within {timeout_s:g} s; {START_HINT}"
        ) from None
    except httpx.HTTPError as exc:  # refused, unknown host, TLS, dropped
        reason = str(exc) or type(exc).__name__
        raise EndpointCheckError(f"cannot connect to {endpoint.base_url} ({reason}); {START_HINT}") from None

    if resp.status_code in (401, 403):
        have = f"{endpoint.api_key_var} is set" if from_env else f"{endpoint.api_key_var} is not set"
        raise EndpointCheckError(
            f"{endpoint.base_url} refused the API key (HTTP {resp.status_code}); {have}: export the key "
            "there, or name the variable that holds it with -k/--api-key-var"
        )
    body: object = None
    try:
        body = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    ids = _model_ids(body) if resp.status_code == 200 else None
    if ids is None and not _ends_with_v1(endpoint.base_url) and resp.status_code < 500:
        raise EndpointCheckError(
            f"{url} answered HTTP {resp.status_code} without a model list: OpenAI-compatible servers "
            f"live under /v1; did you mean -b {_with_v1(endpoint.base_url)} ? (or skip this check with --no-check)"
        )
    if resp.status_code == 200 and ids is None:
        raise EndpointCheckError(
            f"{url} answered 200 but not with an OpenAI model list "
            f"({resp.headers.get('content-type', 'no content type')}); is {endpoint.base_url} an "
            "OpenAI-compatible API? (skip this check with --no-check)"
        )
    if ids is None:
        result.warnings.append(
            f"{url} answered HTTP {resp.status_code}; cannot check that {endpoint.model!r} is served there"
        )
        return result
    result.listed_models = ids
    result.accepts_any_model = isinstance(body, dict) and body.get(ACCEPTS_ANY_MODEL_FIELD) is True
    if result.accepts_any_model or endpoint.model in ids:
        return result
    if not ids:
        result.warnings.append(f"{url} lists no models; cannot check that {endpoint.model!r} is served there")
        return result
    raise _unknown_model_error(endpoint, ids, model_fix)


def check_endpoints(
    endpoints: Sequence[Endpoint],
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[PreflightResult]:
    """`check_endpoint` for each distinct (base URL, model, key variable), in order."""
    seen: set[Endpoint] = set()
    results: list[PreflightResult] = []
    for ep in endpoints:
        if ep not in seen:
            seen.add(ep)
            results.append(check_endpoint(ep, headers=headers, timeout_s=timeout_s))
    return results
