"""`fedgmh lease prepare | collect`: a GPU lease of the campaign's next runs, prepared here and taken
back here (fedgmh.lease; the device's side: fedgmh.lease_device)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Account:
    """What collect takes from the lease.json a lease brought back (fedgmh.lease_device.pack), checked."""

    dataset: str
    states: dict[str, str]
    levers: dict
    #: rounds/s of the runs sharing the device; None when it measured none
    rate: float | None

    @property
    def runs_at_once(self) -> int:
        return sum(1 for state in self.states.values() if state != "spare")


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad(account: Path, field: str, wanted: str, value: object) -> UserError:
    return UserError(f"{account}: {field} must be {wanted}, not {_shown(value)}")


def _name(value: object, account: Path, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value:
        raise _bad(account, field, "a one-line name", value)
    return value


def _positive(value: object, account: Path, field: str) -> float:
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            pass
    if not (math.isfinite(number) and number > 0):
        raise _bad(account, field, "a finite number > 0", value)
    return number


def _date(value: object, account: Path, field: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d\d-\d\d", value):
        raise _bad(account, field, "a date YYYY-MM-DD", value)
    return value


def _options(value: object, account: Path, field: str) -> dict:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _bad(account, field, "an object of option -> value (text)", value)
    return value


def _lever_rates(value: object, account: Path, field: str) -> dict:
    if not isinstance(value, dict):
        raise _bad(account, field, "an object of setting -> its options and rounds_per_s", value)
    for name, rate in value.items():
        if not isinstance(rate, dict):
            raise _bad(account, f"{field}.{name}", "an object of options and rounds_per_s", rate)
        _options(rate.get("options"), account, f"{field}.{name}.options")
        _positive(rate.get("rounds_per_s"), account, f"{field}.{name}.rounds_per_s")
    return value


#: levers' fields and their checks (fedgmh.lease_device.choose_levers writes them)
LEVER_FIELDS = {"engine": _name, "device": _name, "date": _date, "choice": _options, "rates": _lever_rates}


def _levers(value: object, account: Path) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(account, "levers", "an object", value)
    if not isinstance(value.get("measured", False), bool):
        raise _bad(account, "levers.measured", "true or false", value["measured"])
    missing = [f"levers.{key}" for key in ("engine", "device", "choice") if value.get("measured") and key not in value]
    if missing:
        raise UserError(f"{account}: levers measured without {', '.join(missing)}")
    for key, check in LEVER_FIELDS.items():
        if key in value:
            check(value[key], account, f"levers.{key}")
    return value


def _measured_rate(value: object, account: Path) -> float | None:
    """None where the device measured none: null, or 0 when every run ended before a round was played."""
    if value is None or (type(value) in (int, float) and value == 0):
        return None
    return _positive(value, account, "measured_rate")


def read_account(account: Path) -> Account:
    """The lease.json at `account`, every field collect uses checked (UserError naming the field)."""
    try:
        lease = json.loads(account.read_text())
    except ValueError as err:
        raise UserError(f"{account} is malformed ({err})") from None
    if not isinstance(lease, dict):
        raise UserError(f"{account} is malformed (not a JSON object)")
    missing = [key for key in ("dataset", "runs") if key not in lease]
    if missing:
        raise UserError(f"{account} is malformed (no {', '.join(missing)})")
    states = lease["runs"]
    if not isinstance(states, dict):
        raise _bad(account, "runs", "an object of run -> state", states)
    for name, state in states.items():
        _name(state, account, f"runs.{name}")
    levers = _levers(lease.get("levers"), account)
    rate = _measured_rate(lease.get("measured_rate"), account)
    if rate is not None and "device" not in levers:
        raise UserError(f"{account}: measured_rate {rate:g} without levers.device, the device it was measured on")
    checked = Account(_name(lease["dataset"], account, "dataset"), states, levers, rate)
    if rate is not None and checked.runs_at_once == 0:
        raise UserError(f"{account}: measured_rate {rate:g} with no run but spares to have measured it")
    return checked


def _rate_row(lease: Account) -> str:
    """The rate measured, as a row of benchmarks/gpu_throughput.csv."""
    row = io.StringIO()
    csv.writer(row, lineterminator="\n").writerow([lease.levers.get("date", ""), lease.levers["device"], lease.dataset,
                                                   "lease: the campaign's runs, rate after the first minute", lease.runs_at_once,
                                                   f"{lease.rate:.2f}", "", json.dumps(lease.levers.get("choice", {})),
                                                   "fedgmh lease collect"])
    return row.getvalue()


def _unpack(back: Path, scratch: Path) -> tuple[Path | None, Path | None]:
    """The records and the snapshots brought back, unpacked in `scratch` (None where none came)."""
    records = snapshots = None
    if (back / "records.tar.gz").is_file():
        records = scratch / "runs"
        _extract(back / "records.tar.gz", records)
    pieces = sorted(back.glob("snapshots.tar.[0-9][0-9]"))
    if pieces:
        joined, snapshots = scratch / "snapshots.tar", scratch / "snapshots"
        with open(joined, "wb") as out:
            for piece in pieces:
                out.write(piece.read_bytes())
        _extract(joined, snapshots)
    return records, snapshots


def _merge_records(records: Path, base: Path, into: str) -> None:
    from fedgmh import store

    outcome = store.merge([records], base / into)
    print(f"records: {len(outcome['added'])} added, {len(outcome['present'])} already present, "
          f"{len(outcome['conflict'])} conflict(s), {len(outcome['invalid'])} invalid -> {into}")
    for kind in ("conflict", "invalid", "refused"):
        for line in outcome[kind]:
            print(f"{kind}: {line}")


def _place_snapshots(snapshots: Path, base: Path) -> None:
    for snapshot in sorted(snapshots.rglob("checkpoint.pt")):
        place = base / snapshot.relative_to(snapshots)
        if place.exists():
            print(f"snapshot kept as it is: {place} exists (remove it yourself to take the lease's)")
            continue
        place.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(snapshot, place)
        print(f"snapshot: {place} (resumed by `fedgmh campaign run` or the next lease)")


def _cmd_collect(args: argparse.Namespace) -> None:
    """The records into the store (as `fedgmh store merge`), the snapshots into their run folders, the
    levers measured into benchmarks/levers.json and the rate measured into benchmarks/gpu_throughput.csv.
    lease.json is checked and the archives unpacked before anything is written."""
    from fedgmh.io import atomic_path
    from fedgmh.plan_estimate import GPU_RATES

    back, base = Path(args.folder), Path(args.directory)
    account = back / "lease.json"
    if not account.is_file():
        raise UserError(f"{account} not found: give the folder the lease's last call brought back")
    lease = read_account(account)
    levers = {k: v for k, v in lease.levers.items() if k != "measured"} if lease.levers.get("measured") else None
    row = _rate_row(lease) if lease.rate is not None else None
    if (levers is not None or row is not None) and not (base / LEVERS_FILE.parent).is_dir():
        raise UserError(f"{base / LEVERS_FILE.parent} not found: give --directory the repository root")
    with tempfile.TemporaryDirectory() as scratch:
        records, snapshots = _unpack(back, Path(scratch))
        if records is not None:
            _merge_records(records, base, args.into)
        if snapshots is not None:
            _place_snapshots(snapshots, base)
    if levers is not None:
        with atomic_path(base / LEVERS_FILE) as partial:
            partial.write_text(json.dumps(levers, indent=1) + "\n")
        print(f"levers: {LEVERS_FILE} (the next lease on {levers['device']} skips the measurement while the engine is unchanged)")
    if row is not None:
        with open(base / GPU_RATES, "a", encoding="utf-8") as rates:
            rates.write(row)
        print(f"rate: {lease.rate:.2f} rounds/s of {lease.runs_at_once} runs appended to {GPU_RATES}")
    print("runs: " + ", ".join(f"{name} {state}" for name, state in lease.states.items()))


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
