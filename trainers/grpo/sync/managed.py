"""``[vllm]``: the vLLM servers a run starts for itself, and stops when it ends.

With several training processes rank 0 alone starts them (one set of servers for the run, not
one per rank) and every rank gets their URLs; rank 0 stops them when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifiers.errors import ConfigError

if TYPE_CHECKING:
    from trainers.grpo.sync.ranked import Ranks


class ManagedServers:
    """The servers started by `start` (none before), stopped by `stop`."""

    def __init__(self) -> None:
        self.servers: list[Any] = []

    def start(self, cfg: Any, model_path: str, out: Path, log: Callable[[str], None],
              dist: Ranks | None = None) -> list[str] | None:
        """Start ``cfg.vllm``'s servers on ``model_path``; their URLs (None without ``[vllm]``).

        ``dist``: several processes; rank 0 starts the servers, the others wait for the URLs (or
        for rank 0's error: a server that does not come up stops every rank).
        """
        if cfg.vllm is None:
            return None
        if dist is not None and dist.active:
            return dist.on_main("starting the [vllm] server(s)", lambda: self._start(cfg, model_path, out, log))
        return self._start(cfg, model_path, out, log)

    def _start(self, cfg: Any, model_path: str, out: Path, log: Callable[[str], None]) -> list[str]:
        from verifiers.inference.vllm.server import VLLMServerSpec, start_servers
        from verifiers.models.chat_templates import vllm_chat_template

        v = cfg.vllm
        if v.cpu_cores is not None and len(v.cpu_cores) != v.num_servers:
            raise ConfigError(f"vllm.cpu_cores has {len(v.cpu_cores)} entries for {v.num_servers} servers")
        template = vllm_chat_template(cfg.model, cfg.chat_template)  # the learner's tokenizer renders the same
        specs = [VLLMServerSpec(model_dir=model_path, served_model_name=cfg.server_model_name,
                                chat_template=template, tool_call_parser=cfg.tool_call_parser,
                                kv_cache_gib=v.kv_cache_gib, cpu_cores=v.cpu_cores[i] if v.cpu_cores else None,
                                enable_lora=cfg.weight_sync == "lora", max_lora_rank=max(16, cfg.lora_r),
                                extra_args=list(v.extra_args))
                 for i in range(v.num_servers)]
        log(f"starting {v.num_servers} vLLM server(s) (logs: {out / 'vllm'})")
        self.servers = start_servers(specs, log_dir=out / "vllm", timeout_s=v.startup_timeout_s)
        urls = [s.base_url for s in self.servers]
        log("vLLM ready: " + ", ".join(f"{s.base_url} (pid {s.pid})" for s in self.servers))
        return urls

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        self.servers = []
