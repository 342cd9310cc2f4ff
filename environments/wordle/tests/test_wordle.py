"""wordle: the scoring rules, the reward functions, and whole games against the scripted server."""

from __future__ import annotations

import inspect

import pytest
import wordle
from wordle import correct_answer, efficiency, load_words, partial_credit, read_guess, replay, score_guess

import verifiers as vf
import verifiers.testing
from verifiers.testing import ScriptedReply, ScriptedServer, ServerScript

PARSER = vf.XMLParser(["think", "guess"], answer_field="guess")
INFO = {"max_guesses": 6}


def small_env(**kwargs: object) -> vf.Environment:
    args: dict[str, object] = {"num_train_examples": 30, "num_eval_examples": 5, "seed": 11}
    args.update(kwargs)
    return wordle.load_environment(**args)


def reply(word: str) -> str:
    return f"<think>trying {word}</think>\n<guess>{word}</guess>"


def transcript(*replies: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for text in replies:
        out += [{"role": "assistant", "content": text}, {"role": "user", "content": "feedback"}]
    return out


def other_word(secret: str, avoid: str = "") -> str:
    return next(w for w in load_words() if w not in (secret, avoid) and not set(w) & set(secret))


# -- rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("guess", "secret", "feedback"),
    [
        ("crane", "crane", "GGGGG"),
        ("slate", "crane", "XXGXG"),
        ("eerie", "crane", "XXYXG"),  # only one E in the secret: the green one
        ("kebab", "abbey", "XYGYY"),
        ("bobby", "abbey", "YXGXG"),  # three Bs guessed, two in the secret
        ("tatty", "tacit", "GGYXX"),  # the green T is settled before the yellow one
        ("speed", "abide", "XXYXY"),  # one E yellow, the other absent
        ("llama", "hello", "YYXXX"),
        ("mummy", "humor", "XGGXX"),  # the green M uses up the only M
    ],
)
def test_score_guess_handles_repeated_letters(guess: str, secret: str, feedback: str) -> None:
    assert score_guess(guess, secret) == feedback


def test_read_guess() -> None:
    assert read_guess(reply("Crane"), PARSER) == ("crane", None)
    assert read_guess("<guess> slate </guess>", PARSER) == ("slate", None)
    for text, why in [
        ("crane", "no <guess>"),
        ("<guess>cranes</guess>", "exactly 5"),
        ("<guess>cr4ne</guess>", "letters a-z"),
        ("<guess>éclat</guess>", "letters a-z"),
        ("<guess> </guess>", "empty"),
    ]:
        guess, problem = read_guess(text, PARSER)
        assert guess is None and problem is not None and why in problem, (text, problem)


def test_word_list_is_bundled() -> None:
    words = load_words()
    assert len(words) >= 250 and len(set(words)) == len(words)
    assert all(len(w) == 5 and w.isalpha() and w.islower() for w in words)


# -- rewards -------------------------------------------------------------------------------


def test_rewards_for_a_win() -> None:
    completion = transcript(reply("slate"), "<guess>oops</guess>", reply("crane"))
    record = replay(completion, "crane", PARSER, 6)
    assert record.guesses == ["slate", "crane"] and record.attempts == 3 and record.solved_at == 3
    assert correct_answer(completion, "crane", INFO, PARSER) == 1.0
    assert partial_credit(completion, "crane", INFO, PARSER) == 0.0
    assert efficiency(completion, "crane", INFO, PARSER) == pytest.approx(4 / 6)
    assert efficiency(transcript(reply("crane")), "crane", INFO, PARSER) == 1.0
    assert efficiency(
        transcript(*[reply("slate")] * 5, reply("crane")), "crane", INFO, PARSER
    ) == pytest.approx(1 / 6)


def test_rewards_for_a_loss() -> None:
    completion = transcript(reply("slate"), reply("crank"), reply("crate"))
    assert correct_answer(completion, "crane", {"max_guesses": 3}, PARSER) == 0.0
    assert efficiency(completion, "crane", {"max_guesses": 3}, PARSER) == 0.0
    # best guess CRANK / CRATE: 4 greens -> 0.8
    assert partial_credit(completion, "crane", {"max_guesses": 3}, PARSER) == pytest.approx(0.8)
    assert partial_credit(transcript(reply("nacre")), "crane", INFO, PARSER) == pytest.approx(0.1 * 4 + 0.2)
    assert partial_credit(transcript("no tags here"), "crane", INFO, PARSER) == 0.0
    # a correct word after the guesses ran out does not count
    late = transcript(reply("slate"), reply("crane"))
    assert correct_answer(late, "crane", {"max_guesses": 1}, PARSER) == 0.0


# -- data ----------------------------------------------------------------------------------


def test_data_is_seeded_sized_and_disjoint() -> None:
    a, b, c = small_env(), small_env(), small_env(seed=12)
    assert len(a.dataset) == 30 and len(a.eval_dataset) == 5
    assert a.dataset["answer"] == b.dataset["answer"] and a.eval_dataset["answer"] == b.eval_dataset["answer"]
    assert a.eval_dataset["answer"] != c.eval_dataset["answer"]
    assert len(set(a.eval_dataset["answer"])) == 5
    assert not set(a.dataset["answer"]) & set(a.eval_dataset["answer"])
    assert all(r["info"] == {"max_guesses": 6} for r in a.dataset)
    many = small_env(num_train_examples=1000, num_eval_examples=10)
    assert len(many.dataset) == 1000 and len(set(many.dataset["answer"])) == len(load_words()) - 10
    with pytest.raises(ValueError):
        small_env(num_eval_examples=len(load_words()))


# -- games over HTTP -----------------------------------------------------------------------


async def test_a_winning_game_ends_on_the_correct_guess() -> None:
    env = small_env()
    secret = env.eval_dataset[0]["answer"]
    first = other_word(secret)
    script = ServerScript(
        replies=[ScriptedReply(turn=0, content=reply(first)), ScriptedReply(content=reply(secret))]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=1)
    assert out.error == [None] and out.stop_reason == ["completed"]
    completion, state = out.completion[0], out.state[0]
    assert [m["role"] for m in completion] == ["assistant", "user", "assistant", "user"]
    assert f"Guess 1/6: {' '.join(first.upper())}" in completion[1]["content"]
    assert "Feedback:  X X X X X" in completion[1]["content"]
    assert "5 guesses left" in completion[1]["content"]
    assert "Feedback:  G G G G G" in completion[3]["content"]
    assert f"Correct! You found {secret.upper()} in 2 guesses." in completion[3]["content"]
    assert state["solved"] is True and state["guesses"] == [first, secret]
    assert state["feedback"] == ["XXXXX", "GGGGG"]
    assert state["final_feedback"] == completion[-1]["content"]
    assert out.metrics["correct_answer"] == [1.0]
    assert out.metrics["partial_credit"] == [0.0]
    assert out.metrics["efficiency"] == [pytest.approx(5 / 6)]
    assert out.metrics["format_reward_func"] == [1.0]
    assert out.reward == [pytest.approx(1.0 + 0.5 * 5 / 6 + 0.2)]
    assert srv.n_requests == 2  # the game did not ask for a third guess


async def test_a_lost_game_ends_with_the_final_feedback() -> None:
    env = small_env(max_guesses=4)
    secret = env.eval_dataset[0]["answer"]
    wrong = next(w for w in load_words() if w != secret and score_guess(w, secret).count("G") == 2)
    script = ServerScript(
        replies=[
            ScriptedReply(turn=0, content="<think>hmm</think><guess>abc</guess>"),
            ScriptedReply(turn=1, content="I think it is crane"),
            ScriptedReply(content=reply(wrong)),
        ]
    )
    async with ScriptedServer(script) as srv:
        out = await env.a_evaluate(vf.make_client(srv.base_url), "scripted", num_examples=1)
    assert out.error == [None] and out.stop_reason == ["completed"]
    completion, state = out.completion[0], out.state[0]
    assert [m["role"] for m in completion] == ["assistant", "user"] * 4
    assert "Guess 1/4 is invalid" in completion[1]["content"] and "exactly 5" in completion[1]["content"]
    assert "3 guesses left" in completion[1]["content"]
    assert "no <guess>" in completion[3]["content"] and "2 guesses left" in completion[3]["content"]
    assert "1 guess left" in completion[5]["content"]
    final = completion[-1]["content"]
    assert f"The word was {secret.upper()}." in final
    assert state["final_feedback"] == final
    assert state["solved"] is False and state["guesses"] == [wrong, wrong]
    assert state["attempts"] == 4 and state["invalid_guesses"] == 2
    assert srv.n_requests == 4
    expected_partial = min(1.0, 0.2 * 2 + 0.1 * score_guess(wrong, secret).count("Y"))
    assert out.metrics["correct_answer"] == [0.0]
    assert out.metrics["efficiency"] == [0.0]
    assert out.metrics["partial_credit"] == [pytest.approx(expected_partial)]
    # format: three well-formed replies (an invalid word is still well formed), one without tags
    assert out.metrics["format_reward_func"] == [pytest.approx(3 / 4)]
    assert out.reward == [pytest.approx(0.5 * expected_partial + 0.2 * 3 / 4)]


async def test_load_by_id() -> None:
    env = vf.load_environment("wordle", num_train_examples=3, num_eval_examples=2, max_guesses=3)
    assert env.env_id == "wordle"
    assert env.max_guesses == 3 and env.max_turns == 4
    assert len(env.dataset) == 3 and len(env.eval_dataset) == 2


async def test_check_environment() -> None:
    testing = verifiers.testing
    if not hasattr(testing, "check_environment"):
        pytest.skip("verifiers.testing.check_environment is not available yet")
    check = getattr(testing, "a_check_environment", None) or testing.check_environment
    report = check(small_env())
    if inspect.isawaitable(report):
        report = await report
    assert getattr(report, "ok", True), report
