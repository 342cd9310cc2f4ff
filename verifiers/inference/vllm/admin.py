"""The control routes of one running vLLM server, as the trainer uses them.

vLLM's OpenAI server exposes its RL routes only in dev mode (``VLLM_SERVER_DEV_MODE=1``, which
`vf-vllm` sets): ``/pause``, ``/resume``, ``/reset_prefix_cache``, ``/collective_rpc``,
``/update_weight_version``, ``/get_world_size`` and the weight-transfer routes. Every call here
is a plain blocking HTTP request (the trainer calls them between optimizer steps, from its own
thread), and every failure becomes a `ServerError` that names the server and the route, because
"weight sync failed" alone sends a user looking in the wrong place.

No torch import: `vf-vllm` and the eval tests use this too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from verifiers.errors import ServerError, ServerUnreachableError


def server_root(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port`` (the admin routes live at the root)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class VLLMAdmin:
    """Blocking JSON calls to one vLLM server's admin routes (see module doc)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        self.root = server_root(base_url)
        self.base_url = self.root + "/v1"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"VLLMAdmin({self.root})"

    def _request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key and self.api_key != "EMPTY":
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.root + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:800]
            hint = ""
            if exc.code == 404 and path not in ("/v1/models", "/health"):
                hint = " (is the server vLLM, started in dev mode? `vf-vllm` sets VLLM_SERVER_DEV_MODE=1)"
            raise ServerError(f"{method} {self.root}{path} failed with HTTP {exc.code}: {detail}{hint}") from None
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, or cut off mid-answer (IncompleteRead)
            raise ServerUnreachableError(f"{method} {self.root}{path} failed: {exc} (is the server running?)") from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw.decode(errors="replace")

    def get(self, path: str, timeout: float | None = None) -> Any:
        return self._request("GET", path, None, timeout)

    def post(self, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return self._request("POST", path, body if body is not None else {}, timeout)

    # -- what the trainer needs --------------------------------------------------------------
    def healthy(self) -> bool:
        try:
            self.get("/health", timeout=5)
        except ServerError:
            return False
        return True

    def is_vllm(self) -> bool:
        """vLLM answers ``GET /version`` with its version; our `vf-serve` does not have that route."""
        try:
            out = self.get("/version", timeout=10)
        except ServerError:
            return False
        return isinstance(out, dict) and "version" in out

    def served_models(self) -> list[str]:
        out = self.get("/v1/models", timeout=30)
        return [m.get("id", "") for m in (out or {}).get("data", [])]

    def pause(self) -> None:
        # "wait": requests in flight finish under the old weights (their tokens and logprobs stay
        # consistent); nothing new starts until `resume`.
        self.post("/pause?mode=wait")

    def resume(self) -> None:
        self.post("/resume")

    def reload_weights(self, path: str) -> None:
        """vLLM's in-place ``reload_weights`` on every worker, from a save_pretrained directory."""
        self.post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}})

    def reset_prefix_cache(self) -> None:
        # Cached KV blocks were computed by the old weights; reusing them would mix policies.
        self.post("/reset_prefix_cache")

    def set_weight_version(self, version: int) -> None:
        self.post("/update_weight_version", {"new_version": str(version)})

    def weight_version(self) -> str | None:
        out = self.get("/weight_info", timeout=30)
        return None if out is None else out.get("weight_version")

    def load_lora(self, name: str, path: str) -> None:
        """Replace the adapter ``name`` with the one saved at ``path`` (needs ``--enable-lora``)."""
        with contextlib.suppress(ServerError):  # the first load has nothing to unload
            self.post("/v1/unload_lora_adapter", {"lora_name": name})
        self.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def prompt_logprobs(self, model: str, token_ids: Sequence[int]) -> list[float]:
        """The server's logprob of each token of ``token_ids`` given the ones before it.

        One ``/v1/completions`` request with the ids as the prompt, ``prompt_logprobs=0`` and one
        greedy token; the first position has no logprob and is left out, so the result has
        ``len(token_ids) - 1`` entries.
        """
        body = {"model": model, "prompt": list(token_ids), "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 0}
        out = self.post("/v1/completions", body, timeout=300)  # a stuck server must not hang the run
        rows = out["choices"][0].get("prompt_logprobs")
        if not rows:
            raise ServerError(f"{self.root} returned no prompt_logprobs (is it vLLM?)")
        values = []
        for pos, tok in zip(rows[1:], token_ids[1:], strict=True):
            entry = pos.get(str(tok))
            if entry is None:
                raise ServerError(f"{self.root}: prompt_logprobs has no entry for token {tok}")
            values.append(float(entry["logprob"]))
        return values
