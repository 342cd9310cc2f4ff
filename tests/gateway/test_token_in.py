"""Token-in across turns, end to end: a real BPE tokenizer, a tiny random model behind the
embedded server, the gateway, and a program using the official ``openai`` client.

The drift token-in avoids is real here: a random model samples BPE tokens one by one, and the
text they decode to is re-encoded with different merges (or decodes lossily), so a chat call
that re-renders the program's transcript would train on ids the sampler never produced.
"""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("uvicorn")

import openai  # noqa: E402

from verifiers.clients.openai_client import as_chat_client, make_client  # noqa: E402
from verifiers.clients.response import ModelResponse, parse_completion_response  # noqa: E402
from verifiers.data.templating import apply_chat_template  # noqa: E402
from verifiers.eval.summary import summarize  # noqa: E402
from verifiers.gateway import InterceptionGateway  # noqa: E402
from verifiers.gateway.tail import TemplateTail  # noqa: E402
from verifiers.gateway.token_in import (  # noqa: E402
    TokenIn,
    canonical,
    chat_response,
    completion_args,
    forced_prefix,
    split_reasoning,
    token_prompt_for,
)
from verifiers.inference.engine import InferenceEngine  # noqa: E402
from verifiers.inference.server.runner import EmbeddedServer  # noqa: E402
from verifiers.inference.server.tool_parser import forced_text, parse_tool_calls  # noqa: E402
from verifiers.models.tiny import EOS, IM_END, IM_START, PAD, TOOL_TOKENS, TinyModelSpec, build_tiny_model  # noqa: E402
from verifiers.models.tiny import chat_template as tiny_chat_template  # noqa: E402
from verifiers.types import TurnTokens  # noqa: E402

MODEL = "tiny-bpe"
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "read a value",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
FIRST = [{"role": "system", "content": "You look things up."}, {"role": "user", "content": "hello world, lookup the key"}]
EOS_BIAS = 4.0  # P(<|im_end|>) ~ 8% a step: replies end within the token budget, but not at once


def _corpus() -> list[str]:
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "lookup", "key", "value",
             "tool", "call", "answer", "question", "hello", "world", "arguments", "name", "result"]
    lines = []
    for i in range(400):
        w = [words[(i * 7 + k * 3) % len(words)] for k in range(6)]
        lines.append(" ".join(w) + f' {{"key": "{w[0]}{i}"}} ' + string.punctuation[i % 32] * 2)
    return lines


def build_bpe_tokenizer() -> Any:
    """A byte-level BPE tokenizer (trained here in ~0.1 s) with ChatML special tokens and the tiny template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=[PAD, EOS, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(_corpus(), trainer)
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=IM_END, bos_token=None,
                                  additional_special_tokens=[EOS, IM_START], clean_up_tokenization_spaces=False)
    tok.chat_template = tiny_chat_template("json")
    return tok


def _biased_model(tok: Any) -> Any:
    """The tiny random model, its output layer given a bias towards ``<|im_end|>``."""
    model, _ = build_tiny_model(TinyModelSpec(seed=1), tokenizer=tok)
    head = model.lm_head
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight = head.weight  # stays tied to the embeddings
        biased.bias.zero_()
        biased.bias[tok.convert_tokens_to_ids(IM_END)] = EOS_BIAS
    model.lm_head = biased
    return model


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_bpe_tokenizer()


@pytest.fixture(scope="module")
def server(tok: Any) -> Iterator[EmbeddedServer]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend on a small machine
    try:
        with InferenceEngine(_biased_model(tok), tok, max_batch_size=8) as eng, EmbeddedServer(eng, [MODEL]) as srv:
            yield srv
    finally:
        torch.set_num_threads(threads)


class Recorder:
    """The environment's client, passing every call through and keeping the server's raw answers."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.completions: list[tuple[list[int], dict[str, Any], dict[str, Any]]] = []
        self.chats = 0

    async def chat(self, model: str, messages: Any, **kw: Any) -> ModelResponse:
        self.chats += 1
        return await self.inner.chat(model, messages, **kw)

    async def complete(self, model: str, prompt: Any, **kw: Any) -> ModelResponse:
        out = await self.inner.complete(model, prompt, **kw)
        self.completions.append((list(prompt), dict(kw.get("sampling_args") or {}), out.raw or {}))
        return out


def program(base_url: str, key: str, script: list[str]) -> list[dict[str, Any]]:
    """An agent program: the official client, its transcript kept as the SDK hands it back.

    ``script`` steps: ``user:TEXT`` / ``tool:TEXT`` append a message after the last reply;
    ``rewrite`` drops the last reply from the history (a program that edits its transcript);
    ``bad:TEXT`` sends a user message with an invalid ``stop`` and keeps the error, not the message;
    ``force:TEXT`` sends a user message with ``tool_choice`` naming ``lookup``.
    """
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
    messages = [dict(m) for m in FIRST]
    replies = []
    try:
        for step in [None, *script]:
            if step == "rewrite":
                messages.pop()
                messages.append({"role": "user", "content": "again please"})
            elif step is not None and step.startswith("bad:"):
                try:
                    client.chat.completions.create(model="anything", tools=TOOLS, stop=[""], messages=[
                        *messages, {"role": "user", "content": step[4:]}])
                except openai.BadRequestError as exc:
                    replies.append({"error": exc.status_code, "message": str(exc)})
                continue
            elif step is not None:
                role, text = step.split(":", 1)
                extra = {"tool_call_id": "call_0"} if role == "tool" else {}
                messages.append({"role": "user" if role == "force" else role, "content": text, **extra})
            forced = {"tool_choice": {"type": "function", "function": {"name": "lookup"}}} \
                if step is not None and step.startswith("force:") else {}
            out = client.chat.completions.create(model="anything", messages=messages, tools=TOOLS, **forced)
            msg = out.choices[0].message.model_dump(exclude_none=True)  # how SDK users re-send a reply
            replies.append({"finish_reason": out.choices[0].finish_reason, "message": msg})
            messages.append(msg)
    finally:
        client.close()
    return replies


async def _run(server: EmbeddedServer, tok: Any, script: list[str], *, seed: int, max_tokens: int = 48
               ) -> tuple[Any, Recorder, TokenIn, list[dict[str, Any]]]:
    gateway = InterceptionGateway()
    recorder = Recorder(as_chat_client(make_client(base_url=server.base_url, max_retries=0)))
    hook = token_prompt_for(tok)
    try:
        session = gateway.open_session(recorder, MODEL, {"temperature": 1.0, "max_tokens": max_tokens, "seed": seed},
                                       token_prompt=hook)
        replies = await asyncio.to_thread(program, session.base_url, session.secret, script)
        gateway.close_session(session)
    finally:
        gateway.stop()
        await recorder.inner.close()
    return session, recorder, hook, replies


_SEEDS: list[int] = []


async def _drifting_seeds(server: EmbeddedServer, tok: Any, limit: int = 80, want: int = 3) -> list[int]:
    """Seeds whose first reply ends with ``<|im_end|>`` and whose text (valid UTF-8, so nothing is
    lost in decoding) BPE re-encodes to other ids: pure merge drift. Found with direct calls."""
    if _SEEDS:
        return _SEEDS
    client = as_chat_client(make_client(base_url=server.base_url, max_retries=0))
    found = _SEEDS
    try:
        for seed in range(limit):
            if len(found) == want:
                break
            out = await client.chat(MODEL, FIRST, tools=TOOLS, sampling_args={
                "temperature": 1.0, "max_tokens": 48, "seed": seed, "extra_body": {"return_token_ids": True}})
            ids = out.tokens.completion_ids[:-1]
            text = tok.decode(ids)
            if out.finish_reason == "stop" and "\ufffd" not in text and tok.encode(text, add_special_tokens=False) != ids:
                found.append(seed)
    finally:
        await client.close()
    return found


async def _stopping_run(server: EmbeddedServer, tok: Any, script: list[str]) -> tuple[Any, Recorder, TokenIn, list]:
    """A run whose first reply drifts (see `_drifting_seeds`) and whose replies all end with ``<|im_end|>``."""
    for seed in await _drifting_seeds(server, tok):
        session, rec, hook, replies = await _run(server, tok, script, seed=seed)
        if all(r.get("finish_reason", "stop") == "stop" for r in replies[:-1]):
            return session, rec, hook, replies
    pytest.fail("no seed in 0..79 gave a first reply that stops and drifts; raise EOS_BIAS or try more seeds")


# -- end to end ----------------------------------------------------------------------------------
async def test_follow_up_calls_continue_the_exact_ids(server: EmbeddedServer, tok: Any) -> None:
    session, rec, hook, replies = await _stopping_run(server, tok, ["user:and the value?", "tool:42"])
    c1, c2, c3 = session.calls
    assert (c1.token_in, c2.token_in, c3.token_in) == (False, True, True)
    assert hook.stats(session).model_dump() == {"token_in": 2, "plain": 1, "reasons": {"first_call": 1}}
    assert rec.chats == 1 and len(rec.completions) == 2

    # Call 1 went as messages: the server rendered them with the same template and tokenizer.
    assert c1.tokens.prompt_ids == apply_chat_template(tok, c1.messages, tools=TOOLS)
    # Call 2 starts with call 1's exact ids, then only the newly rendered tail.
    head = [*c1.tokens.prompt_ids, *c1.tokens.completion_ids]
    assert c2.tokens.prompt_ids[: len(head)] == head
    assert tok.decode(c2.tokens.prompt_ids[len(head):]) == "\n<|im_start|>user\nand the value?<|im_end|>\n<|im_start|>assistant\n"
    head2 = [*c2.tokens.prompt_ids, *c2.tokens.completion_ids]
    assert c3.tokens.prompt_ids[: len(head2)] == head2
    assert tok.decode(c3.tokens.prompt_ids[len(head2):]) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    # What went upstream, what the server says it used, and what was recorded are the same ids.
    for call, (sent, args, raw) in zip((c2, c3), rec.completions, strict=True):
        assert raw["choices"][0]["prompt_token_ids"] == sent == call.tokens.prompt_ids
        assert raw["choices"][0]["token_ids"] == call.tokens.completion_ids
        assert args["logprobs"] == 0 and args["max_tokens"] == 48 and args["extra_body"]["return_token_ids"] is True
        assert len(call.tokens.completion_logprobs) == len(call.tokens.completion_ids)

    # The drift avoided: re-rendering call 2's messages (reply as text) gives other ids for that prefix.
    rerendered = apply_chat_template(tok, c2.messages, tools=TOOLS)
    assert rerendered[: len(head)] != head
    # The program saw ordinary chat replies, token ids stripped.
    assert replies[1]["message"]["role"] == "assistant" and "token_ids" not in json.dumps(replies)


async def test_rewritten_history_goes_as_messages(server: EmbeddedServer, tok: Any) -> None:
    session, rec, hook, _ = await _stopping_run(server, tok, ["rewrite"])
    assert [c.token_in for c in session.calls] == [False, False]
    assert hook.stats(session).reasons == {"first_call": 1, "no_earlier_call": 1}
    assert rec.chats == 2 and not rec.completions
    assert session.calls[1].tokens.prompt_ids == apply_chat_template(tok, session.calls[1].messages, tools=TOOLS)


async def test_a_length_cut_reply_is_continued_after_the_templates_closing(server: EmbeddedServer, tok: Any) -> None:
    """The template closes a cut reply like any other: its sampled ids stay, ``<|im_end|>\\n`` follows."""
    for seed in range(8):
        session, _rec, hook, _ = await _run(server, tok, ["user:go on"], seed=seed, max_tokens=2)
        if session.calls[0].finish_reason == "length":
            break
    else:
        pytest.fail("every seed stopped within 2 tokens")
    c1, c2 = session.calls
    assert [c.token_in for c in session.calls] == [False, True]
    assert hook.stats(session).reasons == {"first_call": 1}
    head = [*c1.tokens.prompt_ids, *c1.tokens.completion_ids]
    assert c2.tokens.prompt_ids[: len(head)] == head and len(c1.tokens.completion_ids) == 2
    assert tok.decode(c2.tokens.prompt_ids[len(head):]) == (
        "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")
    # As text, the sequence is exactly the template's rendering of the program's transcript.
    assert tok.decode(c2.tokens.prompt_ids) == apply_chat_template(tok, c2.messages, tools=TOOLS, tokenize=False)
    assert (c1.tokens.follow_up, c2.tokens.follow_up, c2.tokens.token_in) == (False, True, True)


async def test_a_forced_tool_choice_is_recorded_and_honoured_token_in(server: EmbeddedServer, tok: Any) -> None:
    session, rec, _hook, replies = await _stopping_run(server, tok, ["force:look it up"])
    c1, c2 = session.calls
    assert c2.token_in and c2.tool_choice == {"type": "function", "function": {"name": "lookup"}}
    assert c1.tool_choice is None and rec.chats == 1
    forced = forced_text("lookup")
    forced_ids = tok.encode(forced, add_special_tokens=False)
    # The call's opening went into the prompt, as the embedded server's chat path forces it.
    assert c2.tokens.prompt_ids[-len(forced_ids):] == forced_ids
    assert tok.decode(c2.tokens.prompt_ids).endswith("<|im_start|>assistant\n" + forced)
    message = replies[1]["message"]
    if message.get("tool_calls"):  # the random model closed the call validly
        assert message["tool_calls"][0]["function"]["name"] == "lookup"
        assert replies[1]["finish_reason"] == "tool_calls"
    else:  # the reply carries the forced opening, as a chat call's reply would
        assert message["content"].startswith(forced)


async def test_a_request_refused_as_ids_is_answered_as_a_chat_call(server: EmbeddedServer, tok: Any) -> None:
    session, rec, hook, replies = await _stopping_run(server, tok, ["bad:stop at nothing", "user:fine"])
    assert replies[1]["error"] == 400 and "stop" in replies[1]["message"]  # the server's words, from the chat call
    assert [(c.status, c.token_in) for c in session.calls] == [(200, False), (400, False), (200, True)]
    assert hook.stats(session).model_dump() == {
        "token_in": 1, "plain": 2, "reasons": {"first_call": 1, "upstream_rejected": 1}}
    assert rec.chats == 2 and len(rec.completions) == 1


def dialect_program(base_url: str, key: str, dialect: str) -> None:
    """Two turns in another dialect, through its official SDK: FIRST, then a user follow-up.

    Responses: the follow-up names the first response (``previous_response_id``) and sends only
    the new input. Messages: the follow-up resends the conversation, the reply as the SDK gave it.
    """
    system, user = FIRST[0]["content"], FIRST[1]["content"]
    if dialect == "responses":
        client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
        tools = [{"type": "function", **TOOLS[0]["function"]}]
        first = client.responses.create(model="anything", instructions=system, input=user, tools=tools)
        client.responses.create(model="anything", instructions=system, previous_response_id=first.id,
                                input="and the value?", tools=tools)
        client.close()
        return
    import anthropic

    fn = TOOLS[0]["function"]
    tools = [{"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}]
    client = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key=key, max_retries=0, timeout=60)
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    reply = client.messages.create(model="claude", max_tokens=1024, system=system, messages=messages, tools=tools)
    messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": "and the value?"}]
    client.messages.create(model="claude", max_tokens=1024, system=system, messages=messages, tools=tools)
    client.close()


@pytest.mark.parametrize("dialect", ["responses", "messages"])
async def test_follow_ups_in_other_dialects_continue_the_exact_ids(server: EmbeddedServer, tok: Any,
                                                                   dialect: str) -> None:
    """The Responses API (chained by previous_response_id) and Anthropic Messages become the same
    chat history as a chat program's, so their follow-ups go token-in too."""
    if dialect == "messages":
        pytest.importorskip("anthropic")
    for seed in await _drifting_seeds(server, tok):
        gateway = InterceptionGateway()
        rec = Recorder(as_chat_client(make_client(base_url=server.base_url, max_retries=0)))
        hook = token_prompt_for(tok)
        try:
            session = gateway.open_session(rec, MODEL, {"temperature": 1.0, "max_tokens": 48, "seed": seed},
                                           token_prompt=hook)
            await asyncio.to_thread(dialect_program, session.base_url, session.secret, dialect)
        finally:
            gateway.stop()
            await rec.inner.close()
        if session.calls[0].finish_reason == "stop":
            break
    else:
        pytest.fail("no drifting seed gave a first reply that stops")
    c1, c2 = session.calls
    assert (c1.token_in, c2.token_in) == (False, True) and c1.tools == c2.tools == TOOLS
    assert c1.tokens.prompt_ids == apply_chat_template(tok, c1.messages, tools=TOOLS)
    head = [*c1.tokens.prompt_ids, *c1.tokens.completion_ids]
    assert c2.tokens.prompt_ids[: len(head)] == head
    assert tok.decode(c2.tokens.prompt_ids[len(head):]) == \
        "\n<|im_start|>user\nand the value?<|im_end|>\n<|im_start|>assistant\n"
    assert rec.chats == 1 and [sent for sent, _, _ in rec.completions] == [c2.tokens.prompt_ids]
    assert rec.completions[0][2]["choices"][0]["token_ids"] == c2.tokens.completion_ids
    assert apply_chat_template(tok, c2.messages, tools=TOOLS)[: len(head)] != head  # the drift avoided


# -- the pieces ------------------------------------------------------------------------------------
def test_chatml_bridge_and_tail(tok: Any) -> None:
    tail = TemplateTail(tok)
    end, other = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(EOS)
    word = tok.encode("fox", add_special_tokens=False)
    assert tail.closing == "<|im_end|>\n"
    assert tail.bridge([*word, end], "stop") == "\n"
    assert tail.bridge([*word, end], "tool_calls") == "\n"
    assert tail.bridge(word, "length") == "<|im_end|>\n"  # cut: the template closes it
    assert tail.bridge(word, "stop") is None  # a stop string: the program's to close
    assert tail.bridge([*word, other], "stop") == "<|im_end|>\n"  # another EOS: the template's closing follows
    reply = {"role": "assistant", "content": "fox"}
    assert tail.tail_text(reply, [{"role": "user", "content": "hi"}], None) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tail.continuation_ids([*word, end], "stop", reply, [{"role": "tool", "content": "7"}], TOOLS)
    assert tok.decode(ids) == "\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    # Ids equal to the same span inside a full rendering of the conversation.
    full = apply_chat_template(tok, [{"role": "user", "content": "q"}, reply, {"role": "tool", "content": "7"}], tools=TOOLS)
    assert full[-len(ids):] == ids
    # A cut reply: the whole closing, encoded alone (nothing merges with the reply's last token).
    cut = tail.continuation_ids(word, "length", reply, [{"role": "user", "content": "hi"}], None)
    assert tok.decode(cut) == "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    after_eos = tail.continuation_ids([*word, other], "stop", reply, [{"role": "user", "content": "hi"}], None)
    assert tok.decode(after_eos) == tok.decode(cut)
    # A template that renders nothing new for the tail (or fails) gives no continuation.
    assert tail.tail_text(reply, [{"role": "bogus", "content": "x"}], None) is None


def test_canonical_forgives_reserialisation_only() -> None:
    sent = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"key":"a","n":1}'}}]}
    back = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "other", "function": {"name": "lookup", "arguments": '{"n": 1, "key": "a"}'}}], "refusal": None}
    assert canonical(sent) == canonical(back)
    assert canonical({"role": "user", "content": [{"type": "text", "text": "hi"}]}) == canonical({"role": "user", "content": "hi"})
    changed = json.loads(json.dumps(back))
    changed["tool_calls"][0]["function"]["arguments"] = '{"key": "b", "n": 1}'
    assert canonical(sent) != canonical(changed)
    assert canonical({"role": "tool", "tool_call_id": "a", "content": "1"}) != canonical(
        {"role": "tool", "tool_call_id": "b", "content": "1"})


def test_completion_args() -> None:
    args = {"temperature": 0.7, "max_completion_tokens": 9, "logprobs": True, "top_logprobs": 2, "seed": 3,
            "stop": ["x"], "extra_body": {"return_token_ids": True, "chat_template_kwargs": {"a": 1}, "top_k": 5}}
    assert completion_args(args, 10, None) == {"temperature": 0.7, "seed": 3, "stop": ["x"], "max_tokens": 9,
                                               "logprobs": 2, "extra_body": {"return_token_ids": True, "top_k": 5}}
    assert completion_args({"max_tokens": 4, "tool_choice": "required"}, 10, None) == {"max_tokens": 4, "extra_body": {
        "return_token_ids": True}}  # honoured by the forced prefix in the prompt (`forced_prefix`)
    assert completion_args({"max_tokens": 4, "response_format": {"type": "json_object"}}, 10, None) == "response_format"
    assert completion_args({}, 10, None) == "no_max_tokens"
    assert completion_args({}, 10, 64)["max_tokens"] == 54
    assert completion_args({}, 64, 64) == "no_room"


def test_chat_response_parses_tool_calls_only_with_tools() -> None:
    text = 'ok <tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>'
    raw = {"choices": [{"text": text, "finish_reason": "stop", "prompt_token_ids": [1, 2], "token_ids": [5, 6],
                        "logprobs": {"tokens": ["ok", "!"], "token_logprobs": [-0.5, -1.0], "top_logprobs": None}}],
           "usage": {"prompt_tokens": 2, "completion_tokens": 2}}
    out = chat_response(parse_completion_response(raw), [1, 2], TOOLS, parse_tool_calls)
    assert out.finish_reason == "tool_calls" and out.content == "ok"
    assert json.loads(out.tool_calls[0]["function"]["arguments"]) == {"key": "a"}
    assert out.tokens == TurnTokens(prompt_ids=[1, 2], completion_ids=[5, 6], completion_logprobs=[-0.5, -1.0],
                                    finish_reason="tool_calls")
    assert out.raw["choices"][0]["message"]["tool_calls"] == out.tool_calls
    assert [e["logprob"] for e in out.raw["choices"][0]["logprobs"]["content"]] == [-0.5, -1.0]
    plain = chat_response(parse_completion_response(raw), [1, 2], None, parse_tool_calls)
    assert plain.finish_reason == "stop" and plain.content == text and not plain.tool_calls


def test_forced_prefix_honours_what_the_chat_path_honours() -> None:
    assert forced_prefix(None, TOOLS) == forced_prefix("auto", TOOLS) == forced_prefix("none", TOOLS) == ""
    assert forced_prefix("required", TOOLS) == "<tool_call>"
    assert forced_prefix({"type": "function", "function": {"name": "lookup"}}, TOOLS) == forced_text("lookup")
    # What the server must refuse goes to the chat path, which answers with its own error.
    assert forced_prefix("required", None) is None
    assert forced_prefix({"type": "function", "function": {"name": "nope"}}, TOOLS) is None
    assert forced_prefix("sometimes", TOOLS) is None


def test_reasoning_is_split_as_vllms_qwen3_parser_splits_it() -> None:
    assert split_reasoning("<think>plan</think>answer") == ("plan", "answer")
    assert split_reasoning("plan</think>answer") == ("plan", "answer")  # the template opened the tag
    assert split_reasoning("no thinking") == (None, "no thinking")
    assert split_reasoning("<think>unfinished") == (None, "<think>unfinished")
    raw = {"choices": [{"text": 'hmm</think>ok <tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>',
                        "finish_reason": "stop", "prompt_token_ids": [1], "token_ids": [5]}],
           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    out = chat_response(parse_completion_response(raw), [1], TOOLS, parse_tool_calls, reasoning=True)
    message = out.raw["choices"][0]["message"]
    assert message["reasoning_content"] == "hmm" and message["content"] == "ok" and out.finish_reason == "tool_calls"
    kept = chat_response(parse_completion_response(raw), [1], TOOLS, parse_tool_calls, reasoning=False)
    assert "reasoning_content" not in kept.raw["choices"][0]["message"] and kept.content.startswith("hmm</think>")


def _call(seq: int, messages: list[dict[str, Any]], reply: str, tools: Any = None, status: int = 200) -> Any:
    from verifiers.gateway.records import GatewayCall

    return GatewayCall(seq=seq, started=0.0, messages=messages, tools=tools, status=status,
                       reply={"role": "assistant", "content": reply},
                       tokens=TurnTokens(prompt_ids=[seq], completion_ids=[seq], finish_reason="stop"))


def test_interleaved_sub_agents_extend_their_own_call() -> None:
    from verifiers.gateway.token_in import find_extended

    def canon(call: Any) -> list[str]:
        return [canonical(m) for m in call.messages]

    main = [{"role": "system", "content": "main"}, {"role": "user", "content": "task"}]
    sub = [{"role": "system", "content": "sub"}, {"role": "user", "content": "part"}]
    calls = [_call(0, main, "plan"), _call(1, sub, "done"), _call(2, main, "plan")]  # call 2: main asked again
    nxt = [*main, {"role": "assistant", "content": "plan"}, {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    found = find_extended(calls, nxt, None, canon)
    assert not isinstance(found, str) and found[0].seq == 2 and found[1] == nxt[3:]  # the latest that fits
    found = find_extended(calls, [*sub, {"role": "assistant", "content": "done"}, {"role": "user", "content": "more"}],
                          None, canon)
    assert not isinstance(found, str) and found[0].seq == 1  # not the later calls of the main agent
    assert find_extended(calls, nxt, TOOLS, canon) == "no_earlier_call"  # other tools: other rendered prompt
    assert find_extended(calls, [*nxt[:3], {"role": "assistant", "content": "mine"}], None, canon) == "tail_not_user_or_tool"
    assert find_extended([_call(0, main, "plan", status=502)], nxt, None, canon) == "no_earlier_call"
    assert find_extended(calls, nxt[:3], None, canon) == "no_earlier_call"  # no new message: nothing to continue


async def test_agent_env_with_the_policy_tokenizer_trains_one_exact_row_per_linear_program(
        server: EmbeddedServer, tok: Any) -> None:
    """`AgentEnv(tokenizer=...)` (what `use_tokenizer` gives a trainer's environment) end to end:
    a real program's follow-up calls go token-in, so its rollout is one growing token sequence."""
    import itertools
    import sys
    from pathlib import Path

    import verifiers as vf

    program_path = Path(__file__).parent / "programs" / "chat_once.py"
    env = vf.AgentEnv(command=[sys.executable, str(program_path), "calls", "3"],
                      dataset=[{"question": "hello there", "answer": ""}], rubric=vf.Rubric(funcs=[lambda **_: 0.0]),
                      tokenizer=tok, sampling_args={"temperature": 1.0, "max_tokens": 48})
    client = make_client(base_url=server.base_url, max_retries=0)
    try:
        out = await env.a_generate(env.get_dataset().rows, client, MODEL, rollouts_per_example=4)
    finally:
        await client.close()
    finishes = set()
    for r in out.results:
        assert r.error is None, r.error
        calls = r.state["agent"]["calls"]
        assert len(calls) == 3 and r.state["agent"]["token_in_calls"] == 2
        for prev, call in itertools.pairwise(calls):
            # Every follow-up continues the earlier call's ids, whether that reply stopped or was cut.
            assert call.token_in and call.tokens.follow_up and call.tokens.token_in
            assert call.tokens.prompt_ids[: len(prev.tokens.prompt_ids) + len(prev.tokens.completion_ids)] == \
                prev.tokens.prompt_ids + prev.tokens.completion_ids
            finishes.add(prev.finish_reason)
        assert r.token_sequence().prefix_consistent and len(r.token_rows()) == 1
    # vf-eval's summary (and vf-train's `rollouts/token_in_share`) report the share of follow-ups.
    summary = summarize(out.results)
    assert (summary.tokens.follow_up_calls, summary.tokens.token_in_share) == (8, 1.0)
    print(f"follow-up calls after replies that ended with: {sorted(map(str, finishes))}")
