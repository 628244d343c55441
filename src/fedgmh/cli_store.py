"""`fedgmh store check | merge | put`: look after the folders of finished run records (fedgmh.store)."""

from __future__ import annotations

import argparse

from fedgmh.errors import UserError


def _cmd_check(args: argparse.Namespace) -> None:
    from fedgmh import store

    store.require_folders(args.stores)
    runs, problems = store.scan(args.stores)
    groups, float_level = store.review(runs)
    for line in problems:
        print(f"invalid: {line}")
    for group in groups:
        print("conflict: " + store.conflict_message(group))
    for line in float_level:
        print(f"float-level: {line}")
    keys = len({run.digest for run in runs})
    print(f"store check: {len(runs)} records of {keys} distinct runs, {len(groups)} conflict(s), {len(problems)} invalid, "
          f"{len(float_level)} float-level difference(s)")
    if groups or problems:
        raise UserError("the store needs attention (lines above)")


def _cmd_merge(args: argparse.Namespace) -> None:
    from fedgmh import store

    outcome = store.merge(args.sources, args.into)
    for kind in ("added", "conflict", "invalid", "refused"):
        for line in outcome[kind]:
            print(f"{kind}: {line}")
    for line in outcome["present"]:
        if " (" in line:  # completed with a file it lacked (e.g. clients.csv), or float-level differences
            print(f"present: {line}")
    print(f"store merge: {len(outcome['added'])} added, {len(outcome['present'])} already present, "
          f"{len(outcome['conflict'])} conflict(s), {len(outcome['invalid'])} invalid, {len(outcome['refused'])} refused -> {args.into}")
    if outcome["conflict"] or outcome["invalid"] or outcome["refused"]:
        raise UserError("some records were not merged (lines above); nothing in the store was overwritten")


def put_record(source: str, destination: str, beside_other_run: bool) -> str:
    """Put the record in `source` into the store folder `destination` (fedgmh.store.put); the line that says what was done."""
    from fedgmh import store

    outcome = store.put(source, destination, beside_other_run=beside_other_run)
    return f"store put: {outcome}" + ("" if " in " in outcome else f" {destination}")


def _cmd_put(args: argparse.Namespace) -> None:
    print(put_record(args.source, args.destination, args.beside_other_run))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("store", help="check, merge and fill stores of finished run records (docs/store.md)")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser("check", help="list invalid records, records of the same run whose results differ, and float-level "
                                       "differences (not conflicts)")
    v.add_argument("stores", nargs="+", help="store folders (searched at any depth for run.json)")
    v.set_defaults(func=_cmd_check)
    v = verbs.add_parser("merge", help="add the records found below SOURCES (another machine's results/, a GPU job's "
                                       "output) to a store; never overwrites")
    v.add_argument("sources", nargs="+")
    v.add_argument("--into", required=True, help="store folder, e.g. paper_artifacts/paper/runs")
    v.set_defaults(func=_cmd_merge)
    v = verbs.add_parser("put", help="copy one run's record to a given folder of a store (what `fedgmh train --put-record` does after a run)")
    v.add_argument("source")
    v.add_argument("destination")
    v.add_argument("--beside-other-run", action="store_true",
                   help="when DESTINATION holds the record of another run, keep it and put this one beside it (DESTINATION-<digest>)")
    v.set_defaults(func=_cmd_put)

