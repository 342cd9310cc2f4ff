"""``vf-tiny OUT_DIR``: write a tiny random chat model and a character-level tokenizer."""

from __future__ import annotations

from verifiers.cli.extras import exit_for_missing_extra


def main(argv: list[str] | None = None) -> int:
    try:
        from verifiers.models.tiny import main as tiny_main

        return tiny_main(argv)
    except ImportError as exc:
        return exit_for_missing_extra("vf-tiny", exc)


if __name__ == "__main__":
    raise SystemExit(main())
