"""The token ids that follow a sampled reply: the template's bridge, then the new messages.

Token-in (`verifiers.gateway.token_in`) continues an earlier call from its exact ids. What it
must add is (1) the text the chat template writes after an assistant message (``<|im_end|>\\n``
in ChatML) less what the sampled completion already ends with (its end-of-turn token), and
(2) the new tool/user messages with the generation prompt. Both are found by rendering, never
by hand-written per-model rules: (2) is the difference between the template's text for
``[user, reply]`` and for ``[user, reply, *tail]`` (it must be a prefix, else there is no
clean answer), and (1) is what follows a marker assistant message in a rendered conversation.
Rendering goes through `verifiers.data.templating.apply_chat_template`, the function the
embedded server and the trainer use, so the three agree on every template.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from verifiers.data.templating import ChatTemplateError, apply_chat_template

_MARK = "vf-gateway-end-of-content"
_DUMMY_USER = {"role": "user", "content": "."}


class TemplateTail:
    """Renders continuations with one tokenizer's chat template (torch-free).

    Called on the rollout's event loop: give it a tokenizer object that no other thread encodes
    with at the same time (a fast tokenizer may raise "Already borrowed"), e.g. a copy.
    """

    def __init__(self, tokenizer: Any, **template_kwargs: Any) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = template_kwargs
        self._special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        # Special added tokens too: a model may end its turn on one the tokenizer does not name
        # (Qwen's and the tiny model's ``<|endoftext|>`` beside the template's ``<|im_end|>``).
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        self._special_ids.update(int(i) for i, tok in added.items() if getattr(tok, "special", False))
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is not None:
            self._special_ids.add(int(eos))

    def _render(self, messages: list[dict[str, Any]], tools: Any, generation: bool, **kw: Any) -> str:
        return str(apply_chat_template(
            self.tokenizer, messages, tools=tools, add_generation_prompt=generation, tokenize=False,
            **{**self.template_kwargs, **kw},
        ))

    @cached_property
    def closing(self) -> str | None:
        """What the template writes after an assistant message's content (None: no fixed text)."""
        try:
            text = self._render([_DUMMY_USER, {"role": "assistant", "content": _MARK}], None, False)
        except ChatTemplateError:
            return None
        pos = text.rfind(_MARK)
        return text[pos + len(_MARK):] if pos >= 0 else None

    def bridge(self, completion_ids: list[int], finish_reason: str | None) -> str | None:
        """The closing text still missing after ``completion_ids``; None when it cannot be known.

        - Ended on the template's end-of-turn token (its text in the closing after nothing but
          whitespace, e.g. ChatML's ``<|im_end|>``, Llama 2's `` </s>``): what the closing has after it.
        - Ended on another special token (a second EOS such as ``<|endoftext|>``): the whole
          closing follows it, so the next turn opens as the template opens turns.
        - Cut by ``length``: the whole closing. The template closes a cut reply like any other
          (its text is the reply's content), and the sampled ids stay as they were.
        - Stopped by a stop string (the last token is plain text): the turn is the program's to
          close, and the text it sends back is not the ids: None.
        """
        closing = self.closing
        if closing is None or not completion_ids:
            return None
        if finish_reason == "length":
            return closing
        if finish_reason not in ("stop", "tool_calls"):
            return None
        last = int(completion_ids[-1])
        if last not in self._special_ids:
            return None
        end = self.tokenizer.decode([last], skip_special_tokens=False)
        pos = closing.find(end) if end else -1
        if pos < 0:
            return closing
        if closing[:pos].strip():
            return None  # the template writes text before its end token that the model did not
        return closing[pos + len(end):]

    def tail_text(
        self, reply: dict[str, Any], tail: list[dict[str, Any]], tools: Any, **template_kwargs: Any
    ) -> str | None:
        """The text of ``tail`` after ``reply``, generation prompt included (None: not a clean suffix).

        ``reply`` is the assistant message as the program sent it back: rendering it before the
        tail lets templates that look at the previous message (grouped tool results, tool call
        ids) see the real one. The rendered ``[user, reply]`` must end with `closing`, so that
        the bridge computed from it is what this template writes here.
        """
        closing = self.closing
        if closing is None:
            return None
        base_msgs = [_DUMMY_USER, reply]
        try:
            base = self._render(base_msgs, tools, False, **template_kwargs)
            full = self._render([*base_msgs, *tail], tools, True, **template_kwargs)
        except ChatTemplateError:
            return None
        if not base.endswith(closing) or not full.startswith(base) or len(full) == len(base):
            return None
        return full[len(base):]

    def continuation_ids(
        self,
        completion_ids: list[int],
        finish_reason: str | None,
        reply: dict[str, Any],
        tail: list[dict[str, Any]],
        tools: Any,
        **template_kwargs: Any,
    ) -> list[int] | None:
        """Ids to append after an earlier call's ``prompt_ids + completion_ids`` (None: fall back)."""
        bridge = self.bridge(completion_ids, finish_reason)
        if bridge is None:
            return None
        text = self.tail_text(reply, tail, tools, **template_kwargs)
        if text is None:
            return None
        last = int(completion_ids[-1])
        if last in self._special_ids:
            # Encoded after the completion's own end token: text after a special token is tokenised
            # as a fresh piece, exactly as inside a full rendering of the conversation (and a
            # SentencePiece "prefix space on the first piece only" rule sees a non-first piece).
            ids = list(self.tokenizer.encode(self.tokenizer.decode([last], skip_special_tokens=False) + bridge + text,
                                             add_special_tokens=False))
            return ids[1:] if ids and ids[0] == last else None
        # A reply cut by length ends on plain text, which must not merge with what follows: the
        # closing is encoded alone and must decode to itself (true when it opens with a special
        # token, as ChatML's, Llama 3's and Gemma's do).
        ids = list(self.tokenizer.encode(bridge + text, add_special_tokens=False))
        if not ids or self.tokenizer.decode(ids, skip_special_tokens=False) != bridge + text:
            return None
        return ids
