"""reply_text / strip_markup: rewards read a reply as a user does, without the protocol's tokens."""

from __future__ import annotations

import verifiers as vf


def test_markup_tokens_are_removed_and_prose_kept() -> None:
    assert vf.strip_markup("<tool_call><tool_call>") == ""
    assert vf.strip_markup("<|im_start|>assistant\nb<|im_end|><|endoftext|>") == "assistant\nb"
    assert vf.strip_markup("<think>a then b</think>b<end_of_turn><|eot_id|>") == "a then bb"
    # tags that are no protocol's tokens, and text that only looks like one, stay
    assert vf.strip_markup("<answer>x</answer> a <b> 1 <| 2 |> 3") == "<answer>x</answer> a <b> 1 <| 2 |> 3"


def test_reply_text_joins_the_assistant_turns_only() -> None:
    completion = [
        {"role": "assistant", "content": "<tool_call>"},
        {"role": "tool", "content": "<tool_response>42</tool_response>"},
        {"role": "assistant", "content": [{"type": "text", "text": "The answer is 42.<|im_end|>"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    assert vf.reply_text(completion) == "\nThe answer is 42.\n"
    assert vf.reply_text("<think></think>7") == "7"


def test_xml_format_reward_needs_something_inside_a_field() -> None:
    parser = vf.XMLParser(["think", "answer"])
    assert parser.score_format("<think></think>") == 0.0
    assert parser.score_format("<think> \n</think><answer>4</answer>") == parser.score_format("<answer>4</answer>")
    assert parser.score_format("<think>a</think><answer>4</answer>") == 1.0
