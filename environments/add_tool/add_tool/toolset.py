"""The ``add`` tool, in a module of its own: upstream verifiers serves a Toolset as an MCP server by
running its module (``python -m add_tool.toolset``); here the v1 adapter calls it in process."""

from __future__ import annotations

import verifiers.v1 as vf


class Arithmetic(vf.Toolset[vf.ToolsetConfig]):
    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first addend
            b: the second addend
        """
        return a + b


if __name__ == "__main__":
    Arithmetic.run()
