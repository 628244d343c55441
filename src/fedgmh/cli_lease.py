"""`fedgmh lease prepare | collect`: a GPU lease of the campaign's next runs, prepared here and taken
back here (fedgmh.lease; the device's side: fedgmh.lease_device)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from fedgmh.errors import UserError

DEFAULT_CAMPAIGN = "config/campaign.yaml"
LEVERS_FILE = Path("benchmarks") / "levers.json"
#: what the device carries in one call, the tree included
DEVICE_MIB = 64


def _cmd_prepare(args: argparse.Namespace) -> None:
    from fedgmh.lease import Clock, prepare_lease, summary

    base = Path(args.directory)
    if not (base / args.file).is_file():
        raise UserError(f"campaign file {args.file} not found in {base}")
    clock = Clock(**_clock_items(args.clock))
    sizes = {"call_mib": args.call_mib} if args.call_mib is not None else {}
    for line in summary(prepare_lease(args.file, base, list(args.config), clock, args.rates, **sizes)):
        print(line)


def _mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= DEVICE_MIB:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB in (0, {DEVICE_MIB}] (the device carries at most {DEVICE_MIB})")
    return value


def _clock_items(items: list[str]) -> dict[str, int]:
    from fedgmh.lease import Clock

    known, values = set(Clock.__dataclass_fields__), {}
    for item in items:
        key, _, text = item.partition("=")
        if key not in known:
            raise UserError(f"--clock {item}: expected KEY=SECONDS with KEY one of {', '.join(sorted(known))}")
        try:
            values[key] = int(text)
        except ValueError:
            raise UserError(f"--clock {item}: {text!r} is not a whole number of seconds") from None
    return values


def _extract(archive: Path, into: Path) -> None:
    try:
        with tarfile.open(archive) as opened:
            opened.extractall(into, filter="data")
    except (tarfile.TarError, EOFError) as err:
        raise UserError(f"{archive} cannot be read ({err}): was it brought back whole?") from None


def _cmd_collect(args: argparse.Namespace) -> None:
    """The records into the store (as `fedgmh store merge`), the snapshots into their run folders, the
    levers measured into benchmarks/levers.json and the rate measured into benchmarks/gpu_throughput.csv."""
    from fedgmh import store
    from fedgmh.plan_estimate import GPU_RATES

    back, base = Path(args.folder), Path(args.directory)
    account = back / "lease.json"
    if not account.is_file():
        raise UserError(f"{account} not found: give the folder the lease's last call brought back")
    try:
        lease = json.loads(account.read_text())
        dataset, states = str(lease["dataset"]), dict(lease["runs"])
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{account} is malformed ({err})") from None
    with tempfile.TemporaryDirectory() as scratch:
        if (back / "records.tar.gz").is_file():
            _extract(back / "records.tar.gz", Path(scratch) / "runs")
            outcome = store.merge([Path(scratch) / "runs"], base / args.into)
            print(f"records: {len(outcome['added'])} added, {len(outcome['present'])} already present, "
                  f"{len(outcome['conflict'])} conflict(s), {len(outcome['invalid'])} invalid -> {args.into}")
            for kind in ("conflict", "invalid", "refused"):
                for line in outcome[kind]:
                    print(f"{kind}: {line}")
        pieces = sorted(back.glob("snapshots.tar.[0-9][0-9]"))
        if pieces:
            joined = Path(scratch) / "snapshots.tar"
            with open(joined, "wb") as out:
                for piece in pieces:
                    out.write(piece.read_bytes())
            _extract(joined, Path(scratch) / "snapshots")
            for snapshot in sorted((Path(scratch) / "snapshots").rglob("checkpoint.pt")):
                place = base / snapshot.relative_to(Path(scratch) / "snapshots")
                if place.exists():
                    print(f"snapshot kept as it is: {place} exists (remove it yourself to take the lease's)")
                    continue
                place.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(snapshot, place)
                print(f"snapshot: {place} (resumed by `fedgmh campaign run` or the next lease)")
    levers = lease.get("levers") or {}
    if levers.get("measured"):
        (base / LEVERS_FILE).write_text(json.dumps({k: v for k, v in levers.items() if k != "measured"}, indent=1) + "\n")
        print(f"levers: {LEVERS_FILE} (the next lease on {levers['device']} skips the measurement while the engine is unchanged)")
    rate = lease.get("measured_rate")
    if isinstance(rate, (int, float)) and rate > 0 and levers.get("device"):
        at_once = sum(1 for state in states.values() if state != "spare")
        row = io.StringIO()
        csv.writer(row, lineterminator="\n").writerow([levers.get("date", ""), levers["device"], dataset,
                                                       "lease: the campaign's runs, rate after the first minute", at_once,
                                                       f"{rate:.2f}", "", json.dumps(levers.get("choice", {})), "fedgmh lease collect"])
        with open(base / GPU_RATES, "a", encoding="utf-8") as rates:
            rates.write(row.getvalue())
        print(f"rate: {rate:.2f} rounds/s of {at_once} runs appended to {GPU_RATES}")
    print("runs: " + ", ".join(f"{name} {state}" for name, state in states.items()))


def register(sub: argparse._SubParsersAction) -> None:
    """Add `lease` to the `fedgmh` parser."""
    p = sub.add_parser("lease", help="a GPU lease of the campaign's next runs: prepare its calls here, collect what came back")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser("prepare", help="write .lease/: the runs, their data in parts that fit the calls, and calls.txt")
    v.add_argument("--file", default=DEFAULT_CAMPAIGN, help=f"the campaign's priority list (default {DEFAULT_CAMPAIGN})")
    v.add_argument("--directory", default=".", help="the repository root (default .)")
    v.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                   help="Snakemake --config overrides for the runs, e.g. mirror=../shared/data (device=cuda and jobs_per_gpu=16 unless given)")
    v.add_argument("--rates", default=None, help="the GPU rates on file (default benchmarks/gpu_throughput.csv)")
    v.add_argument("--clock", nargs="*", default=[], metavar="KEY=SECONDS",
                   help="the lease's time where it differs from fedgmh.lease.Clock's (lease_s=900, start_s=120, ...)")
    v.add_argument("--call-mib", type=_mib, default=None, metavar="MIB",
                   help="what a call may carry, the tree included (default 60: the device's 64 MiB less a margin)")
    v.set_defaults(func=_cmd_prepare)
    v = verbs.add_parser("collect", help="the records the lease brought back into the store, its snapshots into their run folders")
    v.add_argument("folder", help="the folder of the last call's files")
    v.add_argument("--directory", default=".", help="the repository root (default .)")
    v.add_argument("--into", default="paper_artifacts/paper/runs", help="the store (default paper_artifacts/paper/runs)")
    v.set_defaults(func=_cmd_collect)
