"""Command-line interface: `fedgmh download | partition | train | train-group | serve | options | artifact | aggregate | curves | rounds | compare | claims | seeds | costs | store | campaign | lease | plan`.

Each subcommand is a thin wrapper around a library function: `download` prepares a dataset,
`partition` splits it over clients, `train` runs one federated training run (on a warm server,
`serve` (fedgmh.warm), when FEDGMH_WARM_SOCKET names one), `train-group` the runs of a runs file in
one process, their clients in one batched step (fedgmh.train.run_group), `options` lists an
algorithm's `--set` options (cli_options.py), `artifact` writes one report artifact as the
workflow's rule of it does (fedgmh.report.artifacts), `aggregate` / `curves` / `rounds` /
`compare` / `seeds` turn runs into the paper's tables and figures by hand, `claims` tests the
paper's claims on them (cli_report.py),
`costs` computes section
2.3's costs (cli_costs.py), `store` keeps finished run records (cli_store.py) and `campaign`
trains the full-protocol campaign's next runs (cli_campaign.py), `lease` prepares a GPU lease of them
and takes back what it brought (cli_lease.py); `plan` tells what a config's
workflow will train and for how long (cli_plan.py); `fedgmh
--version` prints the version and git commit.
User errors (bad input, missing files) are reported as one line on stderr with exit status 2, and
so are, from `main` alone (`error_line`), an operating-system error (a full disk, a read-only or
missing folder), a malformed input file (marked by `fedgmh.io.reading`) and running out of memory;
Ctrl-C and SIGTERM as one line with exit status 130 and 143 (a training run with checkpoints
finishes and snapshots its round on SIGTERM first, saying so on a line of its own: fedgmh.stopping).
Any other exception is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator

from fedgmh.cadence import DEFAULT_CADENCE, SNAPSHOT_SHARE
from fedgmh.cli_train import ParseStop
from fedgmh.errors import Interrupted, UserError


def _os_error(err: OSError, hint: str) -> UserError:
    """One line for an operating-system error: the file, the reason, what to do."""
    what = f" {err.filename}" if err.filename is not None else ""
    return UserError(f"cannot access{what} ({err.strerror or err}); {hint}")


def _cmd_download(args: argparse.Namespace) -> None:
    from fedgmh import data

    try:
        path = data.download(args.dataset, Path(args.root), mirror=Path(args.mirror) if args.mirror else None)
    except OSError as err:
        raise _os_error(err, "--root must be a writable folder and the --mirror files readable") from err
    print(f"{args.dataset}: ready at {path}")


HEATMAP_SUFFIXES = (".pdf", ".png")


def _check_partition_args(args: argparse.Namespace) -> None:
    """Everything that can be checked before the dataset is read: parameters and output paths."""
    from fedgmh import data, partition

    info = data.get_info(args.dataset)
    named = {"clients": f"--clients {args.clients}", "classes_per_client": f"--classes-per-client {args.classes_per_client}",
             "alpha": f"--alpha {args.alpha:g}", "train_ratio": f"--train-ratio {args.train_ratio}",
             "assignment": f"--assignment {args.assignment}"}
    partition.check_parameters(info.num_samples, info.num_classes, args.clients, args.classes_per_client, args.alpha,
                               args.train_ratio, args.assignment, named=named, dataset=args.dataset)
    if not 0 <= args.seed <= partition.MAX_SEED:
        raise UserError(f"--seed {args.seed}: must be an integer from 0 to {partition.MAX_SEED} (2**32 - 1)")
    for heatmap in args.heatmap:
        if Path(heatmap).suffix.lower() not in HEATMAP_SUFFIXES:
            raise UserError(f"--heatmap {heatmap}: unsupported figure type; give a name ending in .pdf or .png")
    out = Path(args.out)
    dataset_file = data.prepared_path(args.dataset, Path(args.root))
    stats = _stats_path(args)
    outputs = [("--out", out), ("--stats", stats), *(("--heatmap", Path(h)) for h in args.heatmap)]
    for option, path in outputs:
        if path.exists() and dataset_file.exists() and path.resolve() == dataset_file.resolve():
            raise UserError(f"{option} {path} is the prepared dataset; refusing to overwrite it: choose another {option}")
        if path.is_dir():
            raise UserError(f"{option} {path} is a folder; give a file name")
        for parent in path.absolute().parents:
            if parent.exists() and not parent.is_dir():
                raise UserError(f"{option} {path}: {parent} is a file, not a folder; choose another {option}")
    partition.check_partition_target(out)
    if stats.absolute() == out.absolute():
        raise UserError(f"--stats {stats} is the partition file itself; choose another --stats")
    if stats.is_file() and not _is_stats_file(stats):
        raise UserError(f"--stats {stats} exists and is not a statistics file of `fedgmh partition`; refusing to overwrite it: choose another --stats")


def _stats_path(args: argparse.Namespace) -> Path:
    return Path(args.stats) if args.stats else Path(args.out).with_suffix(".stats.csv")


def _is_stats_file(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(b"client,num_train,num_test")) == b"client,num_train,num_test"
    except OSError:
        return False


def _cmd_partition(args: argparse.Namespace) -> None:
    try:
        _partition(args)
    except OSError as err:
        raise _os_error(err, "--root must be a readable folder and --out, --stats and --heatmap writable paths") from err


def _partition(args: argparse.Namespace) -> None:
    from fedgmh import data, partition
    from fedgmh.io import write_csv
    from fedgmh.report.labels import dataset_name, format_number
    from fedgmh.runspec import exdir_meta

    _check_partition_args(args)
    dataset = data.load_labels(args.dataset, Path(args.root))
    part = partition.exdir(
        dataset.labels,
        num_clients=args.clients,
        classes_per_client=args.classes_per_client,
        alpha=args.alpha,
        train_ratio=args.train_ratio,
        seed=args.seed,
        assignment=args.assignment,
    )
    meta = exdir_meta(args.dataset, dataset.fingerprint, int(len(dataset.labels)), int(dataset.num_classes), args.clients,
                                args.classes_per_client, args.alpha, args.train_ratio, args.seed, args.assignment)
    out = Path(args.out)
    partition.check_partition_target(out)  # again: the file may have appeared while we were drawing
    partition.save_partition(out, part, meta)
    stats = partition.client_statistics(part, dataset.labels, dataset.num_classes)
    stats_path = _stats_path(args)
    write_csv(stats, stats_path)
    for heatmap in args.heatmap:
        scheme = "chain" if args.assignment == "chain" else "ExDir"
        partition.plot_heatmap(stats, Path(heatmap), title=f"{dataset_name(args.dataset)} {scheme}({args.classes_per_client}, {format_number(args.alpha)})"
                               + (f", {args.clients} clients" if args.assignment == "chain" else ""))
    sizes = part.client_sizes()
    print(
        f"partition: {args.clients} clients, sizes min {sizes.min()} / median {int(sorted(sizes)[len(sizes) // 2])} "
        f"/ max {sizes.max()}; written to {out}"
    )


def train_config(args: argparse.Namespace):
    """The TrainConfig of parsed `fedgmh train` arguments."""
    from fedgmh.config import TrainConfig, parse_overrides

    return TrainConfig(
        dataset=_train_dataset(args),
        root=args.root,
        partition=args.partition,
        algorithm=args.algorithm,
        rounds=args.rounds,
        join_ratio=args.join_ratio,
        local_epochs=args.local_epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
        threads=args.threads,
        overrides=parse_overrides(args.set),
    )


def _train_dataset(args: argparse.Namespace) -> str:
    """--dataset, checked by name (an unknown one gets the closest name), or the dataset the partition
    file was made from (a given one that differs is refused when the run's identity is built)."""
    if args.dataset is not None:
        from fedgmh.datasets import get_info

        return get_info(args.dataset).name
    from fedgmh.partition import load_partition

    _, meta = load_partition(Path(args.partition))
    if not meta.get("dataset"):
        raise UserError(f"partition {args.partition} does not name its dataset (an older file): give --dataset")
    return meta["dataset"]


def _train_options(args: argparse.Namespace) -> dict:
    """`run_training`'s arguments besides config and folder, from parsed `fedgmh train` arguments."""
    from fedgmh.store import WORKFLOW_LABELS

    if args.jobs_per_gpu < 1:
        raise UserError(f"--jobs-per-gpu {args.jobs_per_gpu}: at least 1 job per GPU")
    from fedgmh.cadence import snapshot_cadence

    snapshot_cadence(args.checkpoint_every)  # a bad value is refused before any work
    _check_store_paths(args)
    workflow = {name: getattr(args, name) for name in WORKFLOW_LABELS if getattr(args, name) is not None}
    return {"progress": not args.quiet, "checkpoint_every": args.checkpoint_every, "stores": [Path(s) for s in args.store],
            "overwrite": args.overwrite, "jobs_per_gpu": args.jobs_per_gpu, "workflow": workflow}


def _check_store_paths(args: argparse.Namespace) -> None:
    """Before any work: a `--store` or `--put-record` path that is a file is refused; a missing `--store`
    is said (the workflow passes its configured stores, which a fresh `--directory` may lack)."""
    for flag, paths in (("--store", args.store), ("--put-record", [args.put_record] if args.put_record else [])):
        for path in map(Path, paths):
            if path.exists() and not path.is_dir():
                raise UserError(f"{flag} {path} is a file, not a folder of run records")
    for path in map(Path, args.store):
        if not path.exists():
            print(f"[{args.algorithm}] --store {path} does not exist: no record is reused from it", file=sys.stderr, flush=True)


def _trained(args: argparse.Namespace, result: dict) -> None:
    """Say what a run gave and, with --put-record, file its record."""
    print(f"{args.algorithm}: best test accuracy {100 * result['best_test_acc']:.2f} % at round {result['best_round']}")
    if args.put_record:  # the workflow's train job files the record itself: no job of its own per run
        from fedgmh.cli_store import put_record

        print(put_record(args.out, args.put_record, beside_other_run=True))


def _cmd_train(args: argparse.Namespace) -> None:
    if not args.quiet:  # before the imports and the data, which take seconds
        from fedgmh.cli_train import start_line

        print(start_line(args), flush=True)
    from fedgmh.train import run_training

    options = _train_options(args)
    _trained(args, run_training(train_config(args), Path(args.out), **options))


def group_runs(path: Path) -> list[argparse.Namespace]:
    """The runs of a runs file: one `fedgmh train` command line (its arguments, without `fedgmh train`)
    per line; empty lines and lines starting with # are skipped."""
    import io
    import shlex

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise UserError(f"cannot read the runs file {path} ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise UserError(f"the runs file {path} is not UTF-8 text (byte {err.start}): one `fedgmh train` command line per line") from None
    parser, runs = build_parser(), []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):  # `--help` too: its last line
                runs.append(parser.parse_args(["train", *shlex.split(line)]))
        except (SystemExit, ValueError):
            told = said.getvalue().strip().splitlines()
            raise UserError(f"{path} line {number} is not a `fedgmh train` command line" + (f": {told[-1]}" if told else "")) from None
    if not runs:
        raise UserError(f"{path} names no run")
    return runs


def _cmd_train_group(args: argparse.Namespace) -> None:
    from fedgmh.train import GroupRun, run_group

    runs = group_runs(Path(args.runs))
    outcomes = run_group([GroupRun(train_config(run), Path(run.out), _train_options(run)) for run in runs])
    failed, stops = [], [outcome for outcome in outcomes if isinstance(outcome, KeyboardInterrupt)]
    for run, outcome in zip(runs, outcomes):
        if isinstance(outcome, BaseException):
            line = error_line(outcome) if isinstance(outcome, Exception) else getattr(outcome, "message", None)
            failed.append(f"{run.out}: {line or type(outcome).__name__}")
        else:
            _trained(run, outcome)
    if stops:  # stopped (SIGTERM, Ctrl-C): said per run, and the exit status a stopped `fedgmh train` has
        print("\n".join(failed), file=sys.stderr)
        raise stops[0]
    if failed:
        raise UserError(f"{len(failed)} of {len(runs)} runs failed: " + "; ".join(failed))


def _cmd_serve(args: argparse.Namespace) -> None:
    from fedgmh import warm

    if not args.idle_timeout > 0:  # NaN too; inf: no idle stop
        raise UserError(f"--idle-timeout {args.idle_timeout}: a number of seconds above 0 (inf: never)")
    if args.parent is not None and (args.parent < 1 or not warm.alive(args.parent)):
        raise UserError(f"--parent {args.parent}: no such process (the server would stop at once)")
    warm.serve(lambda argv: main(argv, warm=False), served_train_problem, args.socket, args.idle_timeout, args.parent)


def served_train_problem(argv: list[str]) -> str | None:
    """Why the warm server may not run `fedgmh ARGV` (None: it may): only a `train` command line that
    the train parser accepts, on a device it serves. Parsed in the server, before anything runs."""
    import io

    from fedgmh import warm

    if argv[:1] != ["train"]:
        return "only `fedgmh train` is served"
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            args = build_parser().parse_args(argv)
    except SystemExit as stop:
        lines = said.getvalue().strip().splitlines()
        return "not a valid train command line" + (f": {lines[-1]}" if stop.code and lines else "")
    except UserError as err:
        return f"not a valid train command line: {_one_line(str(err))}"
    if not warm.served(args.device):
        return f"--device {args.device} is not served (cpu only)"
    return None


class _Version(argparse.Action):
    """--version: the package version and, in a git checkout, the commit (looked up only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import fedgmh

        commit = fedgmh.code_version()
        print(f"fedgmh {fedgmh.__version__}" + (f" (commit {commit})" if commit else ""))
        parser.exit()


class OneLineErrors(argparse.ArgumentParser):
    """A usage error is one line naming `--help`, not the usage block and then the error (subcommands'
    parsers are of the same class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the arguments)\n")


def build_parser() -> argparse.ArgumentParser:
    import dataclasses

    from fedgmh.cards import algorithm_names
    from fedgmh.cli_train import OneSeed
    from fedgmh.config import TrainConfig
    from fedgmh.datasets import DATASETS
    from fedgmh.warm import IDLE_TIMEOUT_S

    parser = OneLineErrors(prog="fedgmh", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, help="print the version (and git commit) and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    algorithms, datasets = algorithm_names(), list(DATASETS)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}

    p = sub.add_parser("download", help="fetch a dataset (torchvision, a local mirror, or the embedded one)")
    p.add_argument("dataset", help="mnist, fashion_mnist, cifar10, cifar100, or digits (embedded, no network)")
    p.add_argument("--root", required=True, help="folder where prepared datasets are written")
    p.add_argument("--mirror", help="local folder laid out like shared/data (torchvision archives or cifar100.npz)")
    p.set_defaults(func=_cmd_download)

    p = sub.add_parser("partition", help="split a dataset over clients (ExDir) and write a .npz partition")
    p.add_argument("--dataset", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--classes-per-client", type=int, required=True)
    p.add_argument("--alpha", type=float, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-ratio", type=float, default=0.75)
    p.add_argument("--assignment", choices=["random", "chain"], default="random",
                   help="which clients hold which classes: random (ExDir's draw, default) or chain (client i holds classes "
                   "i..i+C-1 mod K; sample shares still Dirichlet(alpha))")
    p.add_argument("--out", required=True, help="partition file (.npz)")
    p.add_argument("--stats", help="per-client statistics CSV (default: OUT with .stats.csv)")
    p.add_argument(
        "--heatmap", action="append", default=[], help="clients x classes heat-map figure (PDF or PNG; repeatable)"
    )
    p.set_defaults(func=_cmd_partition)

    p = sub.add_parser(
        "train", help="run one federated training run and write metrics.csv + run.json",
        epilog="Every option of an algorithm (its hyper-parameters, its paper / official-code switches, the engine "
        "options) with its default and its preset=official value: `fedgmh options ALGORITHM`.",
    )
    p.add_argument("--dataset", metavar="DATASET",
                   help=f"one of: {', '.join(datasets)} (default: the one the partition file was made from)")
    p.add_argument("--root", required=True, help="folder of the prepared datasets (`fedgmh download`)")
    p.add_argument("--partition", required=True, help="partition file (`fedgmh partition`)")
    p.add_argument("--algorithm", required=True, metavar="ALGORITHM",
                   help=f"one of: {', '.join(algorithms)}; its options: `fedgmh options ALGORITHM`")
    p.add_argument("--rounds", type=int, required=True, help="training rounds (the run evaluates rounds 0 .. ROUNDS)")
    p.add_argument("--join-ratio", type=float, default=defaults["join_ratio"], help="share of clients per round (default %(default)s)")
    p.add_argument("--local-epochs", type=int, default=defaults["local_epochs"], help="default %(default)s")
    p.add_argument("--batch-size", type=int, default=defaults["batch_size"], help="default %(default)s")
    p.add_argument("--lr", type=float, default=defaults["lr"], help="default %(default)s")
    p.add_argument("--seed", action=OneSeed, default=defaults["seed"],
                   help="the run's seed (default %(default)s); one run, one seed: several seeds are several runs")
    p.add_argument("--seeds", action=OneSeed, nargs="+", help=argparse.SUPPRESS)  # says how to run several seeds
    p.add_argument("--device", default=defaults["device"], help="cpu, cuda, cuda:N, cuda:auto (a free GPU slot, locked for the run: see --jobs-per-gpu) or auto (CUDA when available; the default)")
    p.add_argument("--jobs-per-gpu", type=int, default=1, metavar="J",
                   help="with --device cuda:auto: slots per GPU, i.e. how many training jobs may share one GPU (default 1); results do not depend on it")
    p.add_argument("--threads", type=int, default=defaults["threads"], help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine or algorithm option, e.g. --set beta=0.3 --set drop_last=true (repeatable); "
        "--set preset=official switches every official-code / PFLlib option; the list: `fedgmh options ALGORITHM`",
    )
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument(
        "--store",
        action="append",
        default=[],
        metavar="DIR",
        help="folder of finished run records (repeatable): a record of exactly this run is copied to OUT instead of training",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in OUT: a finished run of other settings (refused without this flag) or of the same "
        "settings (without it: not trained again), and a snapshot of other settings (without it: refused); a "
        "snapshot of the same settings is resumed",
    )
    p.add_argument(
        "--put-record",
        metavar="DIR",
        help="then put the run's record (trained or reused) into DIR, a folder of a store; a record of another run "
        "there stays and this one goes beside it (DIR-<digest>), as `fedgmh store put --beside-other-run`",
    )
    p.add_argument("--quiet", action="store_true", help="no per-round progress lines")
    p.add_argument(
        "--checkpoint-every",
        default=DEFAULT_CADENCE,
        metavar="K|Ss",
        help="snapshot the run to OUT/checkpoint.pt every K rounds, or (Ss) after S seconds of training since the last "
        f"snapshot, waiting longer where a snapshot would take over {100 * SNAPSHOT_SHARE:g} %% of the time; a re-run "
        f"resumes from it (0: never; default {DEFAULT_CADENCE})",
    )
    labels = p.add_argument_group("workflow labels", "where the workflow files the run: recorded in run.json under `workflow` "
                                  "(also in a record reused from a store); not part of the run, never compared")
    labels.add_argument("--config-name", help="the workflow config's name")
    labels.add_argument("--experiment", help="the experiment (table) the run is trained for")
    labels.add_argument("--setting", help="its setting id, e.g. mnist_c2_a0.5 or cifar100_c5_a0.5_beta0.1@official")
    labels.add_argument("--variant", help="its variant, for experiments with `variants`")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser(
        "train-group", help="train several runs of one setting together (e.g. seeds): one batched step for their clients",
        description="Each line of RUNS is the arguments of one `fedgmh train` command (without `fedgmh train`; # starts "
        "a comment line). The runs train in one process, each with its own record, snapshots and resume in its --out, "
        "their selected clients in one vmap step where their local training allows it (docs/workflow.md). They share "
        "the device and the data: give them the same --device, dataset and root.",
    )
    p.add_argument("runs", metavar="RUNS", help="the runs file")
    p.set_defaults(func=_cmd_train_group)

    p = sub.add_parser("serve", help="a warm server for `fedgmh train`: imports torch once, forks a process per run "
                       "(the workflow starts it; clients find it through FEDGMH_WARM_SOCKET)")
    p.add_argument("--socket", required=True, help="Unix socket path to listen on (at most about 100 characters), in a "
                   "folder only you may enter (mode 700) or one that does not exist yet (created, and removed on exit)")
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S, metavar="SECONDS",
                   help="exit after this long without a run (default %(default)s)")
    p.add_argument("--parent", type=int, metavar="PID", help="exit when this process is gone (the workflow's Snakemake)")
    p.set_defaults(func=_cmd_serve)

    from fedgmh import cli_campaign, cli_costs, cli_lease, cli_options, cli_plan, cli_report, cli_store

    cli_options.register(sub, algorithms)
    cli_report.register(sub)
    cli_costs.register(sub)
    cli_store.register(sub)
    cli_campaign.register(sub)
    cli_lease.register(sub)
    cli_plan.register(sub)
    return parser


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` (a KeyboardInterrupt) while the block runs, so both
    stop a command the same way: cleanly, with one line. A second signal stops the process at once.
    Signals ignored when the process started (a background job's SIGINT) stay ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signum, signal.SIG_DFL)  # a second Ctrl-C / SIGTERM: no clean-up, just stop
        raise Interrupted(signum)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


#: what to do about an operating-system error, by its errno
OS_ADVICE = {
    errno.ENOSPC: "the disk is full: free some space and run the same command again (a training run resumes from its last snapshot)",
    errno.EDQUOT: "the disk quota is used up: free some space and run the same command again",
    errno.EROFS: "that file system is read-only: choose a writable folder",
    errno.EACCES: "this user may not use it: check its permissions or choose another path",
    errno.EPERM: "this user may not use it: check its permissions or choose another path",
    errno.ENOTDIR: "a folder on that path is a file: choose another path",
    errno.EISDIR: "it is a folder, not a file: choose another path",
    errno.EEXIST: "a file stands where a folder is needed: choose another path",
    errno.ENOENT: "it does not exist: check the path",
    errno.ENAMETOOLONG: "a name on that path is too long for the file system: choose a shorter one",
}


#: how torch says an allocation failed (a RuntimeError: the CPU allocator's words, CUDA's OutOfMemoryError)
OUT_OF_MEMORY = r"can't allocate memory|out of memory"


def error_line(err: Exception) -> str | None:
    """The one line a command that failed with `err` prints (after `fedgmh CMD: error: `), or None when
    `err` is a bug, whose traceback is shown. The one place that turns exceptions into lines."""
    if isinstance(err, UserError):
        return _one_line(str(err))
    if isinstance(err, OSError):
        return _one_line(str(_os_error(err, OS_ADVICE.get(err.errno, "check the path"))))
    if isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and re.search(OUT_OF_MEMORY, str(err), re.I)):
        asked = re.search(r"tried to allocate [^.;]+", str(err), re.I)
        return ("out of memory" + (f" ({asked.group(0)})" if asked else "") + "; use smaller settings (e.g. fewer clients "
                "or smaller --set sizes) or a machine with more memory")
    source = getattr(err, "input_file", None)  # fedgmh.io.reading marks errors of malformed input files
    if source is not None:
        if isinstance(err, RecursionError):
            what = "it is nested too deeply to read"
        elif isinstance(err, UnicodeDecodeError):
            what = "it is not UTF-8 text"
        elif isinstance(err, KeyError):
            what = f"it lacks {err.args[0]!r}" if err.args else "a field is missing"
        else:
            what = f"{type(err).__name__}: {err}"
        return _one_line(f"{source} is malformed ({what}); was it written by fedgmh, and completely?")
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None, *, warm: bool = True) -> int:
    """The command's exit status. `warm=False`: run `train` here even when FEDGMH_WARM_SOCKET names a server."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version (0) and usage errors (2, message already printed)
        return stop.code if isinstance(stop.code, int) else 2
    except ParseStop as err:  # a usage error with advice: one line, no usage dump
        print(f"{err.prog}: error: {_one_line(str(err))}", file=sys.stderr)
        return 2
    try:
        if warm and args.command == "train":
            from fedgmh.warm import run_on_server

            status = run_on_server(list(sys.argv[1:] if argv is None else argv), args.device)
            if status is not None:
                return status
        with _signals_interrupt():
            args.func(args)
    except BrokenPipeError as err:
        if err.filename is not None:  # a named file: an error as any other
            print(f"fedgmh {args.command}: error: {error_line(err)}", file=sys.stderr)
            return 2
        # the reader of our output is gone (`fedgmh plan --list | head`): stop quietly, as a shell tool would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: one line, exit 128 + signal (130, 143)
        print(f"fedgmh {args.command}: {getattr(err, 'message', 'interrupted')}", file=sys.stderr)
        return 128 + getattr(err, "signum", signal.SIGINT)
    except Exception as err:
        line = error_line(err)
        if line is None:
            raise
        print(f"fedgmh {args.command}: error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
