"""0.1.x path ``verifiers.utils.tools``: the example tools (``python``, ``calculator``, ``search``...).

``python`` runs in the local sandbox (`verifiers.tools.sandbox`: a separate
process with CPU, memory, file-size and wall-time limits and no network) instead of
a bare ``subprocess.run``; its output contract is upstream's: stderr if there is
any, else stdout, each cut to 1000 characters, and the value of a trailing
expression printed like a notebook cell. The web tools keep upstream's behaviour
of returning an ``"Error: ..."`` string (never raising) when their optional
dependency or the network is missing.
"""

from __future__ import annotations

import ast
import os
import textwrap

from verifiers.clients.loop import run_sync
from verifiers.tools.sandbox import SandboxLimits, run_python

__all__ = ["ask", "calculator", "python", "search", "search_ddg"]

_OUTPUT_CHARS = 1000
_PYTHON_TIMEOUT_S = 10


def _jupyterize(src: str) -> str:
    """Append a print of the last expression's value, as a notebook cell shows it."""
    src = textwrap.dedent(src)
    try:
        tree = ast.parse(src, mode="exec")
    except SyntaxError:
        return src  # let the interpreter report it, with its own message
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
        body = ast.unparse(ast.Module(body=tree.body, type_ignores=[]))
        expr = ast.unparse(last.value)
        return f"{body}\n_ = {expr}\nif _ is not None: print(_)"
    return src


def python(code: str) -> str:
    """Evaluates Python code like a Jupyter notebook cell, returning output and/or the last expression value.

    Args:
        code (str): A block of Python code

    Returns:
        The output (stdout + last expression if not None) or error message
    """
    limits = SandboxLimits(wall_time_s=_PYTHON_TIMEOUT_S, cpu_time_s=_PYTHON_TIMEOUT_S)
    result = run_sync(run_python(_jupyterize(code), limits))
    if result.timed_out:
        return f"Error: Code execution timed out after {_PYTHON_TIMEOUT_S} seconds"
    error = result.stderr.strip()[:_OUTPUT_CHARS]
    if error:
        return error
    if result.cpu_exceeded or result.memory_exceeded or (result.exit_code or 0) != 0:
        return f"Error: {result.to_tool_output()[:_OUTPUT_CHARS]}"
    return result.stdout.strip()[:_OUTPUT_CHARS]


def calculator(expression: str) -> str:
    """Evaluates a single line of Python math expression. No imports or variables allowed.

    Args:
        expression (str): A mathematical expression using only numbers and basic operators (+,-,*,/,**,())

    Returns:
        The result of the calculation or an error message
    """
    allowed = set("0123456789+-*/.() ")
    if not all(c in allowed for c in expression):
        return "Error: Invalid characters in expression"
    try:
        # Only digits, operators and parentheses can reach eval (checked above).
        result = eval(expression, {"__builtins__": {}}, {})
        return str(result)
    except Exception as exc:
        return f"Error: {exc}"


def search_ddg(query: str, num_results: int = 5) -> str:
    """Searches DuckDuckGo and returns concise summaries of top results.

    Args:
        query (str): The search query string
        num_results (int): Number of results to return (default: 5, max: 10)

    Returns:
        Formatted string with bullet points of top results, each with title and brief summary
    """
    try:
        from duckduckgo_search import DDGS  # type: ignore[import-not-found]

        with DDGS() as ddgs:
            results = list(ddgs.text(query, max_results=min(num_results, 10)))
        if not results:
            return "No results found"
        summaries = []
        for r in results:
            snippet = r["body"][:200].rsplit(".", 1)[0] + "."
            summaries.append(f"• {r['title']}\n  {snippet}")
        return "\n\n".join(summaries)
    except Exception as exc:  # missing package, network: the model sees the reason
        return f"Error: {exc}"


def search(query: str) -> str:
    """Searches the web and returns summaries of top results.

    Args:
        query: The search query string

    Returns:
        Formatted string with bullet points of top 3 results, each with title, source, url, and brief summary
    """
    try:
        from brave import Brave  # type: ignore[import-not-found]

        results = Brave().search(q=query, count=10, raw=True)
        web_results = results.get("web", {}).get("results", [])
        summaries = []
        for r in web_results:
            if "profile" not in r:
                continue
            header = f"{r['profile']['name']} ({r['profile']['long_name']})"
            summaries.append(f"•  {header}\n   {r['title']}\n   {r['description'][:300]} ...\n   {r['url']}")
        return "\n\n".join(summaries[:3]) if summaries else "No results found"
    except Exception as exc:
        return f"Error: {exc}"


def ask(question: str, url: str) -> str:
    """Ask a question about a web page returned from search results.

    Args:
        question: The question to be answered (by an LLM who will be given the web page contents)
        url: The URL of the web page to query

    Returns:
        A LLM-generated answer to the question based on the web page contents.
    """
    try:
        import requests
        from markdownify import markdownify  # type: ignore[import-not-found]
        from openai import OpenAI

        response = requests.get(url, timeout=30)
        response.raise_for_status()
        contents = markdownify(response.text)[:50000]
        client = OpenAI(
            base_url="https://api.deepinfra.com/v1/openai", api_key=os.getenv("DEEPINFRA_API_KEY")
        )
        prompt = (
            "Answer the following question based on the provided web page contents:\n\n"
            f"Question: {question}\n\nPage: {url}\n\nPage contents:\n{contents}\n"
        )
        reply = client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct",
            messages=[{"role": "user", "content": prompt}],
            max_tokens=4000,
        )
        return reply.choices[0].message.content or "Error: No response from model."
    except Exception as exc:
        return f"Error: {exc}"
