"""The paper's tables so far: the full-protocol records committed under paper_artifacts/, reported
without training (`snakemake so_far`, workflow/rules/so_far.smk; docs/results.md).

`SoFar.discover()` finds the records, once, in the working directory (the repository root): the
relative folders go into the results' `run_dir` column as they are.

- Table 2 (the paper's text): the records of runs/table2/ of the paper config (paper/) and of
  config/table2_mnist.yaml (table2_mnist/); a run held by both counts once, paper/'s.
- Table 5: the ablations' records (paper/runs/table5/), with FedGMH's column from Table 2's FedGMH
  runs of the same settings (the workflow's Table 5 job for FedGMH reuses Table 2's record).
- PFLlib's reading (`preset=official`, scored as the official code scores: best of the last 20
  rounds): Table 2 from paper/runs/table2_pflib/; FedGMH, where Table 2's reading has no run of
  it, from Table 5's (paper/runs/table5_pflib/: the same training, every round evaluated); Table 5
  from paper/runs/table5_pflib/.
- Only `seed<k>` folders count: a record the workflow filed beside another run's (`seed<k>-<digest>`,
  after a config edit) is not one of the table's runs.

What is written follows from the records found (`SoFar.outputs`): Figure 3 and the rounds to
target when CIFAR-100 ExDir(5, 0.5) has runs, FedGMH and FedPer on MNIST seed by seed when MNIST
has either, each reading's tables when it has records; the comparison and the claims always.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedgmh.errors import UserError
from fedgmh.filing import parse_setting_id

ARTIFACTS = Path("paper_artifacts")
#: the configs whose Table 2 records count, the first one's when both hold a run
TABLE2_CONFIGS = ("paper", "table2_mnist")
REFERENCE = "reference/fedgmh_paper_tables.csv"
CLAIMS = "reference/fedgmh_paper_claims.yaml"
#: the paper config, whose `rounds_to_target.paper` gives the paper's rounds to the targets
PAPER_CONFIG = "config/config.yaml"
OFFICIAL = "official"  # the variant of PFLlib's reading's runs
#: PFLlib's reading's scoring: best over the last 20 rounds, the rounds the official FedGMH code evaluates
BEST_OF_LAST = 20
#: Figures 3 and 4 and the rounds to target: CIFAR-100 ExDir(5, 0.5), targets 70 and 75 %
FIGURE_SETTING = "cifar100_c5_a0.5"
TARGETS = (70.0, 75.0)
#: FedGMH and FedPer on MNIST, seed by seed (they differ by tenths of a point)
PAIR_SETTINGS, PAIR_ALGORITHMS = ("mnist_c2_a0.5", "mnist_c2_a5"), ("fedgmh", "fedper")
#: datasets that could not be obtained on the machines that made the records: their claims read
#: "data unavailable offline", not "not run"
UNAVAILABLE = ("cifar10",)
#: Figure 3: PFLlib's FedAMP and FedGH beside Table 2's runs (the paper's numbers of those two are PFLlib's
#: reading's), and FedProx named for what it is with the paper's mu
OVERLAY_ALGORITHMS = ("fedamp", "fedgh")
FIGURE3_LABELS = {"fedprox": "FedProx (mu = 0, = FedAvg)"}
TEXT, PFLLIB = "the paper's text", "PFLlib's reading"
CIFAR100 = "CIFAR-100 ExDir(5, 0.5)"
SCORING_TEXT = ("> **Scoring, the paper's text**: every method's accuracy is its best over all its evaluated rounds (every\n"
                "> round is evaluated), as the paper's section 3.1 reports it.\n\n")
SCORING_PFLLIB = (
    "> **PFLlib's reading**: every \"ours\" below is a run with `preset=official` (PFLlib's code, as the\n"
    "> paper's authors ran it: e.g. `drop_last`; docs/baselines.md), not Table 2's runs (comparison.md),\n"
    "> judged against the paper's protocol read the same way (`fedgmh compare --reading official`).\n"
    "> **Scoring, PFLlib's reading**: every method's accuracy is its best over its last 20 rounds, the rounds the\n"
    "> official FedGMH code evaluates (PFLlib evaluates every round; one rule for every method: `--best-of-last 20`).\n\n")


@dataclass(frozen=True)
class Record:
    """A committed run record: paper_artifacts/<config>/runs/<experiment>/<setting>/<algorithm>/seed<k>."""

    config: str
    experiment: str
    setting: str
    algorithm: str
    seed: str  # the folder's name, seed<k>

    @property
    def folder(self) -> str:
        return f"{ARTIFACTS.as_posix()}/{self.config}/runs/{self.run}"

    @property
    def run(self) -> str:
        """The run's path below runs/: the same run in two configs' folders."""
        return f"{self.experiment}/{self.cell_run}"

    @property
    def cell_run(self) -> str:
        """The run's path below its experiment's folder: the same run in two experiments."""
        return f"{self.setting}/{self.algorithm}/{self.seed}"

    @property
    def variant(self) -> str:
        return parse_setting_id(self.setting).variant

    @property
    def cell(self) -> str:
        """The setting without its variant: the setting id `fedgmh aggregate` gives the run."""
        return parse_setting_id(self.setting).without_variant


def records(config: str, experiment: str) -> list[Record]:
    """The records of `experiment` committed for `config`, in byte order of their folders; only
    `seed<k>` folders (not `seed<k>-<digest>`, a record filed beside another run's after a config edit)."""
    runs = ARTIFACTS / config / "runs" / experiment
    found = [Record(config, experiment, *path.relative_to(runs).parts[:3]) for path in runs.glob("*/*/seed*/run.json")]
    for record in found:
        try:
            parse_setting_id(record.setting)
        except ValueError as err:
            raise UserError(f"{record.folder}: {err}") from None
    return sorted((record for record in found if record.seed[len("seed"):].isdigit()), key=lambda record: record.folder)


def _in_order(found: Iterable[Record]) -> list[Record]:
    return sorted(found, key=lambda record: record.folder)


def _any_on(found: list[Record], settings: Sequence[str], algorithms: Sequence[str] = ()) -> bool:
    """Whether a record is of one of `settings` (its variant aside) and, if given, of one of `algorithms`."""
    return any(r.cell in settings and (not algorithms or r.algorithm in algorithms) for r in found)


def _folders(found: list[Record]) -> list[str]:
    return [record.folder for record in found]


@dataclass(frozen=True)
class SoFar:
    """The records of each table and reading (`discover`), and what they give (`outputs`, `write`)."""

    table2: list[Record]
    table5: list[Record]
    table2_official: list[Record]
    table5_official: list[Record]

    @classmethod
    def discover(cls) -> SoFar:
        """The records committed in the working directory's paper_artifacts/ (the module's docstring)."""
        by_run: dict[str, Record] = {}
        for config in TABLE2_CONFIGS:  # the first config's record of a run held by both
            for record in records(config, "table2"):
                by_run.setdefault(record.run, record)
        table2 = [by_run[run] for run in sorted(by_run)]  # in byte order of the runs, as one config's
        ablations = records("paper", "table5")
        settings = {record.setting for record in ablations}
        table5 = ablations + _in_order(r for r in table2 if r.algorithm == "fedgmh" and r.setting in settings) if ablations else []
        table2_official = [r for r in records("paper", "table2_pflib") if r.variant == OFFICIAL]
        table5_official = [r for r in records("paper", "table5_pflib") if r.variant == OFFICIAL]
        held = {record.cell_run for record in table2_official}
        stand_ins = [r for r in table5_official if r.algorithm == "fedgmh" and r.cell_run not in held]
        return cls(table2, table5, _in_order(table2_official + stand_ins), table5_official)

    @property
    def every_record(self) -> list[str]:
        return sorted(set(_folders(self.table2 + self.table5 + self.table2_official + self.table5_official)))

    @property
    def official_readings(self) -> bool:
        return bool(self.table2_official or self.table5_official)

    # What the records give: Figures 3 and 4 (and the rounds to target) need runs on FIGURE_SETTING,
    # the MNIST figure a run of FedGMH or FedPer on PAIR_SETTINGS
    @property
    def figure3(self) -> bool:
        return _any_on(self.table2, [FIGURE_SETTING])

    @property
    def figure4(self) -> bool:
        return _any_on(self.table5, [FIGURE_SETTING])

    @property
    def figure3_official(self) -> bool:
        return _any_on(self.table2_official, [FIGURE_SETTING])

    @property
    def figure4_official(self) -> bool:
        return _any_on(self.table5_official, [FIGURE_SETTING])

    @property
    def pair(self) -> bool:
        return _any_on(self.table2, PAIR_SETTINGS, PAIR_ALGORITHMS)

    @property
    def pair_official(self) -> bool:
        return _any_on(self.table2_official, PAIR_SETTINGS, PAIR_ALGORITHMS)

    def outputs(self) -> list[str]:
        """The file names written into the output folder."""
        names = ["table2_results.csv", "comparison.md", "comparison.csv", "claims.md", "claims.csv"]
        names += ["table5_results.csv"] if self.table5 else []
        names += ["figure3.pdf", "figure3.png", "rounds_to_target.tex", "rounds_to_target.csv"] if self.figure3 else []
        names += ["figure4.pdf", "figure4.png"] if self.figure4 else []
        names += ["table2_pflib_results.csv"] if self.table2_official else []
        names += ["figure3_official.pdf", "figure3_official.png", "rounds_to_target_official.tex",
                  "rounds_to_target_official.csv"] if self.figure3_official else []
        names += ["table5_pflib_results.csv"] if self.table5_official else []
        names += ["figure4_official.pdf", "figure4_official.png"] if self.figure4_official else []
        names += ["comparison_pflib.md", "comparison_pflib.csv", "claims_pflib.csv"] if self.official_readings else []
        names += ["fedgmh_fedper_mnist.pdf", "fedgmh_fedper_mnist.png"] if self.pair else []
        return names

    def write(self, out: Path | str, log: Path | str | None = None) -> None:
        """Every file of `outputs` into `out`, from the records found (the intermediate curves and
        costs in a temporary folder); with `log`, what it prints goes there."""
        if not self.table2:
            raise UserError(f"no full-protocol record of Table 2 is committed under {ARTIFACTS}/{{{','.join(TABLE2_CONFIGS)}}}/runs/table2")
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            if log is not None:
                handle = stack.enter_context(open(log, "w", encoding="utf-8"))
                stack.enter_context(contextlib.redirect_stdout(handle))
                stack.enter_context(contextlib.redirect_stderr(handle))
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            _Writer(self, out, scratch).write()


class _Writer:
    """The steps of `SoFar.write`, in order: each reading's tables and figures, then the claims."""

    def __init__(self, so_far: SoFar, out: Path, scratch: Path) -> None:
        self.so_far, self.out, self.scratch = so_far, out, scratch
        self.results: dict[str, list[Path]] = {"paper": [], "official": []}  # reading -> results CSVs
        self.curves: dict[str, list[Path]] = {"paper": [], "official": []}

    def write(self) -> None:
        so_far = self.so_far
        table2 = self._aggregate(so_far.table2, "table2", "paper", "table2_results.csv")
        table5 = self._aggregate(so_far.table5, "table5", "paper", "table5_results.csv") if so_far.table5 else None
        self._comparison("paper", "comparison", SCORING_TEXT)
        if so_far.figure3:
            self._rounds(table2, "rounds_to_target")
        if table5 and so_far.figure4:
            self._figure(table5, "table5", "figure4", f"Figure 4 so far: {CIFAR100}, {TEXT}", reference=True)
        official2 = None
        if so_far.table2_official:
            official2 = self._aggregate(so_far.table2_official, "table2", "official", "table2_pflib_results.csv")
        if official2 and so_far.figure3_official:
            self._figure(official2, "table2", "figure3_official", f"Figure 3 so far: {CIFAR100}, {PFLLIB} (preset=official)",
                         targets=True)
            self._rounds(official2, "rounds_to_target_official")
        if so_far.figure3:
            self._figure(table2, "table2", "figure3", f"Figure 3 so far: {CIFAR100}, {TEXT}", targets=True,
                         overlay=official2 if so_far.figure3_official else None, labels=FIGURE3_LABELS)
        if so_far.table5_official:
            official5 = self._aggregate(so_far.table5_official, "table5", "official", "table5_pflib_results.csv")
            if so_far.figure4_official:
                self._figure(official5, "table5", "figure4_official", f"Figure 4 so far: {CIFAR100}, {PFLLIB} (preset=official)",
                             reference=True)
        if so_far.official_readings:
            self._comparison("official", "comparison_pflib", SCORING_PFLLIB)
        if so_far.pair:
            self._pair(with_official=so_far.pair_official)
        self._claims()

    def _aggregate(self, found: list[Record], experiment: str, reading: str, name: str) -> Path:
        """The records' results CSV (into the output folder) and curves CSV (scratch); returns the curves'."""
        from fedgmh.report.runs import write_aggregate

        curves = self.scratch / f"{reading}_{experiment}.curves.csv"
        official = reading == "official"
        write_aggregate(_folders(found), self.out / name, curves_out=curves, experiment=experiment, preset_evaluation=official,
                        best_of_last=BEST_OF_LAST if official else None)
        self.results[reading].append(self.out / name)
        self.curves[reading].append(curves)
        print(f"so_far: {len(found)} runs of {experiment}, {reading} reading -> {self.out / name}")
        return curves

    def _comparison(self, reading: str, name: str, scoring: str) -> None:
        from fedgmh.io import write_text
        from fedgmh.report.compare import write_comparison

        markdown = self.scratch / f"{name}.md"
        write_comparison(self.results[reading], REFERENCE, markdown, out_csv=self.out / f"{name}.csv", reading=reading)
        write_text(scoring + markdown.read_text(), self.out / f"{name}.md")
        print(f"so_far: the paper's cells, {reading} reading -> {self.out / name}.md, .csv")

    def _rounds(self, curves: Path, name: str) -> None:
        from fedgmh.report.to_target import write_rounds_to_target

        write_rounds_to_target(curves, "table2", FIGURE_SETTING, TARGETS, self.out / f"{name}.tex", out_csv=self.out / f"{name}.csv",
                               paper=paper_rounds())
        print(f"so_far: rounds to {TARGETS} % -> {self.out / name}.tex, .csv")

    def _figure(self, curves: Path, experiment: str, name: str, title: str, targets: bool = False,
                reference: bool = False, overlay: Path | None = None, labels: dict[str, str] | None = None) -> None:
        """Accuracy per round on FIGURE_SETTING, with the targets and the paper's rounds (Figure 3) or the
        paper's values (Figure 4) marked, and OVERLAY_ALGORITHMS of PFLlib's reading's `overlay` curves."""
        from fedgmh.report.figures import plot_curves
        from fedgmh.report.marks import Marks
        from fedgmh.report.paper import read_reference
        from fedgmh.report.runs import read_curves

        beside = read_curves(overlay) if overlay is not None else None
        marks = Marks(targets=list(TARGETS) if targets else [], paper_rounds=paper_rounds() if targets else {},
                      overlay=beside[beside["algorithm"].isin(OVERLAY_ALGORITHMS)] if beside is not None else None,
                      overlay_name=PFLLIB, labels=labels or {}, reference=read_reference(REFERENCE) if reference else None)
        plot_curves(read_curves(curves), self.out / f"{name}.pdf", png=self.out / f"{name}.png", settings=[FIGURE_SETTING],
                    experiment=experiment, title=title, marks=marks)
        print(f"so_far: {title} -> {self.out / name}.pdf, .png")

    def _pair(self, with_official: bool) -> None:
        from fedgmh.report.paper import read_reference
        from fedgmh.report.runs import read_results
        from fedgmh.report.seed_rows import plot_seed_rows

        sources = [(TEXT, read_results(self.out / "table2_results.csv"))]
        if with_official:
            sources.append((PFLLIB, read_results(self.out / "table2_pflib_results.csv")))
        plot_seed_rows(sources, read_reference(REFERENCE), "table2", PAIR_SETTINGS, PAIR_ALGORITHMS, self.out / "fedgmh_fedper_mnist.pdf",
                       png=self.out / "fedgmh_fedper_mnist.png",
                       title="FedGMH and FedPer on MNIST, the paper's protocol: each seed (dot), our mean (bar), "
                             "the paper's mean ± std (diamond)")
        print(f"so_far: FedGMH and FedPer on MNIST seed by seed -> {self.out}/fedgmh_fedper_mnist.pdf, .png")

    def _claims(self) -> None:
        """The paper's claims under both readings, one row each; section 2.3's costs computed from the models."""
        from fedgmh.costs import cost_table
        from fedgmh.io import write_csv
        from fedgmh.report.claims_readings import write_claims

        costs = self.scratch / "costs.csv"
        write_csv(cost_table(), costs)
        readings = {"paper": (self.results["paper"], self.curves["paper"])}
        csvs = {"paper": self.out / "claims.csv"}
        if self.so_far.official_readings:
            readings["official"] = (self.results["official"], self.curves["official"])
            csvs["official"] = self.out / "claims_pflib.csv"
        write_claims(CLAIMS, readings, self.out / "claims.md", csvs, costs=costs, datasets_unavailable=UNAVAILABLE,
                     title="The paper's claims on the full-protocol records committed so far, under both readings")
        print(f"so_far: the paper's claims -> {self.out}/claims.md, {', '.join(path.name for path in csvs.values())}")


def paper_rounds() -> dict[str, list[float]]:
    """The paper's rounds to the targets (the paper config's `rounds_to_target.paper`)."""
    import yaml

    with open(PAPER_CONFIG, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["rounds_to_target"]["paper"]
