"""The documentation against the code: the counts the docs state are the ones the plan and the
registry give, docs/artifacts.md lists exactly the workflow's outputs, and every relative link
resolves. A doc number that goes stale fails here (docs/testing.md)."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from fedgmh.cards import algorithm_names
from fedgmh.plan_cost import load_plan

REPO = Path(__file__).resolve().parents[1]
#: the shipped configs whose runs the docs count (campaign.yaml is a list of targets, not a config)
CONFIGS = ("config.yaml", "mini.yaml", "numerics.yaml", "smoke.yaml", "table2_full.yaml", "table2_mnist.yaml")


def doc_files() -> list[Path]:
    """README.md, docs/*.md, BENCHMARKS.md and every other tracked README."""
    try:
        tracked = subprocess.run(["git", "ls-files", "*README*"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        tracked = [str(path.relative_to(REPO)) for path in REPO.rglob("README.md") if ".venv" not in path.parts]
    files = {REPO / "README.md", REPO / "BENCHMARKS.md", *(REPO / "docs").glob("*.md"), *(REPO / name for name in tracked)}
    return sorted(path for path in files if path.suffix == ".md" and path.is_file())


@cache
def planned_runs(config: str) -> int:
    """How many runs `fedgmh plan --configfile config/<config>` trains or reuses."""
    return len(load_plan([f"config/{config}"], [], REPO).train_jobs)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def table_rows(text: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the markdown table whose first column is headed `first_header`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header:
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
            return cells, rows
    raise AssertionError(f"no table headed {first_header!r}")


def test_config_readme_counts_the_runs_the_plan_counts() -> None:
    """config/README.md's table is the one place that states each config's number of runs."""
    header, rows = table_rows((REPO / "config" / "README.md").read_text(), "file")
    column = next(i for i, name in enumerate(header) if name.startswith("runs"))
    seen = {}
    for row in rows:
        config = re.search(r"`([\w.]+\.yaml)`", row[0]).group(1)
        seen[config] = number(re.match(r"[\d,]+", row[column]).group(0))
    assert set(seen) == set(CONFIGS), "config/README.md's table lists every shipped config once"
    for config, count in seen.items():
        assert count == planned_runs(config), f"config/README.md: {config} plans {planned_runs(config)} runs, not {count}"


def test_every_training_run_count_in_the_docs_is_a_planned_one() -> None:
    """"N training runs" (a config's total) anywhere in the docs is one that `fedgmh plan` gives."""
    counts = {planned_runs(config) for config in CONFIGS}
    for path in doc_files():
        for match in re.finditer(r"(?<![\w.-])(\d[\d,]*)\s+training\s+runs\b", path.read_text()):
            assert number(match.group(1)) in counts, f"{path.relative_to(REPO)}: '{match.group(0)}' is no config's plan ({sorted(counts)})"


def test_the_readme_counts_the_registered_algorithms() -> None:
    """The README's "FedGMH, its 3 ablations, ... (23 algorithms)": the parts add up to the whole,
    and the whole is the registry's."""
    text = " ".join((REPO / "README.md").read_text().split())
    match = re.search(r"FedGMH, its (\d+) ablations, the paper's (\d+) baselines, (\d+) controls and (\d+) methods of "
                      r"related papers \((\d+) algorithms", text)
    assert match, "the README names the algorithms' parts and their total"
    *parts, total = (int(group) for group in match.groups())
    assert 1 + sum(parts) == total == len(algorithm_names())


def rule_outputs() -> set[str]:
    """The workflow's outputs under paper_artifacts/<name>/, as the rules and the report artifacts'
    declarations spell them, without the records."""
    from fedgmh.report.artifacts import artifacts

    found = {output.path for artifact in artifacts().values() for output in artifact.outputs.values()}
    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        found |= set(re.findall(r'f"\{ARTIFACTS\}/([^"]+)"', path.read_text()))
    return {name.replace("{{", "{").replace("}}", "}") for name in found}


def test_artifacts_md_lists_exactly_the_workflow_outputs() -> None:
    header, rows = table_rows((REPO / "docs" / "artifacts.md").read_text(), "file")
    listed = {name for row in rows for name in re.findall(r"`([^`]+)`", row[0])}
    outputs = rule_outputs()
    assert outputs, "the rules' outputs were found"
    assert listed == outputs, (f"docs/artifacts.md misses {sorted(outputs - listed)}, "
                               f"lists {sorted(listed - outputs)} that no rule writes")


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = "".join(ch for ch in heading.strip().lower() if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            out.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return out


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        assert dest.exists(), f"{path.relative_to(REPO)}: link to {target} does not resolve"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{path.relative_to(REPO)}: no heading #{anchor} in {dest.relative_to(REPO)}"


def _so_far():
    """The committed comparison so far (`snakemake so_far`): cells by (reading, table, setting, method),
    claims by (reading, id), and claims.md's text."""
    import pandas as pd

    so_far = REPO / "paper_artifacts" / "paper" / "so_far"
    cells = {}
    for reading, name in (("paper", "comparison.csv"), ("pflib", "comparison_pflib.csv")):
        for row in pd.read_csv(so_far / name).to_dict("records"):
            cells[(reading, row["table"], row["setting"], row["algorithm"])] = row
    claims = {reading: pd.read_csv(so_far / name, keep_default_na=False).set_index("id")
              for reading, name in (("paper", "claims.csv"), ("pflib", "claims_pflib.csv"))}
    return cells, claims, (so_far / "claims.md").read_text()


def _comparison_numbers(claims_md: str, label: str) -> list[tuple[str, float, float, float, str]]:
    """Each reading's (verdict, estimate, 90 % low, high, rest of the evidence) of one comparison in claims.md, in order."""
    pattern = re.escape(f"| {label} | ") + r"([a-z ]+) \| ([+-]?\d+\.\d+) points \(90% CI ([+-]?\d+\.\d+) to ([+-]?\d+\.\d+)\)([^|]*)\|"
    return [(m[1], float(m[2]), float(m[3]), float(m[4]), m[5]) for m in re.finditer(pattern, claims_md)]


def _first_rounds(evidence: str) -> list[int]:
    """The seeds' first rounds at a target, from a rounds claim's evidence."""
    return [int(r) for r in re.search(r"seeds' first rounds ([\d, ]+) \(", evidence)[1].split(",")]


def _number(evidence: str, pattern: str) -> float:
    match = re.search(pattern, evidence)
    assert match, f"{pattern!r} not in {evidence!r}"
    return float(match[1])


def test_the_readme_top_statements_are_those_of_the_committed_records() -> None:
    """The README's results and claims statements, number by number, against paper_artifacts/paper/so_far/
    (regenerated by `snakemake so_far`): a new record that changes one fails here until the README says so."""
    import yaml

    text = " ".join((REPO / "README.md").read_text().split())
    cells, claims, claims_md = _so_far()
    paper, pflib = claims["paper"], claims["pflib"]
    n_claims = len(yaml.safe_load((REPO / "reference" / "fedgmh_paper_claims.yaml").read_text())["claims"])

    def has(fragment: str) -> None:
        assert fragment in text, f"the README should say: {fragment}"

    # FedGMH's own accuracy
    c100, mnist, mnist5 = "CIFAR-100 ExDir(5, 0.5)", "MNIST ExDir(2, 0.5)", "MNIST ExDir(2, 5)"
    gmh = {key: cells[key] for key in [("paper", "table2", mnist, "FedGMH"), ("pflib", "table2", mnist, "FedGMH"),
                                       ("paper", "table2", mnist5, "FedGMH"), ("paper", "table2", c100, "FedGMH"),
                                       ("pflib", "table2", c100, "FedGMH")]}
    statuses = [row["status"] for row in gmh.values()]
    assert statuses == ["reproduced"] * 3 + ["inconclusive"] * 2, statuses
    (text_m, pflib_m, text_m5, text_c, pflib_c) = gmh.values()
    has(f"reproduces on MNIST (ExDir(2, 0.5): {text_m['our_mean']:.2f} as the paper's text describes the method and "
        f"{pflib_m['our_mean']:.2f} as its authors' code runs it, against the paper's {text_m['paper_mean']:.2f}; ExDir(2, 5): "
        f"{text_m5['our_mean']:.2f} against {text_m5['paper_mean']:.2f})")
    has(f"inconclusive on CIFAR-100 ExDir(5, 0.5) ({text_c['our_mean']:.2f} at {int(text_c['n_seeds'])} seeds and "
        f"{pflib_c['our_mean']:.2f} at {int(pflib_c['n_seeds'])} against {text_c['paper_mean']:.2f})")
    text_c5 = cells[("paper", "table2", "CIFAR-100 ExDir(5, 5)", "FedGMH")]
    assert text_c5["status"] == "not reproduced", text_c5["status"]
    below_fedgh = _number(paper.loc["t2-best-cifar100-5-5", "evidence"], r"FedGMH > FedGH \(table2/cifar100_c5_a5\): -([\d.]+) points")
    has(f"On ExDir(5, 5), as the paper's text describes the methods, it is not reproduced ({text_c5['our_mean']:.2f} at "
        f"{int(text_c5['n_seeds'])} seeds against {text_c5['paper_mean']:.2f}) and {below_fedgh:.2f} points below FedGH.")

    # the claims, counted
    def count(table, verdict: str, status: str | None = None) -> int:
        rows = table[table.verdict == verdict]
        return int(len(rows) if status is None else (rows.robustness == status).sum())

    decided = {name: count(t, "holds") + count(t, "does not hold") for name, t in claims.items()}
    exact, robust = count(paper, "holds", "exact") + count(paper, "does not hold", "exact"), int((paper.robustness == "robust").sum())
    has(f"({n_claims} in our words")
    has(f"As the paper's text describes the methods: {count(paper, 'holds')} hold, {count(paper, 'does not hold')} do not, "
        f"{count(paper, 'inconclusive')} are inconclusive, {count(paper, 'not run')} not run and "
        f"{count(paper, 'data unavailable offline')} on CIFAR-10, whose data could not be obtained offline; of the "
        f"{decided['paper']} decided verdicts {exact} are exact and {robust} robust.")
    p_exact = int(pflib.robustness.eq("exact").sum())
    has(f"Under PFLlib's reading: {count(pflib, 'holds')} hold, {count(pflib, 'does not hold')} do not, "
        f"{count(pflib, 'inconclusive')} inconclusive; of the {decided['pflib']} decided {p_exact} are exact and "
        f"{int(pflib.robustness.eq('robust').sum())} robust.")

    # the gaps
    official = [cells[("pflib", "table2", c100, m)] for m in ("FedAMP", "FedGH")] + [cells[("pflib", "table5", c100, m)]
                                                                                    for m in ("GMH-o", "GMH-a")]
    seeds = sorted({int(row["n_seeds"]) for row in official})
    assert {row["status"] for row in official} == {"inconclusive"}
    has(f"land within {max(abs(row['diff']) for row in official):.2f} points of the paper, inconclusive at "
        f"{' or '.join(map(str, seeds)) if len(seeds) < 3 else f'{seeds[0]} to {seeds[-1]}'} seeds")
    as_text = [abs(cells[("paper", "table2", c100, m)]["diff"]) for m in ("FedAMP", "FedGH")]
    as_text.append(abs(cells[("paper", "table5", c100, "GMH-o")]["diff"]))
    has(f"FedAMP, FedGH and GMH-o are {round(min(as_text))} to {round(max(as_text))} points away")
    clients = [-cells[("pflib", "table2", mnist, m)]["clients_diff"] for m in ("FedPer", "FedGMH")]
    has(f"FedGMH and FedPer are {min(clients):.1f} to {max(clients):.1f} points below the paper on the mean over clients")
    (verdict, lead, _, _, rest), *_ = _comparison_numbers(claims_md, "FedGMH > FedPer (table2/mnist_c2_a0.5)")
    assert verdict == "inconclusive" and lead < 0
    has(f"FedPer is {-lead:.2f} points above it on MNIST ExDir(2, 0.5)")
    p_other, level = _number(rest, r"the other way p = ([\d.]+)"), _number(rest, r"refuting below ([\d.]+)")
    has(f"FedPer is {-lead:.2f} points above it over 5 seeds, but that does not refute a claim of 11 comparisons "
        f"(p = {p_other:g}, refuting below {level:g})")
    assert paper.loc["t2-best-mnist-2-0.5", "verdict"] == "inconclusive"
    (verdict, lead, low, high, _), *_ = _comparison_numbers(claims_md, "FedGMH > FedPer (table2/cifar100_c5_a0.5)")
    has(f"FedGMH leads FedPer by {lead:.2f} points [{low:.2f}, {high:.2f}]")

    # exact computations
    for claim_id, verdict in (("c-upload-100-labels", "holds"), ("c-traffic-below-model", "holds"),
                              ("c-download-100-heads", "does not hold"), ("c-compute-half-epoch", "does not hold")):
        assert (paper.loc[claim_id, "verdict"], paper.loc[claim_id, "robustness"]) == (verdict, "exact"), claim_id
    download = _number(paper.loc["c-download-100-heads", "evidence"], r"computed ([\d.]+) KB")
    compute = _number(paper.loc["c-compute-half-epoch", "evidence"], r"computed ([\d.]+) local epochs")
    has(f"({download:.2f} KB on CIFAR-100")
    has(f"({compute:.2f} local epochs, in FLOPs)")

    # convergence
    fedgh, fedgh_text = pflib.loc["f3-fedgh-no-convergence"], paper.loc["f3-fedgh-no-convergence"]
    assert (fedgh["verdict"], fedgh["robustness"], fedgh_text["verdict"], fedgh_text["robustness"]) == (
        "holds", "robust", "holds", "robust")
    times = r"swing over the last 20 rounds ([\d.]+) times"
    for row in (fedgh, fedgh_text):
        seeds = re.search(r"swing over the last 20 rounds [\d.]+ times the reference's \(seeds ([\d., ]+);", row["evidence"])
        assert min(float(x) for x in seeds.group(1).split(",")) > 2, row["evidence"]
    has(f"FedGH swings about its trend {_number(fedgh['evidence'], times):.2f} times as much as FedGMH on the same seeds "
        f"under PFLlib's reading and {_number(fedgh_text['evidence'], times):.2f} times as the paper's text describes it "
        "(both robust: every seed above twice)")
    fedavg = paper.loc["t2-fedavg-no-convergence"]
    assert fedavg["verdict"] == "inconclusive"
    rise = _number(fedavg["evidence"], r"rise over the last 50 rounds beyond the reference's \+([\d.]+) points")
    rise_p = _number(fedavg["evidence"], r"above 0 p = ([\d.]+)")
    swing = _number(fedavg["evidence"], times)
    assert rise_p > 0.025 and swing < 2
    has(f"over its last 50 rounds it rises {rise:.2f} points more than FedGMH on the same seeds (p = {rise_p:g}) and swings "
        f"{swing:.2f} times as much (twice needed)")
    oa = pflib.loc["f4-gmh-oa-no-convergence"]
    assert (oa["verdict"], paper.loc["f4-gmh-oa-no-convergence", "verdict"]) == ("holds", "inconclusive")
    has(f"GMH-oa's holds under the official code ({_number(oa['evidence'], times):.2f} times FedGMH's swing)")

    # rounds to a target
    for claim_id in ("f3-fedgmh-70", "f3-fedgmh-75", "f3-fedper-70"):
        assert paper.loc[claim_id, "verdict"] == "inconclusive" and "not refuted" in paper.loc[claim_id, "evidence"], claim_id
    first = _first_rounds(paper.loc["f3-fedgmh-70", "evidence"])
    has(f"FedGMH's seeds reach 70 % at rounds {min(first):g} to {max(first):g}")
    official_75 = pflib.loc["f3-fedgmh-75"]
    assert (official_75["verdict"], official_75["robustness"]) == ("holds", "fragile")
    has(f"under the official code its 185 holds, fragile, at {int(official_75['n_seeds'])} seeds")
    fedper_75 = paper.loc["f3-fedper-75"]
    assert (fedper_75["verdict"], fedper_75["robustness"], fedper_75["verdict_client_mean"]) == ("does not hold", "fragile", "holds")
    first = _first_rounds(fedper_75["evidence"])
    has(f"FedPer's 297 does not hold at {len(first)} seeds (rounds {min(first):g} to {max(first):g}; fragile: inconclusive "
        f"with any of {fedper_75['flips'].count('without seed')} seeds left out, holds on the mean over clients)")
    for claim_id in ("f3-fedamp-70", "f3-fedamp-75"):
        assert paper.loc[claim_id, "verdict"] == "does not hold" and "not refuted" in pflib.loc[claim_id, "evidence"], claim_id
    for claim_id in ("f3-first-70", "f3-first-75"):
        assert paper.loc[claim_id, "verdict"] == "inconclusive", claim_id
    # the sign tests: decided on 5 seeds under both readings, which differ on FedAMP before FedPer at 75 %
    signs = paper.loc[["f3-fedper-before-fedamp-70", "f3-fedamp-before-fedper-75", "f3-75-after-200"]]
    assert list(signs["verdict"]) == ["holds", "does not hold", "holds"]
    assert list(signs["robustness"]) == ["robust", "fragile", "robust"] and set(pflib.loc[signs.index, "verdict"]) == {"holds"}
    assert "PFLlib's reading: holds" in signs.loc["f3-fedamp-before-fedper-75", "flips"]
    assert "vs never, never, never, never, never" in signs.loc["f3-fedper-before-fedamp-70", "evidence"]
    has(f"FedPer before FedAMP at 70 % and \"both need over 200 rounds for 75 %\" hold (sign tests on "
        f"{int(signs['n_seeds'].iloc[0])} seeds; robust; as the paper's text describes FedAMP it never gets there); FedAMP before FedPer at 75 % does not (fragile: it holds under "
        "PFLlib's reading)")
    late, late_official = paper.loc["f4-gmh-o-late"], pflib.loc["f4-gmh-o-late"]
    assert (late["verdict"], late["robustness"], late["flips"]) == ("does not hold", "fragile", "PFLlib's reading: holds")
    assert (late_official["verdict"], late_official["robustness"]) == ("holds", "fragile")
    gmh_o = [_first_rounds(row["evidence"]) for row in (late, late_official)]
    has(f"does not hold: {len(gmh_o[0])} seeds reach 70 % at rounds {min(gmh_o[0])}-{max(gmh_o[0])} (fragile: it holds "
        f"under the official code, whose {len(gmh_o[1])} reach it at {min(gmh_o[1])}-{max(gmh_o[1])}); there GMH-a's \"a "
        "little more slowly\" holds too")
    assert (pflib.loc["f4-gmh-a-slower", "verdict"], paper.loc["f4-gmh-a-slower", "verdict"]) == ("holds", "inconclusive")

    # fragile: the ablations
    for claim_id in ("t5-ablations-below-fedgmh", "t5-multihead-matters-more", "t5-gmh-oa-lowest"):
        row = paper.loc[claim_id]
        assert (row["verdict"], row["robustness"]) == ("does not hold", "fragile") and "PFLlib's reading: holds" in row["flips"]
    (_, gap, low, high, _) = _comparison_numbers(claims_md, "FedGMH > GMH-a (table5/cifar100_c5_a0.5)")[1]
    has(f"FedGMH − GMH-a {gap:+.2f} [{low:+.2f}, {high:+.2f}] points, the smallest")

    # FedGH over the two partitions
    assert paper.loc["t2-heterogeneity-fluctuation", "verdict"] == "inconclusive"
    part = re.search(r"\| FedGH \(table2/cifar100_c5_a0\.5\) against FedGH \(table2/cifar100_c5_a5\) \| inconclusive \| "
                     r"relative_fluctuation over the last 20 rounds, geometric mean ([\d.]+) times the reference's "
                     r"\(seeds [^;]*; 90% CI ([\d.]+) to ([\d.]+)\)", claims_md)
    assert part, "claims.md lacks FedGH's part of the heterogeneity claim"
    ratio, low, high = (float(part[i]) for i in (1, 2, 3))
    has(f"FedGH swings {ratio:.2f} times as much on ExDir(5, 0.5) as on ExDir(5, 5) over seeds 0-2 (90 % interval "
        f"{low:.2f} to {high:.2f}")


def test_config_readme_describes_every_config_key() -> None:
    """Every top-level key of the workflow's schema has a row in config/README.md's Keys table, and
    the table names no key the schema lacks."""
    import yaml

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    text = (REPO / "config" / "README.md").read_text()
    keys_table = text[text.index("## Keys"):]
    _, rows = table_rows(keys_table, "key")
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row[0])}
    assert documented == set(schema["properties"]), (
        f"undocumented: {sorted(set(schema['properties']) - documented)}, unknown: {sorted(documented - set(schema['properties']))}")


def test_the_docs_stay_a_reference_of_at_most_35000_words() -> None:
    """README, docs/, BENCHMARKS.md and every other README: a reference, not a lab notebook (issue 40)."""
    tracked = subprocess.run(["git", "ls-files", "README.md", "docs/*.md", "BENCHMARKS.md", "*README*"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    words = sum(len((REPO / name).read_text().split()) for name in sorted(set(tracked)) if name.endswith(".md"))
    assert 10_000 < words <= 35_000, f"{words} words in the docs"


SO_FAR = REPO / "paper_artifacts" / "paper" / "so_far"
#: the README's names of the two readings, and the comparison of each (`snakemake so_far`)
READINGS = {"the paper's text": "comparison.csv", "PFLlib's reading": "comparison_pflib.csv"}
VERDICT_TEXT = {"reproduced": "reproduced", "not reproduced": "**not reproduced**", "inconclusive": "inconclusive"}


def judged_cells():
    """Every cell of the so-far comparisons with 3 or more seeds, under each reading, in the README's order
    (reading, dataset, table, setting, the paper's order); Table 5's FedGMH cells are Table 2's runs: left out."""
    import pandas as pd

    frames = []
    for order, (reading, name) in enumerate(READINGS.items()):
        frame = pd.read_csv(SO_FAR / name).reset_index(names="paper_order").assign(reading=reading, reading_order=order)
        frames.append(frame[(frame["n_seeds"] >= 3) & ~((frame["table"] == "table5") & (frame["algorithm"] == "FedGMH"))])
    cells = pd.concat(frames)
    cells["dataset_order"] = cells["dataset"].map({"MNIST": 0}).fillna(1)
    return cells.sort_values(["reading_order", "dataset_order", "table", "setting", "paper_order"])


def glance_row(cell) -> str:
    """One row of the README's "Results at a glance" table."""
    name = {"FedProx": "FedProx (mu = 0, i.e. FedAvg)"}.get(cell.algorithm, cell.algorithm)
    name += " (Table 5)" if cell.table == "table5" else ""
    return (f"| {name} {cell.setting} | {cell.reading} | {cell.paper_mean:.2f} ± {cell.paper_std:.2f} | "
            f"{cell.our_mean:.2f} ± {cell.our_std:.2f} ({cell.n_seeds}) | {cell.diff:+.2f} [{cell.ci_low:+.2f}, {cell.ci_high:+.2f}] | "
            f"{VERDICT_TEXT[cell.status]} |")


def test_the_readme_table_shows_every_cell_with_3_or_more_seeds() -> None:
    """The README's "Results at a glance" is the so-far comparisons' cells with 3 or more seeds, row for row
    (a regenerated so_far that adds or changes a cell fails here: paste the expected rows)."""
    expected = [glance_row(cell) for cell in judged_cells().itertuples()]
    _, rows = table_rows((REPO / "README.md").read_text(), "cell")
    shown = ["| " + " | ".join(row) + " |" for row in rows]
    assert shown == expected, "the README's table should read:\n" + "\n".join(expected)


def test_the_readme_opening_counts_the_so_far_verdicts() -> None:
    """The README's first lines: the verdicts of the cells in its table and of the claims under the paper's text."""
    import pandas as pd

    cells = judged_cells()["status"].value_counts()
    claims = pd.read_csv(SO_FAR / "claims.csv")["verdict"].value_counts()
    opening = " ".join((REPO / "README.md").read_text().split("## Quick start")[0].split())
    assert (f"of the {int(cells.sum())} cells run with 3 or more seeds, {cells.get('reproduced', 0)} reproduce, "
            f"{cells.get('not reproduced', 0)} do not and {cells.get('inconclusive', 0)} are inconclusive") in opening
    not_run = claims.get("not run", 0) + claims.get("data unavailable offline", 0)
    assert (f"of the paper's {int(claims.sum())} claims, as its text describes the methods, {claims.get('holds', 0)} hold, "
            f"{claims.get('does not hold', 0)} do not, {claims.get('inconclusive', 0)} are inconclusive and {not_run} are not run "
            f"({claims.get('data unavailable offline', 0)} of them need CIFAR-10") in opening


def test_the_client_mean_gap_under_pflibs_reading_is_the_comparisons() -> None:
    """How far the mean over clients of FedGMH and FedPer (PFLlib's reading, MNIST ExDir(2, 0.5)) lies below the
    paper: the README and docs/verdicts.md state the two gaps of comparison_pflib.csv, rounded to a tenth."""
    import pandas as pd

    pflib = pd.read_csv(SO_FAR / "comparison_pflib.csv")
    gaps = pflib[(pflib["table"] == "table2") & (pflib["setting"] == "MNIST ExDir(2, 0.5)")
                 & pflib["algorithm"].isin(["FedGMH", "FedPer"])]["clients_diff"].abs()
    text = " ".join((REPO / "README.md").read_text().split())
    assert f"are {gaps.min():.1f} to {gaps.max():.1f} points below the paper" in text
    verdicts = " ".join((REPO / "docs" / "verdicts.md").read_text().split())
    assert f"{gaps.min():.1f} to {gaps.max():.1f} points below it on the mean over clients" in verdicts


def clock_minutes(minutes: float) -> str:
    """36 -> '36 min', 106 -> '1 h 46 min', as the docs write a duration."""
    whole = round(minutes)
    return f"{whole // 60} h {whole % 60} min" if whole >= 60 else f"{whole} min"


def test_the_cpu_run_times_in_the_docs_are_the_committed_records() -> None:
    """docs/running.md's time of a full-protocol MNIST run on one core (its range and median) and the README's
    median for the hand run are those of the committed records trained on a CPU (resumed runs left out)."""
    import json
    import statistics

    minutes = []
    for path in REPO.glob("paper_artifacts/*/runs/**/run.json"):
        record = json.loads(path.read_text())
        if (record.get("device") == "cpu" and record.get("dataset") == "mnist" and record["config"].get("rounds") == 200
                and record.get("resumed_from_round") is None):
            minutes.append(record["wall_time_s"] / 60)
    assert len(minutes) >= 3
    running = " ".join((REPO / "docs" / "running.md").read_text().split())
    low, median, high = clock_minutes(min(minutes)), clock_minutes(statistics.median(minutes)), clock_minutes(max(minutes))
    assert f"took {low} to {high} on one core of the 2-core development CPU (median {median};" in running
    assert f"each seed takes a median {median} on one core" in " ".join((REPO / "README.md").read_text().split())


def test_the_gpu_run_time_in_running_md_spans_the_leases_table() -> None:
    """docs/running.md's "a run takes A-B minutes" on a shared GPU covers every wall time of BENCHMARKS.md's leases."""
    import math

    _, rows = table_rows((REPO / "BENCHMARKS.md").read_text(), "lease")
    seconds = [int(s) for row in rows for pair in re.findall(r"(\d+)(?:-(\d+))? s\b", row[2]) for s in pair if s]
    running = " ".join((REPO / "docs" / "running.md").read_text().split())
    assert f"a run takes {math.floor(min(seconds) / 60)}-{math.ceil(max(seconds) / 60)} minutes" in running
