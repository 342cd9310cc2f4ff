"""Fixtures for the embedded inference server: one tiny model, real servers, openai clients.

Every test compares the server against the model itself: a direct forward pass of the
same weights (`Reference`) is the ground truth for greedy tokens and logprobs, so nothing
here hard-codes a model output. The session builds one tiny model directory; each test
module gets its own engine and uvicorn server on 127.0.0.1 (port 0), stopped at teardown.

The tiny model's default initialisation (std 0.02) gives nearly uniform logits, so greedy
decoding repeats one character whatever the prompt; a batching bug could hide behind
such output. The fixture model therefore redraws its weights with a larger spread, which
makes completions differ from prompt to prompt.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import openai  # noqa: E402

from verifiers.data.templating import apply_chat_template  # noqa: E402
from verifiers.inference.engine import (  # noqa: E402
    InferenceEngine,
    RequestOutput,
    SequenceOutput,
    StreamDelta,
)
from verifiers.inference.engine.loading import load_model_and_tokenizer  # noqa: E402
from verifiers.inference.server.runner import EmbeddedServer, inprocess_client  # noqa: E402
from verifiers.models.tiny import IM_END, TinyModelSpec, save_tiny_model  # noqa: E402

MODEL_NAME = "tiny"
WEIGHT_STD = 0.2

# Candidate user messages; fixtures pick ones with the behaviour a test needs (a greedy
# completion that ends early with EOS, or one that runs to max_tokens), checked against
# the reference model rather than assumed.
CANDIDATES = [
    "hello",
    "abc",
    "The quick brown fox",
    "Reverse this text",
    "What is 2+2?",
    "tiny models say odd things",
    "x",
    "Hello, world!",
    "pack my box with five dozen liquor jugs",
    "0123456789",
    "a b c d e f g",
    "Why?",
    "zebra",
    "Tell me a story.",
    "q",
    "SHOUTING",
    "lorem ipsum dolor sit amet",
    "tabs\tand\nnewlines",
    "{}[]()",
    "one more try",
]


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread: these models are tiny, and on a small shared machine extra threads
    only contend (a forward pass is ~10x slower with two busy cores than with one thread)."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def randomize_weights(model: Any, seed: int, std: float = WEIGHT_STD) -> None:
    """Redraw every matrix from N(0, std) (norm weights stay 1) so greedy output varies."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def make_model_dir(path: Path, seed: int = 0) -> Path:
    """A `vf-tiny` directory (default spec) whose weights are redrawn with `randomize_weights`."""
    out = save_tiny_model(path, TinyModelSpec(seed=seed))
    model, _ = load_model_and_tokenizer(out, with_tokenizer=False)
    randomize_weights(model, seed)
    model.save_pretrained(out)
    return out


class Reference:
    """Ground truth from direct forward passes of a model (no cache, no batching)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = {tokenizer.convert_tokens_to_ids(IM_END), *(model.generation_config.eos_token_id or [])}

    def chat_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        return list(apply_chat_template(self.tokenizer, messages, tools=tools))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def log_softmax(self, prompt_ids: Sequence[int], completion_ids: Sequence[int], model: Any = None) -> Any:
        """Row k: log-softmax over the vocabulary of the distribution that produced ``completion_ids[k]``."""
        m = model or self.model
        ids = torch.tensor([[*prompt_ids, *completion_ids]], dtype=torch.long)
        with one_torch_thread(), torch.no_grad():
            logits = m(input_ids=ids).logits[0].float()
        start = len(prompt_ids) - 1
        return torch.log_softmax(logits[start : start + len(completion_ids)], dim=-1)

    def greedy(
        self, prompt_ids: Sequence[int], max_tokens: int, *, repetition_penalty: float = 1.0, model: Any = None
    ) -> list[int]:
        """Greedy decoding one token at a time, with vLLM's repetition penalty over prompt and output."""
        m = model or self.model
        ids = list(prompt_ids)
        out: list[int] = []
        for _ in range(max_tokens):
            with one_torch_thread(), torch.no_grad():
                logits = m(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0, -1].float()
            if repetition_penalty != 1.0:
                seen = torch.tensor(sorted(set(ids)), dtype=torch.long)
                vals = logits[seen]
                logits[seen] = torch.where(vals > 0, vals / repetition_penalty, vals * repetition_penalty)
            tok = int(torch.argmax(logits))
            out.append(tok)
            ids.append(tok)
            if tok in self.eos_ids:
                break
        return out

    def greedy_chat(self, content: str, max_tokens: int, **kw: Any) -> list[int]:
        return self.greedy(self.chat_ids([{"role": "user", "content": content}]), max_tokens, **kw)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread_per_module() -> Iterator[None]:
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def model_and_tokenizer(tiny_dir: Path) -> tuple[Any, Any]:
    return load_model_and_tokenizer(tiny_dir)


@pytest.fixture(scope="session")
def tokenizer(model_and_tokenizer: tuple[Any, Any]) -> Any:
    return model_and_tokenizer[1]


@pytest.fixture(scope="session")
def ref(model_and_tokenizer: tuple[Any, Any]) -> Reference:
    return Reference(*model_and_tokenizer)


@pytest.fixture(scope="session")
def stopping_prompt(ref: Reference) -> tuple[str, list[int]]:
    """A user message whose greedy completion ends with EOS after a few tokens, and that completion."""
    for text in CANDIDATES:
        ids = ref.greedy_chat(text, 24)
        if 2 <= len(ids) <= 20 and ids[-1] in ref.eos_ids:
            return text, ids
    pytest.fail("no candidate prompt ends early with EOS under greedy decoding; add more CANDIDATES")


@pytest.fixture(scope="session")
def running_prompt(ref: Reference) -> tuple[str, list[int]]:
    """A user message whose greedy completion does not end within 24 tokens, and those 24 tokens."""
    for text in CANDIDATES:
        ids = ref.greedy_chat(text, 24)
        if len(ids) == 24 and not set(ids) & ref.eos_ids:
            return text, ids
    pytest.fail("no candidate prompt runs 24 greedy tokens without EOS; add more CANDIDATES")


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Iterator[InferenceEngine]:
    with InferenceEngine.from_pretrained(tiny_dir) as eng:
        yield eng


@pytest.fixture(scope="module")
def server(engine: InferenceEngine) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(engine, [MODEL_NAME]) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: EmbeddedServer) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=60)
    yield c
    c.close()


@pytest.fixture
async def aclient(server: EmbeddedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    c = openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=60)
    yield c
    await c.close()


# -- a scripted engine: the real server code over fixed model output -------------------------
class ScriptedEngine(InferenceEngine):
    """Answers every request with ``reply`` (then EOS), to drive the server's tool-call paths.

    A randomly initialised model never writes a valid tool call, so the HTTP layer's
    parsing is tested on text we choose; request validation is still the real one.
    """

    reply: str = ""

    def _scripted_ids(self) -> list[int]:
        ids = list(self.tokenizer(self.reply, add_special_tokens=False)["input_ids"])
        return [*ids, self.tokenizer.convert_tokens_to_ids(IM_END)]

    def _result(self, prompt_ids: Sequence[int], n: int) -> RequestOutput:
        ids = self._scripted_ids()
        outs = [SequenceOutput(index=i, token_ids=list(ids), text=self.reply, finish_reason="stop") for i in range(n)]
        return RequestOutput(prompt_token_ids=list(prompt_ids), outputs=outs, weight_version=self.weight_version)

    async def generate(self, prompt_ids: Any, params: Any, n: int = 1, *, forced: Any = ()) -> RequestOutput:
        self.check_request(prompt_ids, params, n)
        return self._result(prompt_ids, n)

    def stream(self, prompt_ids: Any, params: Any, n: int = 1, *, forced: Any = ()) -> AsyncIterator[Any]:
        self.check_request(prompt_ids, params, n)
        return self._deltas(prompt_ids, n)

    async def _deltas(self, prompt_ids: Sequence[int], n: int) -> AsyncIterator[Any]:
        ids = self._scripted_ids()
        for i in range(n):
            for k, tid in enumerate(ids):
                last = k == len(ids) - 1
                text = "" if last else self.tokenizer.decode([tid])
                yield [StreamDelta(i, text, [tid], [], [], finish_reason="stop" if last else None)]
        yield self._result(prompt_ids, n)


@pytest.fixture(scope="module")
def scripted(model_and_tokenizer: tuple[Any, Any]) -> Iterator[tuple[ScriptedEngine, openai.OpenAI]]:
    """A server over a `ScriptedEngine`; set ``engine.reply`` before each request."""
    model, tok = model_and_tokenizer
    eng = ScriptedEngine(model, tok)
    with EmbeddedServer(eng, [MODEL_NAME]) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=30)
        yield eng, c
        c.close()


# -- raw HTTP and processes ---------------------------------------------------------------
def http(method: str, url: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """One request with the standard library: ``(status, headers, parsed JSON body)``."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read() or b"null")


@pytest.fixture(scope="session")
def raw_http() -> Callable[..., tuple[int, dict[str, str], Any]]:
    return http


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(proc: subprocess.Popen[str], base: str, timeout_s: float = 120.0) -> None:
    """Poll ``base/health`` until it answers 200; fail with the server's stderr if it exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {proc.communicate()[1]}")
        try:
            if http("GET", f"{base}/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"server at {base} did not become healthy within {timeout_s}s")


def stop_process(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class ProcessHelpers:
    """Plain helpers for the test modules (conftest modules are not importable by name)."""

    free_port = staticmethod(free_port)
    wait_healthy = staticmethod(wait_healthy)
    stop_process = staticmethod(stop_process)
    make_model_dir = staticmethod(make_model_dir)


@pytest.fixture(scope="session")
def procs() -> type[ProcessHelpers]:
    return ProcessHelpers


@pytest.fixture
async def inproc(engine: InferenceEngine) -> AsyncIterator[openai.AsyncOpenAI]:
    """An ``AsyncOpenAI`` over an in-memory ASGI transport to ``engine`` (no socket)."""
    c = inprocess_client(engine, [MODEL_NAME])
    yield c
    await c.close()
