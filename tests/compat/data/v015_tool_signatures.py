"""Tool functions whose 0.1.5 schemas are recorded in ``v015_tool_schemas.json``.

Shared by the recorder (``record_v015_tool_schemas.py``, run with verifiers 0.1.5
installed) and the test (``tests/compat/test_v015_tool_schemas.py``, run with this
toolkit), so both convert exactly the same functions. The set covers what 0.1.x tool
authors write: defaults, ``Optional``/``X | None``, lists, dicts, ``Literal``, missing
hints, ``*args``/``**kwargs``, Google docstrings (multi-line summaries and argument
descriptions, other sections), no docstring and async functions.

Only the standard library and pydantic here: the recorder's interpreter imports this
file too.
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, Field


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int


class Shape(BaseModel):
    name: str
    points: list[Point]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum.
    """
    return a + b


def search(query: str, limit: int = 5, exact: bool = False, min_score: float = 0.5) -> list[str]:
    """Search the corpus for documents.

    A longer explanation on a second paragraph,
    spread over two lines.

    Args:
        query (str): What to look for,
            in plain words.
        limit (int): How many results.
        exact: Whether to match exactly.
        min_score: Lowest score kept.

    Returns:
        list[str]: The documents.

    Raises:
        ValueError: Never.
    """
    return []


def optional_typing(n: Optional[int] = None, label: Union[str, None] = None) -> str:  # noqa: UP007, UP045
    """Optional parameters spelled with typing.

    Args:
        n: A number, or nothing.
        label: A label, or nothing.
    """
    return str(n)


def optional_pipe(n: int | None = None, tags: list[str] | None = None) -> str:
    """Optional parameters spelled with a pipe.

    Args:
        n: A number, or nothing.
        tags: Tags, or nothing.
    """
    return str(n)


def required_optional(n: int | None) -> str:
    """A required parameter that may be null."""
    return str(n)


def lists(names: list[str], weights: list[float], ids: list[int] = [1, 2]) -> int:  # noqa: B006
    """Lists with and without a default.

    Args:
        names: Names to use.
        weights: One weight per name.
        ids: Identifiers.
    """
    return len(names)


def nested_lists(grid: list[list[int]], pairs: tuple[int, int] = (0, 0)) -> int:
    """Nested lists and a fixed tuple."""
    return len(grid)


def mapping(options: dict[str, int]) -> int:
    """A dict parameter (0.1.5: a strict schema cannot hold it)."""
    return len(options)


def literal(mode: Literal["fast", "slow"] = "fast", level: Literal[1, 2, 3] = 1) -> str:
    """Choose a mode.

    Args:
        mode: How fast to go.
        level: How hard to try.
    """
    return mode


def no_hints(x, y=3, z="text"):
    """No type hints at all.

    Args:
        x: Anything.
        y: A number by default.
    """
    return x


def varargs(*args: int) -> int:
    """Positional varargs.

    Args:
        *args: Numbers to add.
    """
    return sum(args)


def varkwargs(prefix: str, **kwargs: str) -> str:
    """Keyword varargs (0.1.5: a strict schema cannot hold them)."""
    return prefix


def scalars(flag: bool, ratio: float, count: int = 0, name: str = "x") -> str:
    """Every JSON scalar."""
    return name


def no_docstring(city: str, days: int = 1) -> str:
    return city


def args_only(city: str) -> str:
    """
    Args:
        city: Where.
    """
    return city


def multiline_arg(path: str, recursive: bool = True) -> list[str]:
    """List files.

    Args:
        path: Directory to list. Relative paths are
            resolved against the working directory.

            A blank line inside a description.
        recursive: Descend into subdirectories.

    Example:
        list_files("/tmp")
    """
    return [path]


def note_section(code: str) -> str:
    """Run Python code.

    Note:
        The code runs in a sandbox.

    Args:
        code: The source.
    """
    return code


def args_without_blank(text: str) -> str:
    """Count words.
    Args:
        text: The text to count.
    """
    return text


def typed_arg_doc(n: int, unit: str = "m") -> str:
    """Format a length.

    Arguments:
        n (int): The number.
        unit (str, optional): The unit. Defaults to "m".
    """
    return f"{n}{unit}"


async def fetch_page(url: str, timeout: float = 10.0) -> str:
    """Fetch a page asynchronously.

    Args:
        url: The address.
        timeout: Seconds to wait.
    """
    return url


def any_typed(value: object, payload: dict = {}) -> str:  # noqa: B006
    """Loosely typed parameters."""
    return str(value)


def defaults_of_each_kind(a: str = "", b: int = -1, c: float = 1e-3, d: bool = True, e: None = None) -> str:
    """Defaults of each kind."""
    return a


def unicode_doc(word: str) -> str:
    """Übersetze ein Wort — “quoted”.

    Args:
        word: Das Wort.
    """
    return word


def sphinx_style(x: int, y: int) -> int:
    """Multiply two numbers.

    :param x: First factor.
    :param y: Second factor.
    :return: The product.
    """
    return x * y


def enum_param(color: Color = Color.RED, other: Color | None = None) -> str:
    """Paint.

    Args:
        color: The colour.
    """
    return "x"


def model_param(shape: Shape, origin: Point | None = None) -> int:
    """Measure a shape.

    Args:
        shape: The shape to measure.
    """
    return 0


def union_annotated(a: int | str, b: Annotated[int, "How many."], c: Annotated[str, "Ignored: docstring wins."] = "") -> str:
    """Unions and Annotated descriptions.

    Args:
        c: From the docstring.
    """
    return str(a)


def returns_first(q: str, n: int = 2) -> list[str]:
    """Sections in another order.

    Returns:
        The matches.

    Raises:
        ValueError: On an empty query.

    Args:
        q: The query.
        n: How many.
    """
    return [q]


def fenced_example(expr: str) -> str:
    """Evaluate an expression.

    ```
    Args:
        not: an argument, inside a code fence
    ```

    Args:
        expr: A Python expression.
    """
    return expr


def pydantic_fields(
    count: Annotated[int, Field(ge=0, description="How many (annotated).")],
    ratio: float = Field(0.5, ge=0, le=1, description="A share."),
    level: Level = Level.LOW,
) -> str:
    """Constraints from pydantic Field.

    Args:
        ratio: The share from the docstring.
    """
    return str(count)


def typed_varargs(*names: str, sep: str = ",") -> str:
    """Join names.

    Args:
        *names: The names.
        sep: The separator.
    """
    return sep.join(names)


def keyword_only(a: int, *, b: int = 2, c: str | None = None) -> int:
    """Keyword-only parameters.

    Args:
        a: First.
        b: Second.
        c: Third.
    """
    return a + b


def trailing_text(x: int) -> int:
    """Summary line.

    Args:
        x: The number.

    More text after the arguments.
    """
    return x


SIGNATURES = [
    add,
    search,
    optional_typing,
    optional_pipe,
    required_optional,
    lists,
    nested_lists,
    mapping,
    literal,
    no_hints,
    varargs,
    varkwargs,
    scalars,
    no_docstring,
    args_only,
    multiline_arg,
    note_section,
    args_without_blank,
    typed_arg_doc,
    fetch_page,
    any_typed,
    defaults_of_each_kind,
    unicode_doc,
    sphinx_style,
    enum_param,
    model_param,
    union_annotated,
    returns_first,
    fenced_example,
    pydantic_fields,
    typed_varargs,
    keyword_only,
    trailing_text,
]
