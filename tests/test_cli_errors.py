"""Issue 26, items 10 and 11: bad input, a full disk, odd files and memory-hungry options end `fedgmh`
with one line on stderr (exit status 2), never a traceback or a hang; a snapshot resumes whatever
the paths it is named by."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from conftest import Digits, artifact_args, cli_error, prepare_digits, train_args

from fedgmh.cli import main


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    """A folder of the embedded data set (data/), a 4-client partition of it (part.npz), one finished
    1-round FedAvg run (run/) and its aggregate (results.csv, curves.csv)."""
    root = tmp_path_factory.mktemp("errors")
    assert main(train_args(prepare_digits(root), root / "run")) == 0
    assert main(["aggregate", "--runs", str(root / "run"), "--out", str(root / "results.csv"),
                 "--curves", str(root / "curves.csv")]) == 0
    return root


@pytest.fixture(scope="module")
def digits(setup) -> Digits:
    return Digits(setup / "data", setup / "part.npz")


class Hung(Exception):
    pass


@pytest.fixture
def no_hang():
    """Fail (instead of hanging the test session) when the test takes more than a minute."""
    def timeout(signum, frame):
        raise Hung("fedgmh hung")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------ item 10: the results store


def _refuse_writes(kind: str, tmp_path: Path, monkeypatch) -> tuple[Path, str]:
    """A store folder that cannot be written, and what the error line must say about it."""
    if kind == "under a file":
        (tmp_path / "taken").write_text("a file")
        return tmp_path / "taken" / "store", "a folder on that path is a file"
    if kind == "read-only":
        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(kwargs.get("dir", args[-1] if args else "")))

        monkeypatch.setattr("tempfile.mkstemp", read_only)  # what a read-only file system answers
        return tmp_path / "store", "Read-only file system"

    def full_disk(self, data):  # a write that stops on a full disk (ENOSPC) after a few bytes
        with open(self, "wb") as handle:
            handle.write(data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", full_disk)
    return tmp_path / "store", "No space left on device"


@pytest.mark.parametrize("verb", ["merge", "put"])
@pytest.mark.parametrize("kind", ["under a file", "read-only", "full disk"])
def test_a_store_that_cannot_be_written_is_one_line(setup, tmp_path, monkeypatch, capsys, verb, kind):
    into, reason = _refuse_writes(kind, tmp_path, monkeypatch)
    argv = ["store", "merge", str(setup), "--into", str(into)] if verb == "merge" else \
        ["store", "put", str(setup / "run"), str(into / "run")]
    err = cli_error(capsys, argv)
    assert err.startswith("fedgmh store: error: ") and reason in err and str(into) in err, err
    if into.is_dir():  # nothing half-written: no record, no temporary
        assert not [path for path in into.rglob("*") if path.is_file()]


@pytest.mark.parametrize("where", ["mistyped", "under a file", "a file"])
def test_store_check_of_a_store_that_is_not_a_folder_is_one_line(tmp_path, capsys, where):
    """A mistyped store is not an empty one: `store check` must not pass it as "0 records"."""
    (tmp_path / "store").mkdir()
    (tmp_path / "notes.txt").write_text("a file")
    named = {"mistyped": tmp_path / "stroe", "under a file": tmp_path / "notes.txt" / "store", "a file": tmp_path / "notes.txt"}[where]
    err = cli_error(capsys, ["store", "check", str(tmp_path / "store"), str(named)])
    assert f"{named} is not a folder of run records" in err, err


def test_deeply_nested_or_malformed_records_are_listed_by_store_check(setup, tmp_path, capsys):
    for name, text in (("nested", "[" * 100_000 + "]" * 100_000), ("list", "[]")):
        shutil.copytree(setup / "run", tmp_path / name)
        (tmp_path / name / "run.json").write_text(text)
    assert main(["store", "check", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert f"invalid: {tmp_path / 'nested' / 'run.json'} is not valid JSON" in out, out
    assert f"invalid: {tmp_path / 'list' / 'run.json'} does not hold a JSON object" in out and "2 invalid" in out, out
    assert err.count("\n") == 1


# ----------------------------------------------------------- item 10: aggregate, compare, curves


def _seed_not_a_number(record: bytes) -> bytes:
    return json.dumps({**json.loads(record), "seed": "x"}).encode()


@pytest.mark.parametrize(
    "file,content",
    [
        ("run.json", b"[" * 100_000 + b"]" * 100_000),
        ("run.json", _seed_not_a_number),
        ("metrics.csv", b"\x00\x01\xff\xfe\n"),
        ("metrics.csv", b"round,test_acc\nx,y\n"),
        ("metrics.csv", b""),
    ],
    ids=["nested-json", "seed-not-a-number", "binary-csv", "text-in-numbers", "empty-csv"],
)
def test_aggregate_of_a_malformed_run_is_one_line_naming_it(setup, tmp_path, capsys, file, content):
    run = tmp_path / "broken"
    shutil.copytree(setup / "run", run)
    (run / file).write_bytes(content(run.joinpath(file).read_bytes()) if callable(content) else content)
    err = cli_error(capsys, ["aggregate", "--runs", str(run), "--out", str(tmp_path / "r.csv")])
    assert str(run) in err, err
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize("content", [b"\x00\x01\xff\xfe\n", b"", b"experiment,setting\n" + b"x," * 10 + b"\n"],
                         ids=["binary", "empty", "ragged"])
def test_compare_and_table_of_a_malformed_results_file_are_one_line_naming_it(setup, tmp_path, capsys, content):
    results = tmp_path / "results.csv"
    results.write_bytes(content)
    reference = Path(__file__).resolve().parents[1] / "reference" / "fedgmh_paper_tables.csv"
    err = cli_error(capsys, ["compare", "--results", str(results), "--reference", str(reference), "--out", str(tmp_path / "c.md")])
    assert str(results) in err
    job = artifact_args("table", {"results": results}, {"tex": tmp_path / "t.tex"}, {"experiment": "x", "title": "x", "accuracy": "best"})
    err = cli_error(capsys, job)
    assert str(results) in err


def test_a_title_with_tex_syntax_is_drawn_literally(setup, tmp_path, monkeypatch):
    import matplotlib.figure

    title, drawn = r"$\foo$ costs 50% & more", []
    save = matplotlib.figure.Figure.savefig

    def saved(fig, *args, **kwargs):
        drawn.append(fig.get_suptitle())
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", saved)
    assert main(["curves", "--curves", str(setup / "curves.csv"), "--out", str(tmp_path / "c.png"), "--title", title]) == 0
    assert drawn == [title] and (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


# --------------------------------------------------------------------- item 10: fedgmh train


@pytest.mark.parametrize("device", ["meta", "mps", "xla", "cpu:0:1"])
def test_unsupported_devices_are_refused_listing_the_supported_ones(digits, tmp_path, capsys, device):
    err = cli_error(capsys, train_args(digits, tmp_path / "run", "--device", device))
    assert f"device {device!r}" in err and "cpu, cuda, cuda:N, cuda:auto or auto" in err, err
    assert not (tmp_path / "run").exists()


class StoppedDisk:
    """A file whose writes stop after `room` bytes with `stop` (a full disk's OSError, a Ctrl-C)."""

    def __init__(self, path, mode, room, stop):
        self.handle, self.room, self.stop = open(path, mode), room, stop

    def write(self, data):
        if len(data) > self.room:
            raise self.stop
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


@pytest.mark.parametrize("stop", ["full disk", "ctrl-c"])
def test_a_snapshot_write_that_fails_is_one_line_and_keeps_the_previous_snapshot(digits, tmp_path, monkeypatch, capsys, stop):
    """torch.save reports whatever stops a write as a RuntimeError about zip positions: the line says
    what happened (the disk is full; interrupted), and the run resumes from the snapshot before."""
    from fedgmh.engine import Checkpoint, checkpoint as checkpoint_room

    out, saves, real_save = tmp_path / "run", [], Checkpoint.save
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) if stop == "full disk" else KeyboardInterrupt()

    def second_save_fails(self, snapshot):
        saves.append(snapshot["next_round"])
        if len(saves) == 2:
            monkeypatch.setattr(checkpoint_room, "open", lambda path, mode: StoppedDisk(path, mode, 1000, error), raising=False)
        real_save(self, snapshot)

    monkeypatch.setattr(Checkpoint, "save", second_save_fails)
    if stop == "full disk":
        err = cli_error(capsys, train_args(digits, out, "--checkpoint-every", "1", rounds=4))
        assert f"{out / 'checkpoint.pt'}" in err and "No space left on device" in err and "resume" in err, err
    else:
        assert main(train_args(digits, out, "--checkpoint-every", "1", rounds=4)) == 130
        assert capsys.readouterr().err == "fedgmh train: interrupted at round 1; the same command resumes from the checkpoint\n"
    assert saves == [1, 2]
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt"]  # no temporary, no record
    assert main(train_args(digits, out, "--checkpoint-every", "1", rounds=4)) == 0
    assert json.loads((out / "run.json").read_text())["resumed_from_round"] == 1  # the previous snapshot, intact


def test_a_hypernetwork_too_large_for_any_memory_is_refused(digits, tmp_path, capsys):
    err = cli_error(capsys, train_args(digits, tmp_path / "run", "--set", "embedding_dim=1000000000", algorithm="pfedla"))
    assert "embedding_dim" in err and "1000000000" in err and "from 1 to 4096" in err, err


def test_running_out_of_memory_is_one_line(digits, tmp_path, monkeypatch, capsys):
    from fedgmh import train

    def allocate(*args, **kwargs):  # torch's CPU allocator's words
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 400000000000 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(train, "build_federation", allocate)
    err = cli_error(capsys, train_args(digits, tmp_path / "run"))
    assert "out of memory" in err and "400000000000 bytes" in err, err


# --------------------------------------------------------------------------------- item 11


@pytest.mark.parametrize("name", ["run.json", "checkpoint.pt"])
def test_a_fifo_in_the_output_folder_is_refused_without_hanging(digits, tmp_path, capsys, no_hang, name):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / name)
    err = cli_error(capsys, train_args(digits, out))
    assert str(out / name) in err and "not a regular file" in err, err


def test_a_negative_checkpoint_interval_is_refused(digits, tmp_path, capsys):
    err = cli_error(capsys, train_args(digits, tmp_path / "run", "--checkpoint-every", "-1"))
    assert "--checkpoint-every -1" in err and ">= 0" in err
    assert not (tmp_path / "run").exists()


def snapshot_of_an_interrupted_run(digits: Digits, out: Path, monkeypatch, capsys, stop_round: int) -> None:
    """A 3-round run in `out` stopped by Ctrl-C as round `stop_round` starts: a snapshot to resume from."""
    from fedgmh.engine import play_round

    def ctrl_c(fed, algorithm, rnd, *args, **kwargs):
        if rnd == stop_round:
            raise KeyboardInterrupt
        return play_round(fed, algorithm, rnd, *args, **kwargs)

    monkeypatch.setattr("fedgmh.engine.rounds.play_round", ctrl_c)
    assert main(train_args(digits, out, "--checkpoint-every", "1", rounds=3)) == 130
    monkeypatch.undo()
    capsys.readouterr()


def test_a_snapshot_resumes_when_the_same_files_are_named_by_other_paths(setup, digits, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    snapshot_of_an_interrupted_run(digits, out, monkeypatch, capsys, stop_round=2)
    monkeypatch.chdir(setup)
    other_names = ["train", "--dataset", "digits", "--root", "./data/", "--partition", "../" + setup.name + "/part.npz",
                   "--algorithm", "fedavg", "--rounds", "3", "--local-epochs", "1", "--join-ratio", "0.5", "--threads", "1",
                   "--quiet", "--device", "cpu", "--checkpoint-every", "1", "--out", str(out)]
    assert main(other_names) == 0, capsys.readouterr().err
    assert json.loads((out / "run.json").read_text())["resumed_from_round"] == 2


def test_a_snapshot_of_other_settings_is_still_refused(setup, digits, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    snapshot_of_an_interrupted_run(digits, out, monkeypatch, capsys, stop_round=1)
    err = cli_error(capsys, train_args(digits, out, "--checkpoint-every", "1", "--lr", "0.02", rounds=3))
    assert "belongs to a run with other settings" in err


def test_an_alpha_too_large_to_draw_says_so_and_gives_the_range(setup, tmp_path, capsys):
    err = cli_error(capsys, ["partition", "--dataset", "digits", "--root", str(setup / "data"), "--clients", "4",
                                  "--classes-per-client", "3", "--alpha", "1e308", "--out", str(tmp_path / "p.npz")])
    assert "--alpha 1e+308" in err and "(0, 1e+100]" in err and "larger alpha" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_finite_difference_step_that_vanishes_is_refused_with_its_range(digits, tmp_path, capsys):
    err = cli_error(capsys, train_args(digits, tmp_path / "run", "--set", "order=hf", "--set", "delta=1e-300",
                                            algorithm="perfedavg"))
    assert "delta" in err and "1e-300" in err and "--lr" not in err and ">= 1.19209e-07" in err, err


def test_a_repeated_set_key_is_refused_naming_it(digits, tmp_path, capsys):
    err = cli_error(capsys, train_args(digits, tmp_path / "run", "--set", "lr_decay=0.5", "--set", "lr_decay=0.9"))
    assert "--set lr_decay" in err and "more than once" in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("tool", "arguments", "message"), [
    ("sample_passes.py", ["{partition}", "--batch-size", "0"], "batch size must be >= 1, got 0"),
    ("sample_passes.py", ["{partition}", "--join-ratio", "1.5"], "join ratio must be in (0, 1], got 1.5"),
    ("sample_passes.py", ["{missing}"], "partition file {missing} not found"),
    ("pflib_compare/export_run.py", ["--dataset", "digits", "--root", "{root}", "--partition", "{partition}", "--rounds", "3",
                                     "--lr", "-1", "--work", "{work}"], "learning rate must be a finite number > 0, got -1.0"),
    ("pflib_compare/export_run.py", ["--dataset", "digits", "--root", "{root}", "--partition", "{partition}", "--rounds", "0",
                                     "--work", "{work}"], "rounds must be >= 1"),
])
def test_the_tools_refuse_bad_arguments_in_one_line_as_the_cli_does(digits, tmp_path, tool, arguments, message):
    import subprocess
    import sys

    places = {"partition": str(digits.partition), "root": str(digits.data), "missing": str(tmp_path / "none.npz"),
              "work": str(tmp_path / "work")}
    tools = Path(__file__).resolve().parents[1] / "tools"
    done = subprocess.run([sys.executable, str(tools / tool), *(word.format(**places) for word in arguments)],
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"{Path(tool).name}: error: {message.format(**places)}")
    assert not (tmp_path / "work").exists()


# ------------------------------------------------------------------ bad paths and values, before any work


@pytest.mark.parametrize("flag", ["--store", "--put-record"])
def test_a_store_path_that_is_a_file_is_refused_before_training(digits, tmp_path, capsys, flag):
    """`--store FILE` trained as if nothing were stored; `--put-record` under a file failed after training."""
    (tmp_path / "afile").write_text("not a store")
    err = cli_error(capsys, train_args(digits, tmp_path / "run", flag, str(tmp_path / "afile")))
    assert f"{flag} {tmp_path / 'afile'} is a file, not a folder of run records" in err, err
    assert not (tmp_path / "run").exists()


def test_a_missing_store_is_said_and_the_run_trains(digits, tmp_path, capsys):
    assert main(train_args(digits, tmp_path / "run", "--store", str(tmp_path / "nowhere"))) == 0
    assert f"--store {tmp_path / 'nowhere'} does not exist: no record is reused from it" in capsys.readouterr().err
    assert (tmp_path / "run" / "run.json").is_file()


def test_a_file_where_a_folder_is_needed_gets_advice():
    from fedgmh.cli import error_line

    line = error_line(FileExistsError(errno.EEXIST, "File exists", "/x/afile"))
    assert line.endswith("a file stands where a folder is needed: choose another path"), line


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """`fedgmh plan --list | head -1` ended with 'cannot access (Broken pipe); check the path'."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "fedgmh.cli", "plan", "--list"]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().startswith(b"plan ")
    process.stdout.close()
    assert process.wait(timeout=300) == 128 + signal.SIGPIPE
    assert process.stderr.read() == b""


@pytest.mark.parametrize(("arguments", "words"), [(["--idle-timeout", "-1"], "--idle-timeout -1.0: a number of seconds above 0"),
                                                  (["--idle-timeout", "nan"], "--idle-timeout nan"),
                                                  (["--parent", "0"], "--parent 0: no such process")])
def test_the_warm_server_refuses_settings_that_would_stop_or_never_stop_it(tmp_path, capsys, arguments, words):
    err = cli_error(capsys, ["serve", "--socket", str(tmp_path / "s.sock"), *arguments])
    assert words in err, err
    assert not (tmp_path / "s.sock").exists()


def test_an_unreadable_snapshot_names_what_is_wrong(digits, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"")
    err = cli_error(capsys, train_args(digits, tmp_path / "run"))
    assert "checkpoint.pt is unreadable (" in err and "()" not in err, err
