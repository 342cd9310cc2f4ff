"""Tests for verifiers.parsers: answer extraction and (strict) format rewards."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from verifiers.parsers import Parser, ThinkParser, XMLParser, extract_boxed_answer, message_text


def assistant(content):
    return {"role": "assistant", "content": content}


def parts(*texts: str) -> list[dict]:
    return [{"type": "text", "text": t} for t in texts]


# -- message helpers ---------------------------------------------------------------------
def test_message_text_handles_str_none_and_parts() -> None:
    assert message_text(assistant("hi")) == "hi"
    assert message_text(assistant(None)) == ""
    content = [*parts("a", "b"), {"type": "image_url", "image_url": {"url": "x"}}]
    assert message_text(assistant(content)) == "ab"
    assert message_text(SimpleNamespace(role="assistant", content="obj")) == "obj"


def test_message_selection() -> None:
    chat = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        assistant("a1"),
        {"role": "tool", "content": "t", "tool_call_id": "1"},
        assistant("a2"),
    ]
    p = Parser()
    assert [m["content"] for m in p.get_assistant_messages(chat)] == ["a1", "a2"]
    assert [m["content"] for m in p.get_tool_messages(chat)] == ["t"]
    assert p.get_assistant_messages("raw") == [assistant("raw")]
    assert p.get_tool_messages("raw") == []


# -- Parser ------------------------------------------------------------------------------
def test_parser_parse_answer_string_and_chat() -> None:
    p = Parser()
    assert p.parse("x") == "x"
    assert p.parse_answer("raw text") == "raw text"
    chat = [{"role": "user", "content": "q"}, assistant("first"), assistant(parts("la", "st"))]
    assert p.parse_answer(chat) == "last"
    assert p.parse_answer([{"role": "user", "content": "q"}]) is None
    assert Parser(extract_fn=str.upper).parse_answer([assistant("ok")]) == "OK"


def test_parser_format_reward() -> None:
    reward = Parser().get_format_reward_func()
    assert reward.__name__ == "format_reward_func"
    assert reward([assistant("hi")]) == 1.0
    assert reward([assistant(None), assistant("  ")]) == 0.0
    assert reward([{"role": "user", "content": "q"}]) == 0.0
    assert reward("text", answer="x") == 1.0
    assert reward("") == 0.0


def test_parsers_are_picklable() -> None:
    for parser in (Parser(), ThinkParser(extract_boxed_answer), XMLParser(["think", "answer"])):
        assert type(pickle.loads(pickle.dumps(parser))) is type(parser)


# -- extract_boxed_answer --------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{ {a}{b{c}} }", "{a}{b{c}}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed {7}", "7"),
        (r"\boxed{3} and then \boxed{4", r"\boxed{3} and then \boxed{4"),  # truncated last box: text as is
        (r"\boxed{", r"\boxed{"),
        ("no box here", "no box here"),  # 0.1.x: no box gives the text unchanged
        (r"\boxedx{5}", r"\boxedx{5}"),
        ("", ""),
    ],
)
def test_extract_boxed_answer(text: str, expected: str) -> None:
    assert extract_boxed_answer(text) == expected


def test_boxed_as_extract_fn() -> None:
    p = ThinkParser(extract_fn=extract_boxed_answer)
    assert p.parse_answer([assistant(r"<think>\boxed{1}</think> answer: \boxed{x^{2}}")]) == "x^{2}"


# -- XMLParser: parsing --------------------------------------------------------------------
def test_xml_parse_basic_multiline_and_last_occurrence() -> None:
    p = XMLParser(["think", "answer"])
    out = p.parse("<think>\nline 1\nline 2\n</think>\n<answer> 5 </answer>")
    assert out.think == "line 1\nline 2"
    assert out.answer == "5"
    assert p.parse("<answer>1</answer> wait <answer>2</answer>").answer == "1"  # 0.1.x: first by default
    assert p.parse("<answer>1</answer> wait <answer>2</answer>", last=True).answer == "2"
    # 0.1.x's pattern <tag>\s*(.*?)\s*</tag> keeps outer whitespace out even with strip=False
    assert p.parse("<answer> 5 </answer>", strip=False).answer == "5"
    assert p.parse("<answer> 5 \n 6 </answer>", strip=False).answer == "5 \n 6"
    missing = p.parse("<answer>5")
    assert missing.think is None and missing.answer is None


def test_xml_parse_alternatives() -> None:
    p = XMLParser(["think", ("code", "python")])
    assert p.get_fields() == ["think", "code"]
    # 0.1.x: one attribute per tag name, set for the name actually used.
    used = p.parse("<python>print(1)</python>")
    assert used.python == "print(1)" and used.code is None
    both = p.parse("<code>a</code><python>b</python>")
    assert (both.code, both.python) == ("a", "b")
    assert p.parse("<code>a</python>").code is None  # mismatched alternative names
    assert p.parse("x").python is None


def test_xml_parse_answer_chat_and_string() -> None:
    p = XMLParser(["think", "answer"])
    chat = [
        {"role": "user", "content": "q"},
        assistant("<answer>early</answer>"),
        assistant(parts("<think>t</think>", "<answer>late</answer>")),
        assistant("thanks, bye"),
    ]
    assert p.parse_answer(chat) == "late"
    assert p.parse_answer("<answer>s</answer>") == "s"
    assert p.parse_answer([assistant("none")]) is None
    assert p.parse_answer([]) is None
    alt = XMLParser(["think", ("answer", "final")], answer_field="final")
    assert alt.answer_field == "final"
    assert alt.parse_answer([assistant("<final>9</final>")]) == "9"
    assert alt.parse_answer([assistant("<answer>9</answer>")]) is None  # only the named tag counts


def test_xml_format_and_format_str() -> None:
    p = XMLParser(["think", ("code", "python")])
    assert p.format(think="t", code="c") == "<think>\nt\n</think>\n<code>\nc\n</code>"
    assert p.format(python="c", think="t") == "<think>\nt\n</think>\n<code>\nc\n</code>"  # canonical tag
    with pytest.raises(ValueError, match="'code'"):
        p.format(think="t")
    fmt = p.get_format_str()
    assert fmt == "<think>\n...\n</think>\n<[ code | python ]>\n...\n</[ code | python ]>"


@pytest.mark.parametrize("fields", [[], ["a", "a"], [("a", "b"), "b"], ["bad tag"], [()]])
def test_xml_rejects_bad_fields(fields) -> None:
    with pytest.raises(ValueError):
        XMLParser(fields)


# -- XMLParser: format reward (0.1.x's partial credit, strict on mismatched tags) ------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>\n<answer>5</answer>", 1.0),
        ("  <think>\nmulti\nline\n</think>\n\n<answer>\n5\n</answer>\n", 1.0),
        ("<answer>5</answer><think>a</think>", 0.6),  # wrong order: no start/end credit
        ("Sure! <think>a</think>\n<answer>5</answer>", 0.8),  # stray text before the tags
        ("<think>a</think> <answer>5</answer> done", 0.8),  # stray text after
        ("<answer>5", 0.0),  # unclosed, and think missing
        ("<think>a</think>\n<answer>5", 0.4),  # unclosed answer
        ("<think>a</think>\n<answer>5</answer></think>", 0.2),  # stray closing tag
        ("</think>\n<answer>5</answer>", 0.4),  # closing without opening: answer's credit only
        ("<think><answer></think></answer>", 0.0),  # interleaved (0.1.x: 0.8)
        ("<think>a<answer>5</answer></think>", 0.0),  # nested fields (0.1.x: 0.8)
        ("<think>a</think>", 0.6),  # missing field (0.1.x: 0.6 too)
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.6),  # repeated field (0.1.x: 1.0)
        ("just text", 0.0),
        ("", 0.0),
    ],
)
def test_xml_format_scores(text: str, expected: float) -> None:
    p = XMLParser(["think", "answer"])
    assert p.score_format(text) == pytest.approx(expected)


def test_xml_format_scores_alternatives() -> None:
    p = XMLParser(["think", ("code", "python")])
    assert p.score_format("<think>a</think><python>x</python>") == 1.0
    assert p.score_format("<think>a</think><code>x</python>") == 0.4


def test_xml_format_reward_means_over_assistant_messages() -> None:
    p = XMLParser(["think", "answer"])
    reward = p.get_format_reward_func()
    assert reward.__name__ == "format_reward_func"
    good = "<think>a</think>\n<answer>5</answer>"
    assert reward(good) == 1.0
    assert reward("<answer>5") < 0.5
    chat = [
        {"role": "user", "content": "<answer>ignored</answer>"},
        assistant(good),
        assistant(parts("<think>a</think>", "<answer>5</answer>")),
        assistant("text <think>a</think><answer>5</answer>"),
        assistant(None),
    ]
    assert reward(chat, answer="5") == pytest.approx((1.0 + 1.0 + 0.8 + 0.0) / 4)
    assert reward([{"role": "user", "content": good}]) == 0.0


# -- ThinkParser ---------------------------------------------------------------------------
def test_think_parse() -> None:
    p = ThinkParser()
    assert p.parse("<think>hmm</think>\n  42 ") == "42"
    assert p.parse("<think>a</think>b</think> c") == "c"  # after the LAST </think>
    assert p.parse("  no think block ") == ""  # 0.1.x: no </think>, no answer
    assert ThinkParser(str.upper).parse("<think>x</think>ok") == "OK"
    chat = [assistant("<think>x</think>first"), assistant(parts("<think>y</think>", "second"))]
    assert p.parse_answer(chat) == "second"
    assert p.parse_answer("<think>x</think> s") == "s"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>answer", 1.0),
        ("\n  <think>\na\n</think>\n\nanswer\n", 1.0),
        ("<think>a</think>   ", 0.0),  # nothing after the reasoning
        ("answer <think>a</think> more", 0.0),  # does not start with <think>
        ("<think>a<think>b</think>c", 0.0),  # two openings
        ("<think>a</think>b</think>c", 0.0),  # two closings
        ("<think>a and never closed", 0.0),
        ("plain", 0.0),
    ],
)
def test_think_format_scores(text: str, expected: float) -> None:
    assert ThinkParser.score_format(text) == expected


def test_think_format_reward() -> None:
    reward = ThinkParser().get_format_reward_func()
    assert reward.__name__ == "format_reward_func"
    chat = [assistant("<think>a</think>b"), assistant(parts("<think>a</think>", "b")), assistant("b")]
    assert reward(chat) == pytest.approx(2 / 3)
    assert reward("<think>a</think>b") == 1.0
    assert reward([]) == 0.0
