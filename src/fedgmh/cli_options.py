"""CLI subcommand `fedgmh options ALGORITHM`: every `--set` option of an algorithm, with its default,
its `preset=official` value and what it does."""

from __future__ import annotations

import argparse


def _text(value) -> str:
    """An option value as it is typed after --set (true / false for booleans)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _cmd_options(args: argparse.Namespace) -> None:
    from fedgmh.cards import card

    found = card(args.algorithm)  # an unknown name: one line with the closest one
    print(f"{found.name} ({found.display_name}): options of `fedgmh train --algorithm {found.name} --set KEY=VALUE`")
    print("each line: KEY = default (type or choices, range) [official: the value --set preset=official gives it]: what it does")
    for scope, title in (("algorithm", "algorithm options"), ("engine", "engine options (every algorithm)")):
        print(f"\n{title}:")
        for row in found.option_rows():
            if row["scope"] != scope:
                continue
            kind = "one of " + ", ".join(row["choices"]) if row["choices"] else row["type"] + (f", {row['range']}" if row["range"] else "")
            official = f" [official: {_text(row['official'])}]" if row["official"] is not None else ""
            print(f"  {row['name']} = {_text(row['default'])} ({kind}){official}: {row['help']}")


def register(sub: argparse._SubParsersAction, algorithms: list[str]) -> None:
    """Add `options` to the `fedgmh` parser."""
    p = sub.add_parser("options", help="list an algorithm's --set options: default, preset=official value, help")
    p.add_argument("algorithm", metavar="ALGORITHM", help=f"one of: {', '.join(algorithms)}")
    p.set_defaults(func=_cmd_options)
