"""Read a tool's docstring the way verifiers 0.1.x did, for the schema text the model sees.

0.1.x built tool schemas with ``openai-agents``, which parses docstrings with
``griffe``: the style is guessed (Sphinx ``:param x:``, NumPy underlined headers,
otherwise Google ``Args:``), the description is the first text block *with its line
breaks*, and each argument's description keeps its continuation lines. A model
trained on those schemas saw that exact text, so this module reproduces it without
depending on either package. NumPy-style docstrings are read as Google-style (their
parameter descriptions are not picked up).
"""

from __future__ import annotations

import inspect
import re

__all__ = ["DocInfo", "parse_tool_docstring"]

_PARAM_SECTIONS = frozenset({"args", "arguments", "params", "parameters"})
# griffe's Google section titles; any other "Word:" header is an admonition (Note:, Example:, ...)
_SECTIONS = _PARAM_SECTIONS | frozenset(
    {
        "keyword args", "keyword arguments", "other args", "other arguments", "other params",
        "other parameters", "type args", "type arguments", "type params", "type parameters",
        "raises", "exceptions", "returns", "yields", "receives", "examples", "attributes",
        "functions", "methods", "classes", "type aliases", "modules", "warns", "warnings",
    }
)  # fmt: skip
_ADMONITION_RE = re.compile(r"^(?P<type>[\w][\s\w-]*):(\s+(?P<title>[^\s].*))?\s*$", re.IGNORECASE)
_GOOGLE_PARAM_HEADER_RE = re.compile(r"^(args|arguments|params|parameters):\s*$", re.IGNORECASE)
_SPHINX_PARAM_FIELDS = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})
_SPHINX_FIELDS = _SPHINX_PARAM_FIELDS | frozenset(
    {"type", "var", "ivar", "cvar", "vartype", "returns", "return", "rtype", "raises", "raise", "except", "exception"}
)


class DocInfo:
    """The description and per-argument descriptions of one docstring (None when absent)."""

    def __init__(self, description: str | None, params: dict[str, str]) -> None:
        self.description = description
        self.params = params


def _detect_style(doc: str) -> str:
    """openai-agents' guess: most matching patterns wins, ties go sphinx > numpy > google."""
    scores = {
        "sphinx": sum(bool(re.search(p, doc, re.M)) for p in (r"^:param\s", r"^:type\s", r"^:return:", r"^:rtype:")),
        "numpy": sum(
            bool(re.search(p, doc, re.M))
            for p in (r"^Parameters\s*\n\s*-{3,}", r"^Returns\s*\n\s*-{3,}", r"^Yields\s*\n\s*-{3,}")
        ),
        "google": sum(bool(re.search(p, doc, re.M)) for p in (r"^(Args|Arguments):", r"^(Returns):", r"^(Raises):")),
    }
    best = max(scores.values())
    if best == 0:
        return "google"
    return next(style for style in ("sphinx", "numpy", "google") if scores[style] == best)


def _blank_line_before_param_headers(lines: list[str]) -> list[str]:
    """openai-agents inserts a blank line before ``Args:`` directly under text, so it is read as a section."""
    out: list[str] = []
    for i, line in enumerate(lines):
        if (
            i > 0
            and _GOOGLE_PARAM_HEADER_RE.match(line)
            and out
            and out[-1].strip()
            and i + 1 < len(lines)
            and lines[i + 1].startswith((" ", "\t"))
        ):
            out.append("")
        out.append(line)
    return out


def _empty(line: str) -> bool:
    return not line or line.isspace()


def _block_end(lines: list[str], start: int) -> tuple[int, int]:
    """(indent, index of the block's last line) of the indented block starting at ``start``."""
    i = start
    while i < len(lines) and _empty(lines[i]):
        i += 1
    if i >= len(lines):
        return 0, start - 1
    indent = len(lines[i]) - len(lines[i].lstrip())
    if indent == 0:
        return 0, i - 1
    j = i + 1
    while j < len(lines) and (_empty(lines[j]) or lines[j].startswith(" " * indent)):
        j += 1
    return indent, j - 1


def _google_params(lines: list[str], start: int, end: int, indent: int) -> dict[str, str]:
    """griffe's reading of an ``Args:`` block: ``name (type): text`` items, continuation lines kept."""
    items: list[list[str]] = []
    for line in lines[start : end + 1]:
        if not items and _empty(line):
            continue
        if not items:
            items.append([line[indent:]])
        elif _empty(line):
            items[-1].append("")
        elif line.startswith(" " * (indent * 2)):
            items[-1].append(line[indent * 2 :])
        elif line.startswith(" " * (indent + 1)):
            items[-1].append(line.lstrip())
        else:
            items.append([line[indent:]])
    params: dict[str, str] = {}
    for item in items:
        if ":" not in item[0]:
            continue
        name_with_type, description = item[0].split(":", 1)
        text = "\n".join([description.lstrip(), *item[1:]]).rstrip("\n")
        name = name_with_type
        if "(" in name_with_type and name_with_type.endswith(")"):
            name = name_with_type.split("(", 1)[0].strip()
        params[name.lstrip("*")] = text
    return params


def _parse_google(lines: list[str]) -> DocInfo:
    texts: list[str] = []
    params: dict[str, str] = {}
    current: list[str] = []
    in_fence = False

    def flush() -> None:
        if current and any(current):
            texts.append("\n".join(current).rstrip("\n"))
        current.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = line.lstrip(" ").startswith("```")
        match = None if (in_fence or fence or ":" not in line) else _ADMONITION_RE.match(line)
        if match is None:
            in_fence = in_fence != fence
            current.append(line)
            i += 1
            continue
        blank_above = i == 0 or _empty(lines[i - 1])
        blank_below = i + 1 < len(lines) and _empty(lines[i + 1])
        indented_below = i + 1 < len(lines) and not blank_below and lines[i + 1].startswith(" ")
        blank_below_2 = i + 2 < len(lines) and _empty(lines[i + 2])
        indented_below_2 = i + 2 < len(lines) and not blank_below_2 and lines[i + 2].startswith(" ")
        if not (indented_below or indented_below_2) or not blank_above or (indented_below_2 and blank_below):
            current.append(line)  # not a section after all (griffe's rules)
            i += 1
            continue
        kind = match.group("type").lower()
        indent, end = _block_end(lines, i + 1)
        if kind in _SECTIONS:
            flush()
            if kind in _PARAM_SECTIONS:
                params.update(_google_params(lines, i + 1, end, indent))
        elif end >= i + 1:  # an admonition with content ends the text block
            flush()
        else:  # an admonition without content stays text
            current.append(line)
        i = end + 1
    flush()
    return DocInfo(texts[0] if texts else None, params)


def _parse_sphinx(lines: list[str]) -> DocInfo:
    """griffe's Sphinx reading: ``:param [type] name: text`` fields; every other line is description."""
    description: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        field = line[1:].split(":", 1)[0].split(" ")[0] if line.startswith(":") else ""
        if field not in _SPHINX_FIELDS:
            description.append(line)
            i += 1
            continue
        block = [line.lstrip()]
        i += 1
        while i < len(lines) and not lines[i].startswith(":"):
            block.append(lines[i])
            i += 1
        text = inspect.cleandoc("\n".join(block)).rstrip("\n")
        parts = text.split(":", 2)
        if field in _SPHINX_PARAM_FIELDS and len(parts) == 3:
            words = parts[1].split(" ")
            if len(words) >= 2 and words[-1] not in params:
                params[words[-1]] = parts[2].strip()
    while description and _empty(description[0]):
        description.pop(0)
    while description and _empty(description[-1]):
        description.pop()
    return DocInfo("\n".join(description), params)


def parse_tool_docstring(doc: str | None) -> DocInfo:
    """Description and argument descriptions of an ``inspect.getdoc`` docstring, as 0.1.x read them."""
    if not doc:
        return DocInfo(None, {})
    style = _detect_style(doc)
    lines = inspect.cleandoc("\n" + doc.rstrip()).split("\n")
    if style == "sphinx":
        return _parse_sphinx(lines)
    return _parse_google(_blank_line_before_param_headers(lines))
