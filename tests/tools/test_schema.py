"""tool_schema: signature + Google docstring -> OpenAI tool schema."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel

from verifiers.errors import ConfigError
from verifiers.tools.schema import parse_docstring, tool_schema


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(BaseModel):
    x: int
    y: int


class Opaque:
    """Not describable as JSON schema."""


class Shape(BaseModel):
    name: str
    points: list[Point]


def search(
    query: str,
    limit: int = 5,
    score: float = 0.5,
    exact: bool = False,
    tags: list[str] | None = None,
    weights: dict[str, float] | None = None,
    pair: tuple[int, ...] = (1, 2),
    unique: set[int] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    color: Color = Color.RED,
    level: Level | None = None,
    maybe: Optional[int] = None,  # noqa: UP045 - the typing spelling must work too
    shape: Shape | None = None,
    anything: Any = None,
    untyped=None,
    nothing: None = None,
) -> list[str]:
    """Search the corpus
    for documents.

    Longer explanation that is still summary.

    Args:
        query (str): What to look for,
            in plain words.
        limit: How many results.
        score (float): Minimum score (0-1).
        exact: Whether to match exactly.

    Returns:
        list[str]: The documents; not an argument.

    Raises:
        ValueError: never listed as an argument.
    """
    return []


def params(fn: Any, **kwargs: Any) -> dict[str, Any]:
    return tool_schema(fn, **kwargs)["function"]["parameters"]


def test_envelope_and_summary() -> None:
    schema = tool_schema(search)
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "search"
    assert schema["function"]["description"] == (
        "Search the corpus for documents. Longer explanation that is still summary."
    )
    assert schema["function"]["parameters"]["type"] == "object"


def test_scalar_types_descriptions_and_defaults() -> None:
    props = params(search)["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for, in plain words."}
    assert props["limit"] == {"type": "integer", "description": "How many results.", "default": 5}
    assert props["score"] == {"type": "number", "description": "Minimum score (0-1).", "default": 0.5}
    assert props["exact"] == {"type": "boolean", "description": "Whether to match exactly.", "default": False}
    assert props["nothing"] == {"type": "null", "default": None}


def test_container_types() -> None:
    props = params(search)["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "default": None}
    assert props["weights"] == {"type": "object", "additionalProperties": {"type": "number"}, "default": None}
    assert props["pair"] == {"type": "array", "items": {"type": "integer"}, "default": [1, 2]}
    assert props["unique"]["items"] == {"type": "integer"}
    assert props["unique"]["type"] == "array"


def test_fixed_tuple_uses_prefix_items() -> None:
    def f(p: tuple[int, str]) -> None:
        """F."""

    assert params(f)["properties"]["p"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }


def test_enums_and_literals() -> None:
    props = params(search)["properties"]
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"], "default": "fast"}
    assert props["color"] == {"type": "string", "enum": ["red", "blue"], "default": "red"}
    assert props["level"] == {"type": "integer", "enum": [1, 2], "default": None}


def test_optional_any_and_untyped() -> None:
    props = params(search)["properties"]
    assert props["maybe"] == {"type": "integer", "default": None}
    assert props["anything"] == {"default": None}
    assert props["untyped"] == {"default": None}


def test_pydantic_model_and_hoisted_defs() -> None:
    parameters = params(search)
    shape = parameters["properties"]["shape"]
    assert shape["type"] == "object"
    assert shape["properties"]["points"]["items"] == {"$ref": "#/$defs/Point"}
    assert parameters["$defs"]["Point"]["properties"]["x"]["type"] == "integer"


def test_required_only_without_defaults() -> None:
    def f(a: int, b: str | None, c: int = 1) -> None:
        """F."""

    assert params(f)["required"] == ["a", "b"]
    assert params(search)["required"] == ["query"]


def test_unions_and_annotated() -> None:
    def f(a: int | str, b: Annotated[int, "How many."]) -> None:
        """F."""

    props = params(f)["properties"]
    assert props["a"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["b"] == {"type": "integer", "description": "How many."}


def test_non_json_default_is_left_out() -> None:
    def f(a: int = 1, b: object = object()) -> None:
        """F."""

    props = params(f)["properties"]
    assert props["a"]["default"] == 1
    assert "default" not in props["b"]
    assert params(f)["required"] == []


def test_skipped_self_varargs_and_named() -> None:
    class Box:
        def put(self, item: str, state: dict, *args: Any, **kwargs: Any) -> None:
            """Put an item.

            Arguments:
                item: The item.
                state: Hidden.
            """

    schema = tool_schema(Box.put, args_to_skip=["state", "not_a_param"])
    parameters = schema["function"]["parameters"]
    assert list(parameters["properties"]) == ["item"]
    assert parameters["required"] == ["item"]
    assert params(Box().put, args_to_skip=["state"])["required"] == ["item"]


async def test_async_function() -> None:
    async def fetch(url: str, retries: int = 3) -> str:
        """Fetch a URL.

        Args:
            url: Where from.
        """
        return url

    schema = tool_schema(fetch)
    assert schema["function"]["name"] == "fetch"
    assert schema["function"]["description"] == "Fetch a URL."
    assert schema["function"]["parameters"]["required"] == ["url"]
    assert await fetch("x") == "x"


def test_no_docstring() -> None:
    def bare(x: int) -> int:
        return x

    schema = tool_schema(bare)
    assert schema["function"]["description"] == ""
    assert schema["function"]["parameters"]["properties"] == {"x": {"type": "integer"}}


def test_lambda_is_rejected() -> None:
    with pytest.raises(ConfigError, match="a lambda"):
        tool_schema(lambda x: x)


def test_partial_and_non_callables_are_rejected() -> None:
    import functools

    with pytest.raises(ConfigError, match="__name__"):
        tool_schema(functools.partial(search, "q"))
    with pytest.raises(ConfigError, match="not callable"):
        tool_schema(42)  # type: ignore[arg-type]


def test_bad_types_are_rejected() -> None:
    def int_keys(d: dict[int, str]) -> None:
        """F."""

    def positional(a: int, /) -> None:
        """F."""

    def opaque(o: Opaque) -> None:
        """F."""

    with pytest.raises(ConfigError, match="keys must be str"):
        tool_schema(int_keys)
    with pytest.raises(ConfigError, match="positional-only"):
        tool_schema(positional)
    with pytest.raises(ConfigError, match="cannot be expressed"):
        tool_schema(opaque)


def test_unresolvable_hint_is_a_config_error() -> None:
    class Local:
        pass

    def f(x: Local) -> None:
        """F."""

    with pytest.raises(ConfigError, match="module level"):
        tool_schema(f)


def test_parse_docstring_sections() -> None:
    summary, args = parse_docstring(
        """Do it.

        Args:
            a (dict(str, int)): First
                and more.
            *rest: Extra.

        Examples:
            b: not an argument
        """
    )
    assert summary == "Do it."
    assert args == {"a": "First and more.", "rest": "Extra."}
