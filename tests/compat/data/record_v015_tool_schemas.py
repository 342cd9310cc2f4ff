"""Record verifiers 0.1.5's tool schemas for ``v015_tool_signatures.SIGNATURES``.

Run once with verifiers 0.1.5 installed in a throwaway virtual environment (it is
not a dependency of this toolkit)::

    python -m venv /tmp/v015venv && /tmp/v015venv/bin/pip install verifiers==0.1.5
    /tmp/v015venv/bin/python tests/compat/data/record_v015_tool_schemas.py

It writes ``v015_tool_schemas.json`` next to this file: for every function, the exact
``json.dumps`` text of ``verifiers.utils.tool_utils.convert_func_to_oai_tool(fn)``
(key order included: that text is what lands in the prompt), or the type of the
exception 0.1.5 raised. The versions of the libraries that shape the text
(``openai-agents`` builds the schema with ``pydantic``) are recorded with it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _versions(*names: str) -> dict[str, str]:
    """Installed versions of ``names`` (griffe is published as ``griffelib`` since 2.x)."""
    found = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def main() -> None:
    sys.path.insert(0, str(HERE))
    from v015_tool_signatures import SIGNATURES

    from verifiers.utils.tool_utils import convert_func_to_oai_tool

    if version("verifiers") != "0.1.5":
        raise SystemExit(f"run this with verifiers 0.1.5 installed, not {version('verifiers')}")
    schemas: dict[str, dict[str, str]] = {}
    for fn in SIGNATURES:
        try:
            schemas[fn.__name__] = {"json": json.dumps(convert_func_to_oai_tool(fn))}
        except Exception as exc:  # what 0.1.5 raises is part of the record
            schemas[fn.__name__] = {"error": f"{type(exc).__module__}.{type(exc).__qualname__}"}
    record = {
        "versions": _versions("verifiers", "openai-agents", "pydantic", "griffe", "griffelib"),
        "python": sys.version.split()[0],
        "schemas": schemas,
    }
    (HERE / "v015_tool_schemas.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
