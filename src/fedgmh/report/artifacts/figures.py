"""The figures: accuracy per round, each seed next to the paper, per-client accuracy, layer weights."""

from __future__ import annotations

import csv
import functools

from fedgmh.report.artifact import Artifact, Entry, Output, aggregated, need, one, switched_on, title
from fedgmh.errors import ConfigError
from fedgmh.report.artifacts.tables import check_experiment_setting, target_numbers


def _figure_entry(caption: str, label: str) -> Entry:
    return Entry(caption=caption, category="Figures", labels={"figure": label})


def _seeds_text(plan, experiment: str) -> str:
    return ("shaded: ±1 std over seeds of FedGMH and the best other method."
            if len(plan.config["experiments"][experiment].get("seeds", plan.config["seeds"])) > 1
            else "one seed per method: no spread drawn.")


def _curves_params(plan, figure: str) -> dict:
    spec = plan.config["figures"][figure]
    rounds = plan.rounds_to_target
    marked = bool(rounds and rounds.get("targets") and rounds.get("figure") == figure)  # its targets as lines, the paper's rounds as stars
    return {"experiment": spec["experiment"], "setting": spec["setting"], "algorithms": spec.get("algorithms") or None,
            "title": spec.get("title") or None, "targets": target_numbers(rounds) if marked else [],
            "paper": (rounds.get("paper") or {}) if marked else {}}


def _write_curves(inputs, outputs, params) -> str:
    from fedgmh import report
    from fedgmh.report.marks import Marks

    out, png = need(outputs, "pdf"), one(outputs, "png")
    marks = Marks(targets=params["targets"], paper_rounds=params["paper"], overlay=None, overlay_name="other reading", labels={},
                  reference=None)
    panels = report.plot_curves(report.read_curves(need(inputs, "curves")), out, png=png, settings=[params["setting"]],
                                experiment=params["experiment"], algorithms=params["algorithms"], title=params["title"], marks=marks)
    return f"curves: {len(panels)} panel(s) ({', '.join(panels)}) -> {out}, {png}"


CURVES = Artifact(
    name="curves",
    kind="figure",
    wildcard="figure",
    constrained=True,
    switch="figures",
    outputs={"pdf": Output("{figure}.pdf"), "png": Output("{figure}.png", _figure_entry("figure.rst", "{figure}"))},
    inputs=lambda plan, figure: {"curves": [aggregated(plan, plan.config["figures"][figure]["experiment"], "curves")]},
    params=_curves_params,
    instances=lambda plan: list(plan.config["figures"]),
    check=lambda plan: check_figures(plan),
    document="pdf",
    rank=1,
    caption=lambda plan, figure: (
        f"{plan.config['figures'][figure].get('title') or title(plan, plan.config['figures'][figure]['experiment'])}: test "
        "accuracy per round, mean over seeds; right: the last rounds; " + _seeds_text(plan, plan.config["figures"][figure]["experiment"])
    ),
    write=_write_curves,
)


def check_figures(plan) -> None:
    config = plan.config
    for name, fig in config["figures"].items():
        exp = fig["experiment"]
        if exp not in config["experiments"]:
            raise ConfigError(f"config: figures.{name}.experiment {exp!r} is not an experiment; experiments: {', '.join(config['experiments'])}")
        settings = sorted({r.setting for r in plan.runs if r.experiment == exp})
        if fig["setting"] not in settings:
            raise ConfigError(f"config: figures.{name}.setting {fig['setting']!r} is not a setting of {exp}; its settings: {', '.join(settings)}")
        unknown = set(fig.get("algorithms", [])) - set(config["experiments"][exp]["algorithms"])
        if unknown:
            raise ConfigError(f"config: figures.{name}.algorithms {sorted(unknown)} are not run in {exp}")


@functools.cache
def reference_cells(path: str) -> frozenset[tuple[str, str]]:
    """(table, dataset) of the rows of the paper's reference CSV: ('table2', 'cifar100')."""
    with open(path, newline="", encoding="utf-8") as handle:
        return frozenset((row["table"], row["dataset"].lower()) for row in csv.DictReader(handle))


def dot_plots(plan) -> list[str]:
    """The experiments named like a table of the paper, on one of its datasets: a dot plot of their
    seeds next to the paper's values each (the smoke config's digits have none)."""
    cells = reference_cells(plan.reference) if plan.reference else frozenset()
    return [name for name, experiment in plan.config["experiments"].items()
            if any((name, str(setting.get("dataset", "")).lower()) in cells for setting in experiment.get("settings", []))]


def _write_dots(inputs, outputs, params) -> str:
    from fedgmh import report
    from fedgmh.report.dots import plot_final_accuracy
    from fedgmh.report.paper import read_reference
    from fedgmh.report.summary import summarize
    from fedgmh.report.sweeps import plot_sweep, swept_parameter

    experiment, accuracy, out = params["experiment"], params["accuracy"], need(outputs, "pdf")
    results, reference = report.read_results(need(inputs, "results")), read_reference(need(inputs, "reference"))
    cells, dims = summarize(results, experiment, accuracy)
    draw = plot_sweep if swept_parameter(dims, cells) else plot_final_accuracy
    matched = draw(results, reference, experiment, out, png=one(outputs, "png"), accuracy=accuracy, title=params["title"])
    kind = "one line per method over the swept parameter" if draw is plot_sweep else "a panel per cell"
    return f"dots: {experiment} ({kind}), {matched} cell(s) with the paper's value -> {out}"


DOTS = Artifact(
    name="dots",
    kind="figure",
    wildcard="experiment",
    constrained=True,
    outputs={"pdf": Output("{experiment}_seeds.pdf"), "png": Output("{experiment}_seeds.png", _figure_entry("dots.rst", "{experiment} seeds"))},
    inputs=lambda plan, experiment: {"results": [aggregated(plan, experiment)], "reference": [plan.reference] if plan.reference else []},
    params=lambda plan, experiment: {"experiment": experiment, "title": title(plan, experiment), "accuracy": plan.config["table_accuracy"]},
    instances=dot_plots,
    document="pdf",
    rank=2,
    caption=lambda plan, experiment: (
        f"{title(plan, experiment)}: each seed of ours next to the paper's mean ± std; a table sweeping one parameter as one line "
        "per method over it (the figure's title says what is drawn and which spread)."
    ),
    write=_write_dots,
)


def _write_clients(inputs, outputs, params) -> str:
    from fedgmh import report
    from fedgmh.report.clients import plot_client_accuracy

    out = need(outputs, "pdf")
    drawn, missing = plot_client_accuracy(report.read_results(need(inputs, "results")), out, png=one(outputs, "png"),
                                          csv=one(outputs, "csv"), experiment=params["experiment"], round_=params["round"],
                                          title=params["title"])
    return f"clients: per-client accuracy of {drawn} runs ({missing} without clients.csv) -> {out}"


CLIENT_ACCURACY = Artifact(
    name="client_accuracy",
    kind="figure",
    switch="clients_figure",
    outputs={
        "pdf": Output("client_accuracy.pdf"),
        "png": Output("client_accuracy.png", _figure_entry("clients.rst", "client accuracy")),
        "csv": Output("client_accuracy.csv"),
    },
    inputs=lambda plan, _: {"results": [aggregated(plan, plan.experiment_key("clients_figure"))]},
    params=lambda plan, _: {
        "experiment": plan.experiment_key("clients_figure"),
        "round": "best" if plan.config["table_accuracy"] == "best" else "last",
        "title": f"Per-client test accuracy: {title(plan, plan.experiment_key('clients_figure'))}",
    },
    instances=switched_on(lambda plan: plan.experiment_key("clients_figure")),
    document="pdf",
    rank=3,
    caption=lambda plan, _: "Per-client test accuracy per method and setting; settings whose runs predate per-client results are named, not drawn.",
    write=_write_clients,
)


def _write_layer_weights(inputs, outputs, params) -> str:
    from fedgmh import report
    from fedgmh.report.layer_weights import plot_layer_weights

    out, png = need(outputs, "pdf"), one(outputs, "png")
    panels = plot_layer_weights(report.read_results(need(inputs, "results")), params["experiment"], params["setting"], params["algorithms"],
                                out, png=png, csv=one(outputs, "csv"), layer=params["layer"], seed=params["seed"], title=params["title"])
    return f"layer-weights: {len(panels)} heat-map(s) -> {out}, {png}"


def _layer_weights_params(plan, _) -> dict:
    spec = plan.layer_weights
    return {"experiment": spec["experiment"], "setting": spec["setting"], "algorithms": spec["algorithms"],
            "layer": str(spec["layer"]) if spec.get("layer") is not None else None,
            "seed": int(spec["seed"]) if spec.get("seed") is not None else None, "title": spec.get("title") or None}


LAYER_WEIGHTS = Artifact(
    name="layer_weights",
    kind="figure",
    switch="layer_weights",
    outputs={
        "pdf": Output("layer_weights.pdf"),
        "png": Output("layer_weights.png", _figure_entry("layer_weights.rst", "layer weights")),
        "csv": Output("layer_weights.csv"),
    },
    inputs=lambda plan, _: {"results": [aggregated(plan, plan.layer_weights["experiment"])]},
    params=_layer_weights_params,
    instances=switched_on(lambda plan: plan.layer_weights),
    check=lambda plan: check_experiment_setting(plan, "layer_weights"),
    document="pdf",
    rank=4,
    caption=lambda plan, _: "Per-layer aggregation weights at the last round: row = the client whose model is built, column = the peer "
    "whose parameters it weighs; the diagonal outlined.",
    write=_write_layer_weights,
)

ARTIFACTS = (CURVES, DOTS, CLIENT_ACCURACY, LAYER_WEIGHTS)
