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

        Only a completion that stopped on an end-of-turn token qualifies: that token's text must
        appear in the closing (after nothing but whitespace, e.g. Llama 2's `` </s>``), and the
        bridge is what the closing has after it. A completion cut by ``length``, by a stop string
        or a stop token that is not the template's, leaves the turn open: None.
        """
        closing = self.closing
        if closing is None or finish_reason not in ("stop", "tool_calls") or not completion_ids:
            return None
        last = int(completion_ids[-1])
        if last not in self._special_ids:
            return None
        end = self.tokenizer.decode([last], skip_special_tokens=False)
        pos = closing.find(end) if end else -1
        if pos < 0 or closing[:pos].strip():
            return None
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
        # Encoded after the completion's own end token: text after a special token is tokenised
        # as a fresh piece, exactly as inside a full rendering of the conversation (and a
        # SentencePiece "prefix space on the first piece only" rule sees a non-first piece).
        end = int(completion_ids[-1])
        ids = list(self.tokenizer.encode(self.tokenizer.decode([end], skip_special_tokens=False) + bridge + text,
                                         add_special_tokens=False))
        if not ids or ids[0] != end:
            return None
        return ids[1:]
