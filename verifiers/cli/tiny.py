"""``vf-tiny OUT_DIR``: write a tiny random chat model and a character-level tokenizer."""

from __future__ import annotations

import sys

from verifiers.cli.extras import missing_train_module, train_extra_message


def main(argv: list[str] | None = None) -> int:
    try:
        from verifiers.inference.tiny import main as tiny_main

        return tiny_main(argv)
    except ImportError as exc:
        module = missing_train_module(exc)
        if module is None:
            raise
        print(train_extra_message("vf-tiny", module), file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
