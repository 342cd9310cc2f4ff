"""The trainer side of vLLM's native NCCL weight transfer, for several vLLM servers at once.

A vLLM server started with ``--weight-transfer-config '{"backend": "nccl"}'`` can receive new
weights by NCCL broadcast: the trainer is rank 0 of one NCCL group and every worker of every
server holds another rank. vLLM ships a trainer side (``NCCLTrainerWeightTransferEngine``), but it
puts the workers of ONE server at rank offset 1; `NCCLWeightSender` gives each server its own
offset (1, then 1 + the world sizes of the servers before it) and talks to them through the
caller's admin clients (auth headers, errors that name the server).

The bytes must be cut exactly as vLLM's consumer (``packed_nccl_broadcast_consumer``) cuts them,
and the consumer knows only the metadata of ``/update_weights`` (names, dtypes, shapes):

- weights travel in chunks, each ONE flat uint8 broadcast of its params' bytes back to back;
- a chunk ends after the param that takes its running size PAST the buffer size, so a chunk may
  be larger than the buffer, and a param larger than the buffer still shares its chunk with the
  params before it (`plan_chunks`);
- the consumer views each param's bytes as its dtype in place, which torch allows only at an
  offset that is a multiple of the element size: `wire_order` sends wider dtypes first.

One round (`NCCLWeightSender.send`): ``/start_weight_update`` on every server; every server's
``/update_weights`` (each blocks inside the receiving broadcasts) concurrently with the trainer's
broadcasts; then ``/finish_weight_update`` with the policy version.

Nothing here imports vLLM or touches CUDA at import time; the default group opener does, lazily.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from verifiers.errors import ConfigError, ServerError

NamedTensors = Sequence[tuple[str, torch.Tensor]]

NUM_BUFFERS = 2
"""vLLM's default ``packed_num_buffers``: how many chunks a worker keeps in flight (no effect on the bytes)."""


class Admin(Protocol):
    """The control routes of one vLLM server (`verifiers.inference.vllm.admin.VLLMAdmin` is one)."""

    root: str

    def get(self, path: str) -> Any: ...

    def post(self, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class ParamInfo:
    """What a worker is told about one weight: enough to size its share of a chunk and view its bytes."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def param_infos(items: NamedTensors) -> list[ParamInfo]:
    return [ParamInfo(name, t.dtype, tuple(t.shape)) for name, t in items]


def wire_order(items: NamedTensors) -> list[tuple[str, torch.Tensor]]:
    """``items`` with wider dtypes first, otherwise in their order (a stable sort).

    vLLM views each param's bytes as its dtype where they lie in the chunk, and torch refuses when
    the offset is not a multiple of the element size: a float32 after a bfloat16 of odd length
    would fail on the worker halfway through a transfer. Element sizes are powers of two, so with
    the widest first every offset is a multiple of what follows. Workers load by name, so the
    order is otherwise free.
    """
    return sorted(items, key=lambda item: -item[1].element_size())


def _check_buffer_size(buffer_size_bytes: int) -> None:
    if isinstance(buffer_size_bytes, bool) or not isinstance(buffer_size_bytes, int) or buffer_size_bytes < 1:
        raise ConfigError(f"the NCCL transfer buffer size must be a positive number of bytes, got {buffer_size_bytes!r}")


def plan_chunks(infos: Sequence[ParamInfo], buffer_size_bytes: int) -> list[list[int]]:
    """The indices of the params in each broadcast, by vLLM's rule (see module doc).

    Both sides derive the chunks from the metadata on their own, so this must agree with
    ``pack_tensors`` / ``packed_nccl_broadcast_consumer`` exactly: any difference hangs NCCL or
    loads garbage.
    """
    _check_buffer_size(buffer_size_bytes)
    chunks: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, info in enumerate(infos):
        current.append(i)
        size += info.nbytes
        if size > buffer_size_bytes:
            chunks.append(current)
            current, size = [], 0
    if current:
        chunks.append(current)
    return chunks


def _dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if getattr(torch, name, None) != dtype:  # the worker reads it back with getattr(torch, name)
        raise ConfigError(f"dtype {dtype} has no torch.<name> a vLLM worker could read back")
    return name


def update_info(infos: Sequence[ParamInfo]) -> dict[str, list[Any]]:
    """The ``update_info`` body of ``/update_weights``: all a worker knows about what comes."""
    return {
        "names": [i.name for i in infos],
        "dtype_names": [_dtype_name(i.dtype) for i in infos],
        "shapes": [list(i.shape) for i in infos],
    }


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(-1).view(torch.uint8)


def send_packed(items: NamedTensors, group: Any, buffer_size_bytes: int, src: int = 0) -> int:
    """Broadcast ``items`` from rank ``src``, one flat uint8 tensor per chunk; returns the bytes sent.

    On a GPU the broadcasts are only enqueued on the current stream when this returns.
    """
    infos = param_infos(items)
    sent = 0
    for chunk in plan_chunks(infos, buffer_size_bytes):
        packed = torch.cat([_as_bytes(items[i][1]) for i in chunk])
        group.broadcast(packed, src=src)
        sent += packed.numel()
    return sent


def receive_packed(infos: Sequence[ParamInfo], group: Any, buffer_size_bytes: int, src: int = 0,
                   device: str | torch.device = "cpu") -> list[tuple[str, torch.Tensor]]:
    """The receiving side of `send_packed`, cut from ``infos`` alone as a vLLM worker does (for tests)."""
    out: list[tuple[str, torch.Tensor]] = []
    for chunk in plan_chunks(infos, buffer_size_bytes):
        sizes = [infos[i].nbytes for i in chunk]
        packed = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
        group.broadcast(packed, src=src)
        for i, part in zip(chunk, packed.split(sizes), strict=True):
            # clone: its own storage, so any offset can be viewed as any dtype
            out.append((infos[i].name, part.clone().view(infos[i].dtype).view(infos[i].shape)))
    return out


class _Task(Future[Any]):
    """A call on a daemon thread (one stuck in a broadcast whose peer is gone never blocks exit)."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.finished_at = math.inf  # when one side fails, the others fail after it: the first says why

        def run() -> None:
            self.set_running_or_notify_cancel()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                self.finished_at = time.monotonic()
                self.set_exception(exc)
            else:
                self.finished_at = time.monotonic()
                self.set_result(result)

        threading.Thread(target=run, daemon=True, name="nccl-transfer").start()


def _step_error(step: str, exc: BaseException | None) -> ServerError:
    """The error for ``step`` (which names the server), of the admin's own class when it is a
    `ServerError` (`ServerUnreachableError` means "down", which a caller may fail over from)."""
    cls = type(exc) if isinstance(exc, ServerError) else ServerError
    return cls(f"NCCL weight transfer: {step} failed: {exc}")


def _first_failure(tasks: Iterable[_Task]) -> _Task | None:
    failed = [t for t in tasks if t.done() and t.exception() is not None]
    return min(failed, key=lambda t: t.finished_at, default=None)


def _wait_all(tasks: dict[_Task, str], deadline: float) -> None:
    """Wait for every task; raise `ServerError` for the first that fails, or for those still out at ``deadline``.

    ``tasks`` says what each one is ("POST /update_weights on http://..."), for the message. A
    failure is raised at once: the other tasks may be waiting for a peer that will never come.
    """
    pending = set(tasks)
    while pending:
        _, pending = wait(pending, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_EXCEPTION)
        if (failed := _first_failure(tasks)) is not None:
            exc = failed.exception()
            raise _step_error(tasks[failed], exc) from exc
        if pending and time.monotonic() >= deadline:
            late = ", ".join(sorted(tasks[f] for f in pending))
            raise ServerError(f"NCCL weight transfer: no answer in time from {late}")


def _vllm_trainer_group(master_address: str, master_port: int) -> Callable[[int], Any]:
    """vLLM's trainer endpoint (rank 0, a PyNcclCommunicator over a TCPStore it hosts) on the caller's GPU.

    The group is opened on a helper thread, and a new thread starts on CUDA device 0 whatever the
    trainer selected: the device is read here, on the caller's thread.
    """
    if not torch.cuda.is_available():
        raise ConfigError("the NCCL weight transfer needs the trainer on a CUDA GPU (on a CPU use the reload transport)")
    device = torch.cuda.current_device()

    def open_group(world_size: int) -> Any:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        torch.cuda.set_device(device)
        return trainer_init({"master_address": master_address, "master_port": master_port,
                             "world_size": world_size})

    return open_group


class NCCLWeightSender:
    """Drives one NCCL group of the trainer (rank 0) and the workers of every server.

    ``master_address:master_port`` is where the trainer hosts the rendezvous: an address of this
    machine that every server can reach. ``open_group(world_size)`` returns the trainer's
    communicator (anything with ``broadcast(tensor, src=...)``); the default is vLLM's own, on the
    current GPU. After a failed transfer the group is unusable (workers may be stuck in a
    broadcast): `send` refuses, and the servers need a restart.
    """

    def __init__(self, admins: Sequence[Admin], *, master_address: str, master_port: int,
                 buffer_size_bytes: int = 1 << 30, open_group: Callable[[int], Any] | None = None,
                 timeout_s: float = 600.0) -> None:
        if not admins:
            raise ConfigError("the NCCL weight transfer needs at least one vLLM server")
        _check_buffer_size(buffer_size_bytes)
        if not 0 < master_port < 65536:
            raise ConfigError(f"the NCCL rendezvous needs a real port (1-65535), got {master_port}")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")
        self.admins = list(admins)
        self.master_address = master_address
        self.master_port = master_port
        self.buffer_size_bytes = buffer_size_bytes
        self.timeout_s = timeout_s
        self._open_group = open_group
        self.rank_offsets: list[int] = []
        self.world_size = 0
        self._group: Any = None
        self._failed: str | None = None

    def _world_size_of(self, admin: Admin) -> int:
        try:
            out = admin.get("/get_world_size?include_dp=true")
        except Exception as exc:
            raise _step_error(f"GET /get_world_size on {admin.root}", exc) from exc
        n = out.get("world_size") if isinstance(out, dict) else None
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ServerError(f"NCCL weight transfer: {admin.root} answered /get_world_size with {out!r}")
        return n

    def _init_info(self, rank_offset: int) -> dict[str, Any]:
        return {"master_address": self.master_address, "master_port": self.master_port,
                "rank_offset": rank_offset, "world_size": self.world_size, "packed": True,
                "packed_buffer_size_bytes": self.buffer_size_bytes, "packed_num_buffers": NUM_BUFFERS}

    def init(self) -> None:
        """Give every server its ranks and open the group with all of them (once)."""
        if self._failed is not None:
            raise ServerError(f"NCCL weight transfer: unusable after an earlier failure: {self._failed}")
        if self._group is not None:
            return
        sizes = [self._world_size_of(a) for a in self.admins]
        self.rank_offsets = [1 + sum(sizes[:i]) for i in range(len(sizes))]
        self.world_size = 1 + sum(sizes)
        opener = self._open_group or _vllm_trainer_group(self.master_address, self.master_port)
        # Every side blocks in the rendezvous until all have arrived, so all start at once.
        tasks = {
            _Task(a.post, "/init_weight_transfer_engine", {"init_info": self._init_info(off)},
                  timeout=self.timeout_s): f"POST /init_weight_transfer_engine on {a.root}"
            for a, off in zip(self.admins, self.rank_offsets, strict=True)
        }
        group = _Task(opener, self.world_size)
        tasks[group] = (f"opening the trainer's end of the group (rank 0 of {self.world_size}, "
                        f"rendezvous {self.master_address}:{self.master_port})")
        try:
            _wait_all(tasks, time.monotonic() + self.timeout_s)
        except ServerError as exc:
            self._failed = str(exc)  # a helper thread may still hold the rendezvous port
            raise
        self._group = group.result()

    def _post_all(self, path: str, body: dict[str, Any] | None = None) -> list[tuple[Admin, BaseException]]:
        """POST ``path`` to every server at once (routes that wait on no peer); the failures."""
        calls = [(a, _Task(a.post, path, body, timeout=self.timeout_s)) for a in self.admins]
        wait([f for _, f in calls], timeout=self.timeout_s)
        return [(a, f.exception() if f.done() else TimeoutError(f"no answer in {self.timeout_s:g} s"))
                for a, f in calls if not f.done() or f.exception() is not None]

    def _start_all(self) -> None:
        failed = self._post_all("/start_weight_update")
        if not failed:
            return
        # A started server holds its layers on the meta device until finish: hand back its old weights.
        bad = {id(a) for a, _ in failed}
        for a in self.admins:
            if id(a) not in bad:
                with contextlib.suppress(Exception):
                    a.post("/finish_weight_update", None, timeout=self.timeout_s)
        admin, exc = failed[0]
        raise _step_error(f"POST /start_weight_update on {admin.root}", exc) from exc

    def _fail(self, reason: str) -> None:
        """Mark the group unusable and abort the trainer's end (frees a stream stuck in a broadcast)."""
        self._failed = reason
        group, self._group = self._group, None
        destroy = getattr(group, "destroy", None)
        if callable(destroy):
            with contextlib.suppress(Exception):
                destroy()

    def _check_devices(self, items: NamedTensors) -> None:
        """Before any server waits for us: a tensor the group cannot send would fail mid-transfer."""
        devices = {t.device for _, t in items}
        group_device = getattr(self._group, "device", None)  # vLLM's PyNcclCommunicator has one
        if len(devices) > 1 or (group_device is not None and devices and devices != {group_device}):
            raise ConfigError(f"the NCCL transfer sends from one device ({group_device or 'any'}); "
                              f"the weights are on {sorted(map(str, devices))}")

    def send(self, items: NamedTensors, version: int) -> dict[str, float]:
        """Push ``items`` (`export_weights(model)`) to every server as policy ``version``; timings for the log."""
        if self._failed is not None or self._group is None:
            self.init()
        self._check_devices(items)
        t0 = time.perf_counter()
        items = wire_order(items)
        infos = param_infos(items)
        meta = update_info(infos)
        chunks = plan_chunks(infos, self.buffer_size_bytes)
        self._start_all()
        deadline = time.monotonic() + self.timeout_s
        updates = {_Task(a.post, "/update_weights", {"update_info": meta}, timeout=self.timeout_s):
                   f"POST /update_weights on {a.root}" for a in self.admins}
        try:
            sent = send_packed(items, self._group, self.buffer_size_bytes)
        except Exception as exc:
            # Most likely a server gave up first: its error says why, so give it a moment to arrive.
            self._fail(f"the broadcast failed: {exc}")
            wait(updates, timeout=min(5.0, max(0.0, deadline - time.monotonic())), return_when=FIRST_EXCEPTION)
            if (failed := _first_failure(updates)) is not None:
                raise _step_error(updates[failed], failed.exception()) from exc
            raise ServerError(f"NCCL weight transfer: the trainer's broadcast to "
                              f"{', '.join(a.root for a in self.admins)} failed: {exc}") from exc
        try:
            _wait_all(updates, deadline)  # a server answers once its workers hold every chunk
        except ServerError as exc:
            self._fail(str(exc))
            raise
        if any(t.is_cuda for _, t in items):
            torch.cuda.current_stream().synchronize()
        failed = self._post_all("/finish_weight_update", {"weight_version": str(version)})
        if failed:
            admin, exc = failed[0]
            raise _step_error(f"POST /finish_weight_update on {admin.root}", exc) from exc
        return {"bytes": float(sent), "seconds": time.perf_counter() - t0, "chunks": float(len(chunks))}

    def close(self) -> None:
        """Release every server's end of the group and ours; errors ignored (used on the way out)."""
        if not self.rank_offsets or self._failed == "closed":
            return
        calls = [_Task(a.post, "/shutdown_weight_transfer_engine", None, timeout=min(30.0, self.timeout_s))
                 for a in self.admins]
        wait(calls, timeout=min(30.0, self.timeout_s))
        self._fail("closed")
