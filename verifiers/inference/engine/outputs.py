"""Host-side work per sequence after each step: record the token, detect a stop, stream, build the output.

Plain functions over `Seq` and `Request`: none of this touches the device, so it stays apart
from the batch (`step.DecodeBatch`) that produced the token. ``decode`` is the tokenizer's
``decode`` with special tokens skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from verifiers.inference.engine.requests import Request, RequestOutput, Seq, SequenceOutput, StreamDelta

Decode = Callable[[list[int]], str]


def advance(seq: Seq, tok: int, lp: float | None, top: list[tuple[int, float]] | None, *,
            eos_ids: set[int], decode: Decode) -> None:
    """Append one sampled token to ``seq`` and set its finish reason when it ends here."""
    p = seq.req.params
    seq.out.append(tok)
    if p.logprobs and lp is not None:
        seq.logprobs.append(lp)
        if p.top_logprobs and top is not None:
            seq.top.append(top[: p.top_logprobs])
    forcing = len(seq.forced) >= len(seq.out)
    if not forcing and tok in eos_ids and not p.ignore_eos and len(seq.out) >= p.min_tokens:
        seq.finish_reason = "stop"
    elif not forcing and tok in p.stop_token_ids and len(seq.out) >= p.min_tokens:
        seq.finish_reason, seq.stop_reason = "stop", tok
    if p.stop or seq.req.sink.streaming:
        seq.text = decode(seq.out)
        if p.stop and seq.finish_reason is None and len(seq.out) >= p.min_tokens:
            check_stop_strings(seq)
    if seq.finish_reason is None and len(seq.out) >= seq.req.max_tokens:
        seq.finish_reason = "length"
    if seq.req.sink.streaming:
        push_delta(seq)


def check_stop_strings(seq: Seq) -> None:
    """Cut ``seq.text`` at the first stop string it now holds, and finish it there."""
    p = seq.req.params
    # Only the tail can contain a newly completed stop string.
    tail_from = max(0, len(seq.text) - max(len(s) for s in p.stop) - 16)
    best: tuple[int, str] | None = None
    for s in p.stop:
        pos = seq.text.find(s, tail_from)
        if pos >= 0 and (best is None or pos < best[0]):
            best = (pos, s)
    if best is not None:
        pos, s = best
        seq.text = seq.text[: pos + len(s)] if p.include_stop_str_in_output else seq.text[:pos]
        seq.finish_reason, seq.stop_reason = "stop", s


def push_delta(seq: Seq) -> None:
    """Stream what is new since the last delta, holding back text that may still change."""
    text = seq.text
    if seq.finish_reason is None:
        text = text.rstrip("\ufffd")  # an incomplete multi-byte character waits for its next token
        if seq.req.params.stop:  # hold back a suffix that could still become a stop string
            hold = max(len(s) for s in seq.req.params.stop) - 1
            text = text[: max(seq.streamed_chars, len(text) - hold)]
    new_text = text[seq.streamed_chars :]
    if not new_text and seq.finish_reason is None:
        return  # tokens without text yet (a special token, half a character) ride along with the next delta
    start = seq.streamed_tokens
    delta = StreamDelta(
        index=seq.index,
        text=new_text,
        token_ids=seq.out[start:],
        logprobs=seq.logprobs[start:] if seq.req.params.logprobs else [],
        top_logprobs=seq.top[start:] if seq.req.params.top_logprobs else [],
        finish_reason=seq.finish_reason,
        stop_reason=seq.stop_reason,
    )
    seq.streamed_chars = len(text)
    seq.streamed_tokens = len(seq.out)
    seq.req.sink.push(delta)


def output(req: Request, decode: Decode) -> RequestOutput:
    """The finished request as callers receive it, one `SequenceOutput` per row."""
    outs = []
    for s in req.seqs:
        text = s.text if (s.req.params.stop or req.sink.streaming) else decode(s.out)
        outs.append(
            SequenceOutput(
                index=s.index,
                token_ids=list(s.out),
                text=text,
                finish_reason=s.finish_reason or "stop",
                stop_reason=s.stop_reason,
                logprobs=list(s.logprobs) if req.params.logprobs else None,
                top_logprobs=list(s.top) if req.params.top_logprobs else None,
            )
        )
    return RequestOutput(prompt_token_ids=req.prompt_ids, outputs=outs, weight_version=req.version)
