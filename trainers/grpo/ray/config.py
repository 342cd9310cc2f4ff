"""``[ray]`` in a training config: rollouts on Ray workers, the experience store as a Ray actor.

Plain pydantic, no Ray import: a config naming ``[ray]`` validates without Ray installed,
and the run says which extra to install when it starts (`trainers.grpo.ray.cluster`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RayConfig(BaseModel):
    """Where the cluster is, how many rollout workers, and how the workers reach the trainer's engine."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(
        None, description="None: start a local cluster on 127.0.0.1; 'auto' or 'HOST:PORT': join a `ray start` cluster"
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of the local cluster (None: Ray counts them)")
    num_workers: int = Field(2, ge=1, description="rollout worker actors, each with the environment and a client")
    worker_num_cpus: float = Field(1.0, ge=0, description="CPUs Ray reserves for each rollout worker")
    worker_resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources each worker needs, e.g. {rollout = 1}: workers then run only on nodes "
        "started with --resources '{\"rollout\": N}' (the trainer and the store stay on the trainer's node)",
    )
    serve_host: str = Field("127.0.0.1", description="interface the trainer serves its engine on (0.0.0.0: a cluster)")
    serve_port: int = Field(0, ge=0, le=65535, description="0: a free port")
    advertise_host: str | None = Field(
        None, description="address workers use for the trainer's engine (default: serve_host, or this node's Ray IP)"
    )
    store_max_groups: int | None = Field(
        None, ge=1, description="store capacity in groups: workers wait (back-pressure) when it is full"
    )
    put_timeout_s: float = Field(600.0, gt=0, description="how long a worker waits for room in a full store")
    max_worker_restarts: int = Field(4, ge=0, description="dead workers replaced during a run before it stops")
