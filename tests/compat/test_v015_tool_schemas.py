"""Tool schemas byte for byte as verifiers 0.1.5 sent them (issue 26).

0.1.5: ``verifiers/utils/tool_utils.py::convert_func_to_oai_tool`` wraps
``agents.function_schema(func).params_json_schema`` as ``{"type": "function",
"function": {"name", "description", "parameters", "strict": True}}``, and
``verifiers/envs/tool_env.py::ToolEnv.__init__`` / ``add_tool`` put exactly that in
``oai_tools``, which reaches the chat template. The expected text was recorded once
from 0.1.5 itself (``tests/compat/data/record_v015_tool_schemas.py``, command in its
docstring) for the functions of ``tests/compat/data/v015_tool_signatures.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import verifiers as vf
from verifiers.envs.tool_env import ToolEnv as CoreToolEnv
from verifiers.utils.tool_utils import convert_func_to_oai_tool

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))
from v015_tool_signatures import SIGNATURES  # noqa: E402

sys.path.remove(str(DATA))

RECORD = json.loads((DATA / "v015_tool_schemas.json").read_text())
SCHEMAS: dict[str, dict[str, str]] = RECORD["schemas"]
BY_NAME = {fn.__name__: fn for fn in SIGNATURES}
CONVERTED = [name for name, entry in SCHEMAS.items() if "json" in entry]
REFUSED = [name for name, entry in SCHEMAS.items() if "error" in entry]


def test_the_record_covers_every_signature() -> None:
    assert RECORD["versions"]["verifiers"] == "0.1.5"
    assert sorted(SCHEMAS) == sorted(BY_NAME)
    assert len(CONVERTED) >= 15


@pytest.mark.parametrize("name", CONVERTED)
def test_convert_func_to_oai_tool_text_is_0_1_5s(name: str) -> None:
    ours = convert_func_to_oai_tool(BY_NAME[name])
    recorded = SCHEMAS[name]["json"]
    assert json.dumps(ours) == recorded  # key order included: this text is in the prompt
    assert json.dumps(ours, sort_keys=True) == json.dumps(json.loads(recorded), sort_keys=True)
    assert json.dumps(ours, ensure_ascii=False) == json.dumps(json.loads(recorded), ensure_ascii=False)


def test_tool_env_sends_0_1_5s_schemas() -> None:
    """``vf.ToolEnv(tools=[...])``, ``add_tool`` and the module path 0.1.x imported agree with the record."""
    tools = [BY_NAME[name] for name in ("add", "search", "optional_pipe", "fetch_page")]
    env = vf.ToolEnv(tools=tools, dataset=_dataset())
    assert [json.dumps(t) for t in env.oai_tools] == [SCHEMAS[fn.__name__]["json"] for fn in tools]
    core = CoreToolEnv(tools=[], dataset=_dataset())
    core.add_tool(BY_NAME["literal"])
    assert [json.dumps(t) for t in core.oai_tools] == [SCHEMAS["literal"]["json"]]


async def test_the_request_carries_0_1_5s_text(server: Any, client: Any) -> None:
    """The schema text reaches the model: the chat request's ``tools`` as the server received it."""
    tools = [BY_NAME[name] for name in ("search", "literal", "model_param")]
    env = vf.ToolEnv(tools=tools, dataset=[{"question": "hi", "answer": "hi"}])
    await env.a_generate([{"prompt": [{"role": "user", "content": "hi"}], "answer": "hi"}], client, "m")
    sent = server.requests[0]["tools"]
    assert json.dumps(sent) == "[" + ", ".join(SCHEMAS[fn.__name__]["json"] for fn in tools) + "]"


def test_stateful_tool_env_hides_skipped_args_in_0_1_5s_format() -> None:
    """0.1.5 ``StatefulToolEnv.add_tool(tool, args_to_skip)`` deletes the skipped properties and
    their ``required`` entries from ``convert_func_to_oai_tool``'s schema; the rest is unchanged."""

    def lookup(city: str, state: Any = None, days: int = 1) -> str:
        """Look up a city.

        Args:
            city: Where.
            days: How many days.
        """
        return city

    env = vf.StatefulToolEnv(tools=[], dataset=_dataset())
    env.add_tool(lookup, args_to_skip=["state"])
    full = convert_func_to_oai_tool(lookup)
    del full["function"]["parameters"]["properties"]["state"]
    full["function"]["parameters"]["required"].remove("state")
    assert json.dumps(env.oai_tools[-1]) == json.dumps(full)


@pytest.mark.parametrize("name", REFUSED)
def test_what_0_1_5_refused_still_gets_a_schema(name: str) -> None:
    """0.1.5 raised ``agents.exceptions.UserError`` at ``ToolEnv(...)`` for a dict parameter or
    ``**kwargs`` (a strict schema cannot hold them). Deliberate difference (docs/compat.md): such
    a tool gets pydantic's schema unchanged with ``"strict": false``, and ``**kwargs`` is left out."""
    assert SCHEMAS[name]["error"] == "agents.exceptions.UserError"
    fn = convert_func_to_oai_tool(BY_NAME[name])["function"]
    if name == "varkwargs":
        assert list(fn["parameters"]["properties"]) == ["prefix"] and fn["strict"] is True
    else:
        assert fn["strict"] is False and "additionalProperties" not in fn["parameters"]


def _dataset() -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"question": "q", "answer": "a"}])
