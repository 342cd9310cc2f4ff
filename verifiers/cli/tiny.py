"""``vf-tiny OUT_DIR``: write a tiny random chat model and a character-level tokenizer."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from verifiers.inference.tiny import main as tiny_main

    return tiny_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
