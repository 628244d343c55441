"""Run directories -> tidy results, paper-style tables, figures, and the comparison with the paper.

The names below are imported from their modules on first use, so that a module of this package
imports without pandas where it needs none.

Modules (libraries; `artifact` and `artifacts/` declare the workflow's tables and figures, each
calling them), in import order (no circle):

- `parsing`: parsing, ordering and comparing values (shared helpers).
- `outputs`: a command's output files, checked before any of them is written.
- `labels`: dataset names and order, result columns, swept dimensions, number formatting
  (algorithm names and order: the algorithm cards, `fedgmh.cards`).
- `paper`: the paper's protocol and its numbers (the reference CSV).
- `latex`: the one LaTeX writer of every table (pandas `Styler.to_latex`, one symbol map).
- `settings`: what a setting id (`fedgmh.filing`: `<dataset>_c<C>_a<alpha>` + swept dimensions +
  `@<variant>`, shared with the workflow, which names its run folders with them) says in headers.
- `runs`: `aggregate_runs` -> one tidy row per run (`results.csv`) and the per-round curves in
  long format (`curves.csv`).
- `summary`: `summarize` -> one cell per (setting, method): mean ± std over seeds of the best,
  the last-round or the mean of the last 10 rounds' accuracy.
- `protocol`: how the runs of one of our cells differ from the paper's protocol.
- `verdicts`: Welch's interval and the equivalence test (TOST) behind a cell's verdict.
- `compare`: every cell of the paper's tables next to ours, with its verdict; `comparison_text`
  writes it as Markdown and LaTeX.
- `tables`: `make_table` -> rows = algorithms in the paper's order (or named variants), columns =
  settings; LaTeX (booktabs) + CSV, and the same beside the paper's values.
- `other_documents`: reference values of the other source documents next to ours.
- `to_target`: `rounds_to_target` -> first round at which an accuracy curve reaches each target;
  `uploads_to_target` -> client uploads until then.
- `claim_file`, `claims`, `claims_report`: the paper's claims (reference/fedgmh_paper_claims.yaml),
  their test kinds and decision rules, and each claim's verdict with its numbers; `calibration`: the
  rules on simulated runs; `robustness`: each decided verdict again under the other defensible
  choices; `claims_readings`: `claims.md`/`.csv`, a verdict per reading of the protocol.
- `cost_tables`: the section 2.3 costs (`fedgmh costs`) as LaTeX.
- `figures`: `plot_curves` -> test accuracy per round, mean over seeds with a ±1 std band.
- `clients`: per-client accuracy of each run (`clients.csv`) and its distribution per method.
- `document`: every table and figure in one LaTeX document (`report.tex` -> `report.pdf`).
"""

import importlib
from typing import Any

#: module -> the public names the package gives from it
EXPORTS = {
    "fedgmh.cards": ("algorithm_name", "algorithm_order"),
    "fedgmh.report.compare": ("attach_reference", "compare_with_paper", "write_comparison"),
    "fedgmh.report.figures": ("plot_curves",),
    "fedgmh.report.labels": ("DATASET_NAMES", "DATASET_ORDER", "OPTION_LABELS", "STD_DDOF", "SWEEP_DIMS", "dataset_name",
                             "format_number"),
    "fedgmh.report.parsing": ("parse_options",),
    "fedgmh.report.to_target": ("rounds_to_target", "write_rounds_to_target"),
    "fedgmh.report.runs": ("aggregate_runs", "load_run", "read_curves", "read_results", "write_aggregate"),
    "fedgmh.filing": ("assign_setting_ids", "setting_id", "sweep_dimensions"),
    "fedgmh.report.summary": ("ACCURACIES", "summarize"),
    "fedgmh.report.tables": ("make_table", "write_table"),
}
_MODULE_OF = {name: module for module, names in EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value
