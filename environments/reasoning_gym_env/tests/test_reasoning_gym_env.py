"""reasoning-gym: datasets by name and in mixes, disjoint splits, reasoning-gym's own scorer end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from reasoning_gym_env import available_datasets, dataset_options, load_environment

import verifiers as vf
from verifiers.errors import ConfigError
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript, check_environment

ROOT = Path(__file__).resolve().parents[3]
FAMILIES = ["chain_sum", "letter_counting", "spell_backward", "gsm_symbolic", "leg_counting", "word_sorting"]


def answering_script(rows: list[dict], wrong: set[int]) -> ServerScript:
    """A server that answers each question right inside <answer> tags, except the rows in ``wrong``."""
    replies = [ScriptedReply(match=re.escape(r["question"][-200:]) + r"\Z",
                             content=f"Let me think.\n<answer>{'nope' if i in wrong else r['answer']}</answer>")
               for i, r in enumerate(rows)]
    return ServerScript(replies=[*replies, ScriptedReply(content="no idea")])


@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_is_scored_by_its_own_scorer_over_http(name: str) -> None:
    env = load_environment(dataset=name, size=8, num_eval_examples=4, seed=3)
    rows = env.eval_dataset.rows
    with ScriptedServer(answering_script(rows, wrong={1})) as srv:
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=4)
    by_id = dict(zip(out.example_id, out.reward, strict=True))
    assert [by_id[i] for i in (0, 2, 3)] == [1.0, 1.0, 1.0]
    assert by_id[1] < 0.5  # "nope": some scorers give partial credit by similarity (spell_backward: 0.25)
    assert all(r.metrics["answered"] == 1.0 for r in out.results)
    assert {r.task for r in out.results} == {name}


def test_the_boxed_format_asks_for_and_reads_a_box_and_nothing_else() -> None:
    env = load_environment(dataset="leg_counting", size=8, num_eval_examples=4, seed=3, answer_format="boxed")
    assert "\\boxed{}" in env.system_prompt
    rows = env.eval_dataset.rows
    boxed = [ScriptedReply(match=re.escape(r["question"][-200:]) + r"\Z", content=content)
             for r, content in zip(rows, [f"\\boxed{{{rows[0]['answer']}}}", f"<answer>{rows[1]['answer']}</answer>",
                                          f"Maybe \\boxed{{0}}, no: \\boxed{{ {rows[2]['answer']} }}", "nope"],
                                   strict=True)]
    with ScriptedServer(ServerScript(replies=boxed)) as srv:
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=4)
    by_id = dict(zip(out.example_id, out.results, strict=True))
    # the last box counts; reasoning-gym's tags are not the asked format, so they earn nothing here
    assert [by_id[i].reward for i in range(4)] == [1.0, 0.0, 1.0, 0.0]
    assert [by_id[i].metrics["answered"] for i in range(4)] == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(ConfigError, match="answer_format must be one of answer_tags, boxed, number"):
        load_environment(dataset="leg_counting", size=8, answer_format="xml")


def test_the_number_format_reads_the_number_a_reader_sees_boxed_or_plain() -> None:
    env = load_environment(dataset="chain_sum", size=8, num_eval_examples=4, seed=3, answer_format="number")
    rows = env.eval_dataset.rows
    wrong = str(int(rows[3]["answer"]) + 1)
    contents = [f"The sum is {rows[0]['answer']}.", f"\\boxed{{{rows[1]['answer']}}}", "I cannot say.",
                f"It is {rows[3]['answer']}, no, {wrong}"]
    replies = [ScriptedReply(match=re.escape(r["question"][-200:]) + r"\Z", content=c)
               for r, c in zip(rows, contents, strict=True)]
    with ScriptedServer(ServerScript(replies=replies)) as srv:
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=4)
    by_id = dict(zip(out.example_id, out.results, strict=True))
    assert [by_id[i].reward for i in range(4)] == [1.0, 1.0, 0.0, 0.0]  # the last number stated counts
    assert [by_id[i].metrics["answered"] for i in range(4)] == [1.0, 1.0, 0.0, 1.0]


def test_the_number_format_scores_off_the_main_thread_where_a_trainer_scores() -> None:
    """vf-train scores rewards on a worker thread, where math-verify's own timeout (SIGALRM) raises:
    every rollout of a real run's first step failed so. Reading and scoring must work there."""
    from concurrent.futures import ThreadPoolExecutor

    from reasoning_gym_env import read_number

    env = load_environment(dataset="chain_sum", size=8, num_eval_examples=2, seed=3, answer_format="number")
    rows = env.eval_dataset.rows
    replies = [ScriptedReply(match=re.escape(r["question"][-200:]) + r"\Z", content=f"So it is {r['answer']}.")
               for r in rows]
    with ThreadPoolExecutor(1) as pool, ScriptedServer(ServerScript(replies=replies)) as srv:
        assert pool.submit(read_number, "so the total is 12.").result() == "12"
        out = pool.submit(env.evaluate, vf.make_client(srv.base_url, max_retries=0), "m", num_examples=2).result()
    assert [r.reward for r in out.results] == [1.0, 1.0]
    assert [r.metrics["answered"] for r in out.results] == [1.0, 1.0]


def test_a_weighted_mix_is_scored_by_the_dataset_each_problem_came_from() -> None:
    env = load_environment(dataset={"chain_sum": 1, "spell_backward": 3}, size=40, num_eval_examples=8, seed=0)
    tasks = [r["task"] for r in env.dataset.rows]
    assert set(tasks) == {"chain_sum", "spell_backward"} and tasks.count("spell_backward") > tasks.count("chain_sum")
    rows = env.eval_dataset.rows
    with ScriptedServer(answering_script(rows, wrong=set())) as srv:
        out = env.evaluate(vf.make_client(srv.base_url, max_retries=0), "m", num_examples=8)
    assert out.reward == [1.0] * 8


def test_splits_are_disjoint_and_fixed_by_the_seed() -> None:
    a = load_environment(dataset="chain_sum", size=300, num_eval_examples=50, seed=7)
    b = load_environment(dataset="chain_sum", size=300, num_eval_examples=50, seed=7)
    c = load_environment(dataset="chain_sum", size=300, num_eval_examples=50, seed=8)
    train = {r["question"] for r in a.dataset.rows}
    assert not train & {r["question"] for r in a.eval_dataset.rows}
    assert [r["question"] for r in a.eval_dataset.rows] == [r["question"] for r in b.eval_dataset.rows]
    # neighbouring seeds give other problems, not the same ones shifted by one (reasoning-gym's own
    # seeds s and s+1 share all but one item): three seeds of a run are three samples of the task
    for split in ("dataset", "eval_dataset"):
        seven = {r["question"] for r in getattr(a, split).rows}
        eight = {r["question"] for r in getattr(c, split).rows}
        assert len(seven & eight) <= 0.05 * len(seven), split
    # a problem space too small for both splits is refused, not silently overlapped
    tiny = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "allow_negation": False}
    with pytest.raises(ConfigError, match="problem space is too small"):
        load_environment(dataset="chain_sum", config=tiny, size=400, num_eval_examples=100)


def test_bad_names_and_options_name_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"no dataset 'chain_summ' \(did you mean chain_sum.*the datasets are: ab, "):
        load_environment(dataset="chain_summ")
    with pytest.raises(ConfigError, match=r"'chain_sum' has no option.*'digits'.*options are: min_terms, max_terms"):
        load_environment(dataset="chain_sum", config={"digits": 3})
    with pytest.raises(ConfigError, match="seed and size are the environment's own arguments"):
        load_environment(dataset="chain_sum", config={"seed": 3})
    with pytest.raises(ConfigError, match="rejected the config of chain_sum: max_terms must be >= min_terms"):
        load_environment(dataset="chain_sum", config={"min_terms": 5, "max_terms": 2})
    with pytest.raises(ConfigError, match="weight of 'leg_counting' must be a positive number"):
        load_environment(dataset={"chain_sum": 1, "leg_counting": 0})
    with pytest.raises(ConfigError, match="config applies to one dataset"):
        load_environment(dataset=["chain_sum", "leg_counting"], config={"min_terms": 2})
    with pytest.raises(ConfigError, match="prompt_style must be one of"):
        load_environment(prompt_style="shouty")
    assert "gsm_symbolic" in available_datasets() and "composite" not in available_datasets()
    assert "min_digits" in dataset_options("chain_sum") and "seed" not in dataset_options("chain_sum")


@pytest.mark.parametrize("dataset", ["chain_sum", {"leg_counting": 1, "countdown": 1}])
def test_environment_passes_the_checker(dataset: object) -> None:
    report = check_environment(load_environment(dataset=dataset, size=8, num_eval_examples=4))
    assert report.ok, report


def test_the_id_loads_from_a_clone_although_the_library_owns_the_module_name(tmp_path: Path) -> None:
    """`reasoning_gym` is the library; the environment is environments/reasoning_gym_env, found by the loader."""
    code = ("import verifiers as vf; e = vf.load_environment('reasoning-gym', dataset='leg_counting', size=3, "
            "num_eval_examples=2); print(type(e).__name__, e.env_id, len(e.dataset.rows))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["SingleTurnEnv", "reasoning-gym", "3"]
