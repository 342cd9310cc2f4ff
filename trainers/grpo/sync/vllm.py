"""Weight sync to one or more vLLM servers, verified after every step.

After each optimizer step (`VLLMSync.after_step`):

1. with batches generated ahead, generation is paused (``/pause?mode=wait``: requests in flight
   finish under the old weights, new ones wait); in synchronous mode nothing is in flight and
   the servers stay idle until the trainer asks for the next batch;
2. the new weights reach every server by the configured transport:
   - ``reload``: the trainer writes a safetensors checkpoint (by default under ``/dev/shm``) and
     every server reloads it in place (``/collective_rpc`` ``reload_weights``). Works on CPU and
     GPU; the servers must see the directory (same machine or a shared filesystem);
   - ``nccl``: vLLM's native weight transfer, a broadcast from the trainer's GPU into every
     server's workers (`trainers.grpo.sync.nccl`); GPU only;
   - ``lora``: only the LoRA adapter is written and (re)loaded as ``<name>-lora``, and requests
     ask for that adapter (servers started with ``--enable-lora``);
3. the prefix cache is reset (its KV blocks came from the old weights) and the new policy
   version is recorded on the server (``/update_weight_version``);
4. generation resumes (when it was paused);
5. the sync is verified (`trainers.grpo.sync.probe`): each server's logprobs on a fixed probe
   (with ``lora``, through the adapter) must equal the trainer's within the tolerance, or the run
   stops with `WeightSyncError` naming the server, the position and both values; each server's
   difference is logged (``servers/<i>/probe_max_abs_diff``, ``i`` its place in ``base_url``).
   In synchronous mode this happens before any request of the next batch is sent; with
   generation ahead, before any sample of the new policy is trained on (a paused server would
   hold the probe back too).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from trainers.grpo.sync import probe as sync_probe
from trainers.grpo.sync.base import ExternalServerSync
from trainers.grpo.sync.export import export_weights, iter_export_weights
from verifiers.clients.balanced import AffinityClient, ChatTarget, make_chat_client
from verifiers.errors import ConfigError, ServerUnreachableError, WeightSyncError
from verifiers.inference.vllm.admin import VLLMAdmin

TRANSPORTS = ("reload", "nccl", "lora")


def default_sync_dir(out: Path) -> Path:
    """A fresh directory in shared memory when there is one (no disk writes per step), else under the run."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="verifiers-sync-", dir=shm))
    return out / "sync_weights"


def route_address(admins: Sequence[VLLMAdmin]) -> str:
    """This host's address as the first server sees it (the NCCL rendezvous must be reachable from it)."""
    import socket
    import urllib.parse

    host = urllib.parse.urlparse(admins[0].root).hostname or "127.0.0.1"
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # no packet is sent: this only picks the outgoing interface
        return str(s.getsockname()[0])


class VLLMSync(ExternalServerSync):
    """`WeightSync` for vLLM servers (see module doc)."""

    def __init__(self, base_urls: Sequence[str], model: Any, tokenizer: Any, out: Path, *, model_name: str,
                 transport: str = "reload", sync_dir: str | None = None, verify: bool = True,
                 tolerance: float | None = None, pause: bool = False, api_key: str | None = None,
                 nccl_port: int = 0, nccl_address: str | None = None, log: Callable[[str], None] = print) -> None:
        if transport not in TRANSPORTS:
            raise ConfigError(f"weight_sync for vLLM must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        if transport == "lora" and not hasattr(model, "peft_config"):
            raise ConfigError("weight_sync = 'lora' syncs the LoRA adapter only: set lora = true")
        self.admins = [VLLMAdmin(u, api_key=api_key) for u in base_urls]
        self.positions = {a.base_url: i for i, a in enumerate(self.admins)}  # metric index = place in base_url
        self.model, self.tokenizer = model, tokenizer
        self.transport = transport
        self.served_name = model_name
        self.model_name = f"{model_name}-lora" if transport == "lora" else model_name
        self.verify = verify
        self.tolerance = tolerance if tolerance is not None else sync_probe.default_tolerance(
            next(model.parameters()).dtype)
        self.pause = pause
        self._own_dir = sync_dir is None
        self.dir = Path(sync_dir) if sync_dir else default_sync_dir(out)
        self.probe_ids = sync_probe.probe_token_ids(tokenizer)
        self._last_probe: list[float] | None = None
        self.last: dict[str, float] = {}
        self._nccl: Any = None
        self._nccl_port = nccl_port
        self.nccl_address = nccl_address
        self._client: AffinityClient | None = None
        self.log = log
        self._check_servers()

    def _check_servers(self) -> None:
        for a in self.admins:
            names = a.served_models()
            if self.served_name not in names:
                raise ConfigError(
                    f"{a.root} serves {names}, not {self.served_name!r}: start it with "
                    f"--served-model-name {self.served_name} (vf-vllm's default is 'policy'), "
                    "or set server_model_name"
                )

    # -- WeightSync ---------------------------------------------------------------------------
    def targets(self) -> list[ChatTarget]:
        """The servers as rollout clients reach them (also Ray workers, which build their own)."""
        return [ChatTarget(a.base_url, self.model_name, a.api_key) for a in self.admins]

    def make_client(self) -> Any:
        client = make_chat_client(self.targets(), balance="affinity")
        self._client = client if isinstance(client, AffinityClient) else None  # several servers: balanced
        return client

    def updating(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # the servers hold their own copy; the optimizer touches ours only

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        if not self.pause:
            yield
            return
        for a in self.admins:
            a.pause()
        try:
            yield
        finally:
            for a in self.admins:
                with contextlib.suppress(Exception):
                    a.resume()

    def after_step(self, version: int) -> dict[str, float]:
        """Push, check and report: the metrics are `last` (timings, probe, requests per server)."""
        while True:  # each retry follows dropping at least one server, so this ends
            try:
                self._sync(version)
                return self.last
            except ServerUnreachableError as exc:
                if not self._drop_unreachable(exc):
                    raise

    def _sync(self, version: int) -> None:
        t0 = time.perf_counter()
        with self._paused():
            pushed = self._push(version)
            t_push = time.perf_counter() - t0
            for a in self.admins:
                a.reset_prefix_cache()
                a.set_weight_version(version)
        # After resuming: a paused server would hold the probe's own request back. In synchronous
        # mode nothing was paused and no request of the next batch has been sent yet.
        checked = self._verify(version) if self.verify else {}
        self.last = {"sync/seconds": time.perf_counter() - t0, "sync/push_s": t_push, **pushed, **checked,
                     "sync/servers": float(len(self.admins))}
        if self._client is not None:  # requests each replica has answered so far (balance, failover)
            for i, n in enumerate(self._client.requests):  # i: position in base_url
                self.last[f"servers/{i}/requests"] = float(n)
            self.last["servers/failovers"] = float(self._client.failovers)

    def _drop_unreachable(self, exc: ServerUnreachableError) -> bool:
        """Fail over: forget servers that are down, if any is left (else the run must stop)."""
        down = [a for a in self.admins if not a.healthy()]
        if not down or len(down) == len(self.admins):
            return False
        if self._nccl is not None:  # the NCCL group's size is fixed: a new one for the servers left
            self._nccl.close()
            self._nccl = None
        for a in down:
            self.admins.remove(a)
            if self._client is not None:
                self._client.retire(a.base_url)
            self.log(f"[yellow]{a.root} is down ({exc}); continuing with {len(self.admins)} server(s)[/yellow]")
        return True

    def on_start(self, version: int) -> None:
        """Before the first batch: the adapter is loaded (``lora``) and every server is checked to
        serve the trainer's starting policy, so a server started on another checkpoint or dtype
        fails here, not after a step of training on its samples."""
        if self.transport == "lora":
            self._push_lora()
        if self.verify:
            self.last = self._verify(version)

    def close(self) -> None:
        if self._nccl is not None:
            self._nccl.close()
            self._nccl = None
        if self._own_dir and self.dir.is_dir() and str(self.dir).startswith("/dev/shm/"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- transports ---------------------------------------------------------------------------
    def _push(self, version: int) -> dict[str, float]:
        if self.transport == "reload":
            return self._push_reload()
        if self.transport == "lora":
            return self._push_lora()
        return self._push_nccl(version)

    def _push_reload(self) -> dict[str, float]:
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        # Our own file rather than save_pretrained: a tied lm_head must be written out. vLLM's
        # in-place (layerwise) reload does not re-tie it, so without the key the server keeps the
        # old output embedding (caught by the probe; see docs/scaling.md).
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "model.safetensors.tmp"
        # one merged LoRA weight at a time on the device, each copied out before the next
        save_file({n: t.cpu() for n, t in iter_export_weights(self.model, include_tied=True)}, str(tmp),
                  metadata={"format": "pt"})
        tmp.replace(self.dir / "model.safetensors")
        t_save = time.perf_counter() - t0
        for a in self.admins:
            a.reload_weights(str(self.dir.resolve()))
        return {"sync/save_s": t_save}

    def _push_lora(self) -> dict[str, float]:
        t0 = time.perf_counter()
        self.model.save_pretrained(self.dir)  # peft: the adapter only
        t_save = time.perf_counter() - t0
        for a in self.admins:
            a.load_lora(self.model_name, str(self.dir.resolve()))
        return {"sync/save_s": t_save}

    def _push_nccl(self, version: int) -> dict[str, float]:
        from trainers.grpo.sync.nccl import NCCLWeightSender

        if self._nccl is None:
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("weight_sync = 'nccl' needs the trainer on a CUDA GPU; use 'reload' on CPU")
            from verifiers.inference.vllm.server import free_port

            self._nccl = NCCLWeightSender(self.admins, master_address=self.nccl_address or route_address(self.admins),
                                          master_port=self._nccl_port or free_port())
            self._nccl.init()
        stats = self._nccl.send(export_weights(self.model), version)
        return {f"sync/{k}": float(v) for k, v in stats.items()}

    # -- verification -------------------------------------------------------------------------
    def _verify(self, version: int) -> dict[str, float]:
        trained = sync_probe.trainer_logprobs(self.model, self.probe_ids)
        worst = 0.0
        per_server: dict[str, float] = {}
        for a in self.admins:
            served = a.prompt_logprobs(self.model_name, self.probe_ids)
            check = sync_probe.compare(a.root, served, trained)
            worst = max(worst, check.max_abs_diff)
            per_server[f"servers/{self.positions[a.base_url]}/probe_max_abs_diff"] = check.max_abs_diff
            if not check.ok(self.tolerance):
                tok = self.probe_ids[check.position + 1] if check.position >= 0 else None
                raise WeightSyncError(
                    f"after syncing policy version {version} ({self.transport}), {a.root} does not serve the "
                    f"trained weights: its logprobs on the probe differ from the trainer's by up to "
                    f"{check.max_abs_diff:.3g} (tolerance {self.tolerance:g}) at position {check.position + 1} "
                    f"(token id {tok}): served {check.served:.6f}, trainer {check.trained:.6f}. Check that the "
                    "server runs the same checkpoint and dtype, that it can read the sync directory "
                    f"({self.dir}), and its log"
                )
        change = sync_probe.max_change(self._last_probe, trained)
        self._last_probe = trained
        return {"sync/probe_max_abs_diff": worst, "sync/probe_change": change, **per_server}
