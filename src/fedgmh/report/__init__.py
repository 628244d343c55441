"""Run directories -> tidy results, paper-style tables, figures, and the comparison with the paper.

Modules (each a library with a CLI wrapper in `fedgmh.cli_report`), in import order (no circle):

- `values`: parsing, ordering and comparing values (shared helpers).
- `names`: display names and orders of algorithms and datasets, number formatting.
- `paper`: the paper's protocol and its numbers (the reference CSV).
- `latex`: the one LaTeX writer of every table (pandas `Styler.to_latex`, one symbol map).
- `settings`: setting ids (`<dataset>_c<C>_a<alpha>` + swept dimensions + `@<variant>`), shared
  with the workflow, which names its run folders with them.
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
- `to_target`: `rounds_to_target` -> first round at which an accuracy curve reaches each target;
  `uploads_to_target` -> client uploads until then.
- `claim_file`, `claims`, `claims_report`: the paper's claims (reference/fedgmh_paper_claims.yaml),
  their test kinds and decision rules, and `claims.md`/`.csv` with each claim's verdict.
- `cost_tables`: the section 2.3 costs (`fedgmh costs`) as LaTeX.
- `figures`: `plot_curves` -> test accuracy per round, mean over seeds with a ±1 std band.
- `clients`: per-client accuracy of each run (`clients.csv`) and its distribution per method.
- `document`: every table and figure in one LaTeX document (`report.tex` -> `report.pdf`).
"""

from fedgmh.report.compare import attach_reference, compare_with_paper, write_comparison
from fedgmh.report.figures import plot_curves
from fedgmh.report.names import (
    ALGORITHM_NAMES, ALGORITHM_ORDER, DATASET_NAMES, DATASET_ORDER, OPTION_LABELS, STD_DDOF, SWEEP_DIMS, algorithm_name,
    dataset_name, format_number,
)
from fedgmh.report.to_target import rounds_to_target, write_rounds_to_target
from fedgmh.report.runs import aggregate_runs, load_run, read_curves, read_results, write_aggregate
from fedgmh.report.settings import assign_setting_ids, setting_id, sweep_dimensions
from fedgmh.report.summary import ACCURACIES, summarize
from fedgmh.report.tables import make_table, write_table
from fedgmh.report.values import parse_options

__all__ = [
    "ACCURACIES", "ALGORITHM_NAMES", "ALGORITHM_ORDER", "DATASET_NAMES", "DATASET_ORDER", "OPTION_LABELS", "STD_DDOF",
    "SWEEP_DIMS", "aggregate_runs", "algorithm_name", "assign_setting_ids", "attach_reference", "compare_with_paper",
    "dataset_name", "format_number", "load_run", "make_table", "parse_options", "plot_curves", "read_curves", "read_results",
    "rounds_to_target", "setting_id", "summarize", "sweep_dimensions", "write_aggregate", "write_comparison",
    "write_rounds_to_target", "write_table",
]
