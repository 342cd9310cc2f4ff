"""verifiers 0.1.5 parser and data_utils behaviour, and a 0.1.x-style environment scored end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest

import verifiers as vf
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript
from verifiers.utils import data_utils
from verifiers.utils.data_utils import extract_boxed_answer, extract_hash_answer


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


# -- parsers ------------------------------------------------------------------------------------
def test_xml_tuple_fields_parse_as_the_name_used() -> None:
    parser = vf.XMLParser(["think", ("code", "answer")], answer_field="answer")
    ran_code = parser.parse("<think>t</think>\n<code>print(1)</code>")
    answered = parser.parse("<think>t</think>\n<answer>42</answer>")
    assert (ran_code.code, ran_code.answer) == ("print(1)", None)
    assert (answered.code, answered.answer) == (None, "42")
    assert parser.parse_answer([assistant("<code>x</code>")]) is None
    assert parser.parse_answer([assistant("<answer>1</answer>"), assistant("<code>y</code>")]) == "1"
    assert parser.format(answer="42", think="t") == "<think>\nt\n</think>\n<code>\n42\n</code>"
    assert parser.get_format_str() == "<think>\n...\n</think>\n<[ code | answer ]>\n...\n</[ code | answer ]>"
    assert parser.get_fields() == ["think", "code"]


def test_xml_parse_first_by_default_parse_answer_last() -> None:
    parser = vf.XMLParser(["answer"])
    text = "<answer>1</answer> no wait <answer>2</answer>"
    assert parser.parse(text).answer == "1"
    assert parser.parse(text, last=True).answer == "2"
    assert parser.parse_answer(text) == "2"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>\na\n</think>\n<answer>\n5\n</answer>", 1.0),  # 0.1.5: 1.0
        ("Sure! <think>a</think>\n<answer>5</answer>", 0.8),  # 0.1.5: 0.8 (does not start with a field)
        ("<think>a</think>\n<answer>5</answer> bye", 0.8),  # 0.1.5: 0.8 (does not end with one)
        ("<answer>5</answer>", 0.6),  # 0.1.5: 0.6 (one of two fields)
        ("<think>a</think>", 0.6),  # 0.1.5: 0.6
        ("<think>a<answer>5</answer></think>", 0.0),  # 0.1.5: 0.8 (nested: strict here)
        ("<think>a</think><answer>5", 0.4),  # 0.1.5: 0.8 (unclosed: strict here)
        ("plain text", 0.0),  # 0.1.5: 0.2
    ],
)
def test_xml_partial_format_reward(text: str, expected: float) -> None:
    reward = vf.XMLParser(["think", "answer"]).get_format_reward_func()
    assert reward([assistant(text)]) == pytest.approx(expected)


def test_parser_parse_answer_on_message_list() -> None:
    chat = [{"role": "user", "content": "q"}, assistant("first"), assistant("last")]
    assert vf.Parser().parse_answer(chat) == "last"
    assert vf.Parser(extract_fn=extract_boxed_answer).parse_answer([assistant(r"so \boxed{7}")]) == "7"
    assert vf.Parser(extract_fn=extract_boxed_answer).parse_answer([assistant("7")]) == "7"


def test_think_parser_without_close_tag_gives_empty() -> None:
    parser = vf.ThinkParser(extract_fn=extract_boxed_answer)
    assert parser.parse(r"<think>long \boxed{1} reasoning cut off") == ""
    assert parser.parse(r"<think>r</think> final \boxed{3}") == "3"
    assert parser.parse_answer([assistant("no tags at all")]) == ""


# -- data_utils -----------------------------------------------------------------------------------
def test_answer_extractors_and_prompts() -> None:
    assert extract_boxed_answer("no box") == "no box"
    assert extract_boxed_answer(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert vf.extract_boxed_answer is extract_boxed_answer
    assert extract_hash_answer("Natalia sold 48...\n#### 72") == "72"
    assert extract_hash_answer("no hashes") == "no hashes"
    assert (
        data_utils.BOXED_SYSTEM_PROMPT
        == "Please reason step by step, and put your final answer within \\boxed{}."
    )
    assert data_utils.THINK_BOXED_SYSTEM_PROMPT.startswith(
        "Think step-by-step inside <think>...</think> tags."
    )
    assert data_utils.strip_non_numeric("$70.5 ") == "70.5"


def test_load_example_dataset_maps_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names resolve to upstream's Hub datasets/configs/splits and rows map to question/answer."""
    import datasets

    calls: list[tuple] = []
    sources = {
        "openai/gsm8k": [{"question": f"q{i}", "answer": f"work\n#### {i}"} for i in range(5)],
        "cais/mmlu": [{"question": "Q", "choices": ["w", "x", "y", "z"], "answer": 2, "subject": "s"}],
        "opencompass/AIME2025": [{"question": "A", "answer": "$12$"}],
        "chiayewken/competition_math": [{"problem": "P", "solution": r"so \boxed{5}", "level": "1"}],
    }

    def fake_load_dataset(path: str, name: str | None = None, split: str | None = None) -> datasets.Dataset:
        calls.append((path, name, split))
        return datasets.Dataset.from_list(sources[path])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    gsm = vf.load_example_dataset("gsm8k", n=3, seed=1)
    assert calls[-1] == ("openai/gsm8k", "main", "test")
    assert gsm.column_names == ["question", "answer"] and len(gsm) == 3
    assert all(r["answer"] == r["question"][1:] for r in gsm)
    mmlu = vf.load_example_dataset("mmlu")
    assert calls[-1] == ("cais/mmlu", "all", "dev")
    assert mmlu[0] == {"question": "Question: Q\n\nA: w\nB: x\nC: y\nD: z", "answer": "C"}
    aime = vf.load_example_dataset("aime2025", split="train")
    assert calls[-2:] == [
        ("opencompass/AIME2025", "AIME2025-I", "train"),
        ("opencompass/AIME2025", "AIME2025-II", "train"),
    ]
    assert aime["answer"] == ["12", "12"]
    assert vf.load_example_dataset("math")[0] == {"question": "P", "answer": "5"}
    with pytest.raises(vf.ConfigError, match=r"unknown example dataset 'nope'.*gsm8k"):
        vf.load_example_dataset("nope")


def test_load_example_dataset_offline_error_names_dataset_and_fix(tmp_path: Path) -> None:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    code = (
        "import verifiers as vf\n"
        "try:\n    vf.load_example_dataset('gsm8k')\n"
        "except vf.ConfigError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERR could not load example dataset 'gsm8k'"), out.stdout
    assert "openai/gsm8k" in out.stdout and "split 'test'" in out.stdout and "network access" in out.stdout


# -- a 0.1.x-style environment, evaluated against a real server ------------------------------------
ENV_SOURCE = """
from datasets import Dataset

import verifiers as vf
from verifiers.utils.data_utils import BOXED_SYSTEM_PROMPT, extract_boxed_answer, extract_hash_answer


def load_environment(**kwargs) -> vf.Environment:
    raw = Dataset.from_list([
        {"question": "Q1: 6*7?", "answer": "6*7 = 42\\n#### 42"},
        {"question": "Q2: run code", "answer": "#### 1"},
        {"question": "Q3: 3+5?", "answer": "#### 8"},
        {"question": "Q4: 3*3?", "answer": "#### 9"},
    ])
    dataset = raw.map(lambda x: {"question": x["question"], "answer": extract_hash_answer(x["answer"])})
    parser = vf.XMLParser(["think", ("code", "answer")], answer_field="answer")

    def correct_answer_reward_func(completion, answer, **kwargs) -> float:
        response = parser.parse_answer(completion) or ""
        return 1.0 if extract_boxed_answer(response) == answer else 0.0

    rubric = vf.Rubric(funcs=[correct_answer_reward_func, parser.get_format_reward_func()], weights=[1.0, 0.2])
    system_prompt = BOXED_SYSTEM_PROMPT + "\\n" + parser.get_format_str()
    return vf.SingleTurnEnv(dataset=dataset, system_prompt=system_prompt, parser=parser, rubric=rubric, **kwargs)
"""

SCRIPT = ServerScript(
    replies=[
        ScriptedReply(match="Q1", content="<think>\n6*7\n</think>\n<answer>\n42\n</answer>"),
        ScriptedReply(match="Q2", content="<think>\nrun it\n</think>\n<code>\nprint(1)\n</code>"),
        ScriptedReply(match="Q3", content="Sure: <answer>7</answer>"),
        ScriptedReply(match="Q4", content="<think>t</think>\n<answer>\\boxed{9}</answer>"),
    ]
)


def test_01x_environment_evaluates_and_scores_as_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "compat_gsm_style.py").write_text(textwrap.dedent(ENV_SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    env = vf.load_environment("compat-gsm-style")
    with ScriptedServer(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        out = env.evaluate(client=client, model="scripted", num_examples=-1, rollouts_per_example=1)
    assert out.prompt[0][0]["content"].endswith("<[ code | answer ]>\n...\n</[ code | answer ]>")
    assert out.answer == ["42", "1", "8", "9"]
    # correct: Q1 yes, Q2 ran code (no answer), Q3 wrong, Q4 boxed 9.
    assert out.metrics["correct_answer_reward_func"] == [1.0, 0.0, 0.0, 1.0]
    # format (0.1.5 gives the same on these): perfect, perfect, stray text + missing think, perfect.
    assert out.metrics["format_reward_func"] == pytest.approx([1.0, 1.0, 0.6, 1.0])
    assert out.reward == pytest.approx([1.2, 0.2, 0.12, 1.2])
