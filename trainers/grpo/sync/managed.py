"""``[vllm]``: the vLLM servers a run starts for itself, and stops when it ends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifiers.errors import ConfigError


class ManagedServers:
    """The servers started by `start` (none before), stopped by `stop`."""

    def __init__(self) -> None:
        self.servers: list[Any] = []

    def start(self, cfg: Any, model_path: str, out: Path, log: Callable[[str], None]) -> list[str] | None:
        """Start ``cfg.vllm``'s servers on ``model_path``; their URLs (None without ``[vllm]``)."""
        if cfg.vllm is None:
            return None
        from verifiers.inference.vllm_server import VLLMServerSpec, start_servers

        v = cfg.vllm
        if v.cpu_cores is not None and len(v.cpu_cores) != v.num_servers:
            raise ConfigError(f"vllm.cpu_cores has {len(v.cpu_cores)} entries for {v.num_servers} servers")
        specs = [VLLMServerSpec(model_dir=model_path, served_model_name=cfg.server_model_name,
                                kv_cache_gib=v.kv_cache_gib, cpu_cores=v.cpu_cores[i] if v.cpu_cores else None,
                                enable_lora=cfg.weight_sync == "lora", max_lora_rank=max(16, cfg.lora_r),
                                extra_args=list(v.extra_args))
                 for i in range(v.num_servers)]
        log(f"starting {v.num_servers} vLLM server(s) (logs: {out / 'vllm'})")
        self.servers = start_servers(specs, log_dir=out / "vllm", timeout_s=v.startup_timeout_s)
        urls = [s.base_url for s in self.servers]
        log("vLLM ready: " + ", ".join(urls))
        return urls

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        self.servers = []
