"""tool_schema: signature + docstring -> OpenAI tool schema, in verifiers 0.1.x's text.

The byte-for-byte comparison with 0.1.5 is tests/compat/test_v015_tool_schemas.py;
these tests pin the rules one by one.
"""

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


def test_envelope_and_description() -> None:
    schema = tool_schema(search)
    assert schema["type"] == "function"
    assert list(schema["function"]) == ["name", "description", "parameters", "strict"]
    assert schema["function"]["name"] == "search"
    # 0.1.x kept the first text block's line breaks
    assert schema["function"]["description"] == (
        "Search the corpus\nfor documents.\n\nLonger explanation that is still summary."
    )
    assert schema["function"]["strict"] is True
    parameters = schema["function"]["parameters"]
    assert parameters["title"] == "search_args" and parameters["type"] == "object"
    assert parameters["additionalProperties"] is False


def test_scalar_types_descriptions_and_defaults() -> None:
    props = params(search)["properties"]
    assert props["query"] == {"description": "What to look for,\nin plain words.", "title": "Query", "type": "string"}
    assert props["limit"] == {"default": 5, "description": "How many results.", "title": "Limit", "type": "integer"}
    assert props["score"] == {"default": 0.5, "description": "Minimum score (0-1).", "title": "Score", "type": "number"}
    assert props["exact"]["default"] is False and props["exact"]["type"] == "boolean"
    assert props["nothing"] == {"title": "Nothing", "type": "null"}  # null defaults are dropped


def test_container_types() -> None:
    props = params(search)["properties"]
    assert props["tags"] == {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}], "title": "Tags"}
    assert props["pair"] == {"default": [1, 2], "items": {"type": "integer"}, "title": "Pair", "type": "array"}
    assert props["unique"]["anyOf"][0] == {"items": {"type": "integer"}, "type": "array", "uniqueItems": True}


def test_fixed_tuple_uses_prefix_items() -> None:
    def f(p: tuple[int, str]) -> None:
        """F."""

    assert params(f)["properties"]["p"] == {
        "maxItems": 2,
        "minItems": 2,
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "title": "P",
        "type": "array",
    }


def test_enums_and_literals() -> None:
    parameters = params(search)
    props = parameters["properties"]
    assert props["mode"] == {"default": "fast", "enum": ["fast", "slow"], "title": "Mode", "type": "string"}
    # a $ref with a sibling (the default) is inlined, as openai-agents' strict schema did
    assert props["color"] == {"default": "red", "enum": ["red", "blue"], "title": "Color", "type": "string"}
    assert props["level"] == {"anyOf": [{"$ref": "#/$defs/Level"}, {"type": "null"}]}
    assert parameters["$defs"]["Level"] == {"enum": [1, 2], "title": "Level", "type": "integer"}


def test_optional_any_and_untyped() -> None:
    props = params(search)["properties"]
    assert props["maybe"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "title": "Maybe"}
    assert props["anything"] == {"title": "Anything"}
    assert props["untyped"] == {"title": "Untyped"}


def test_pydantic_model_defs_are_strict() -> None:
    parameters = params(search)
    assert parameters["properties"]["shape"] == {"anyOf": [{"$ref": "#/$defs/Shape"}, {"type": "null"}]}
    shape = parameters["$defs"]["Shape"]
    assert shape["properties"]["points"]["items"] == {"$ref": "#/$defs/Point"}
    assert shape["additionalProperties"] is False
    assert parameters["$defs"]["Point"]["required"] == ["x", "y"]


def test_every_parameter_is_required_in_strict_mode() -> None:
    def f(a: int, b: str | None, c: int = 1) -> None:
        """F."""

    assert params(f)["required"] == ["a", "b", "c"]
    assert params(search)["required"] == list(params(search)["properties"])


def test_dicts_make_the_schema_non_strict() -> None:
    """0.1.x refused these (openai-agents UserError); here pydantic's schema is sent non-strict."""

    def f(weights: dict[str, float], limit: int = 3) -> None:
        """F."""

    fn = tool_schema(f)["function"]
    assert fn["strict"] is False
    assert fn["parameters"] == {
        "properties": {
            "weights": {"additionalProperties": {"type": "number"}, "title": "Weights", "type": "object"},
            "limit": {"default": 3, "title": "Limit", "type": "integer"},
        },
        "required": ["weights"],
        "title": "f_args",
        "type": "object",
    }


def test_unions_and_annotated() -> None:
    def f(a: int | str, b: Annotated[int, "How many."]) -> None:
        """F."""

    props = params(f)["properties"]
    assert props["a"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "title": "A"}
    assert props["b"] == {"description": "How many.", "title": "B", "type": "integer"}


def test_non_json_default_is_left_out() -> None:
    def f(a: int = 1, b: object = object()) -> None:
        """F."""

    with pytest.warns(UserWarning, match="not JSON serializable"):
        props = params(f)["properties"]
    assert props["a"]["default"] == 1
    assert "default" not in props["b"]


def test_skipped_self_varargs_and_named() -> None:
    class Box:
        def put(self, item: str, state: int, *args: Any, **kwargs: Any) -> None:
            """Put an item.

            Arguments:
                item: The item.
                state: Hidden.
            """

    schema = tool_schema(Box.put, args_to_skip=["state", "not_a_param"])
    parameters = schema["function"]["parameters"]
    # *args is a list property (as 0.1.x), **kwargs is left out (0.1.x refused it)
    assert list(parameters["properties"]) == ["item", "args"]
    assert parameters["required"] == ["item", "args"]
    assert params(Box().put, args_to_skip=["state"])["required"] == ["item", "args"]


def test_skipped_parameter_that_cannot_be_described() -> None:
    def f(x: int, sandbox: Opaque) -> None:
        """F."""

    fn = tool_schema(f, args_to_skip=["sandbox"])["function"]
    assert fn["strict"] is True and list(fn["parameters"]["properties"]) == ["x"]


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
    assert schema["function"]["parameters"]["required"] == ["url", "retries"]
    assert await fetch("x") == "x"


def test_no_docstring() -> None:
    def bare(x: int) -> int:
        return x

    schema = tool_schema(bare)
    assert schema["function"]["description"] == ""
    assert schema["function"]["parameters"]["properties"] == {"x": {"title": "X", "type": "integer"}}


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
    def positional(a: int, /) -> None:
        """F."""

    def opaque(o: Opaque) -> None:
        """F."""

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
    import inspect

    description, args = parse_docstring(
        inspect.cleandoc(
            """Do it.

            Args:
                a (dict(str, int)): First
                    and more.
                *rest: Extra.

            Examples:
                b: not an argument
            """
        )
    )
    assert description == "Do it."
    assert args == {"a": "First\nand more.", "rest": "Extra."}


def test_parse_docstring_sphinx_and_admonitions() -> None:
    assert parse_docstring("Multiply.\n\n:param x: First.\n:param int y: Second.\n:return: Product.") == (
        "Multiply.",
        {"x": "First.", "y": "Second."},
    )
    # an admonition (Note:) ends the description; Args: right under text still counts
    assert parse_docstring("Run.\n\nNote:\n    Sandboxed.\n\nMore.\nArgs:\n    c: Code.") == ("Run.", {"c": "Code."})
    assert parse_docstring(None) == ("", {})
