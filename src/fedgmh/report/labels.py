"""The labels of the reports: dataset names and order, result columns, swept dimensions, option symbols and
number formatting (no pandas needed; algorithm names and order are on the algorithm cards, `fedgmh.cards`)."""

from __future__ import annotations

from fedgmh.filing import SWEEP_SUFFIXES, format_number  # noqa: F401 - the reports' numbers read as the folders' do

DATASET_NAMES: dict[str, str] = {
    "mnist": "MNIST",
    "fashion_mnist": "Fashion-MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "digits": "Digits",
}
DATASET_ORDER = list(DATASET_NAMES)

STD_DDOF = 0  # population std over seeds, like numpy.std / PFLlib's average_data

PARTITION_FIELDS = ("classes_per_client", "alpha")
# algorithm options that get a results.csv column even when a run did not set them (--set), taken
# from run.json's resolved `algorithm_options`
REPORTED_OPTIONS = ("beta", "eta_h", "preset")

# Dimensions (besides dataset, C, alpha) that an experiment may sweep: results.csv column ->
# (suffix in setting ids, label in table headers; the LaTeX writer translates the symbols).
SWEEP_LABELS = {"local_epochs": "E", "join_ratio": "ρ", "rounds": "R", "batch_size": "B", "lr": "η"}
SWEEP_DIMS: dict[str, tuple[str, str]] = {dim: (suffix, SWEEP_LABELS[dim]) for dim, suffix in SWEEP_SUFFIXES.items()}
OPTION_LABELS: dict[str, str] = {"beta": "β", "eta_h": "η_h", "mu": "μ"}

BASE_COLUMNS = [
    "experiment", "setting", "dataset", "classes_per_client", "alpha", "clients", "assignment", "algorithm", "variant", "seed",
    "rounds", "local_epochs", "join_ratio", "batch_size", "lr", "options",
]
RESULT_COLUMNS = ["best_test_acc", "best_round", "final_test_acc", "last10_test_acc", "best_test_acc_mean", "rounds_evaluated",
                  "wall_time_s", "run_dir"]
#: results columns of a run whose evaluated models are adapted copies (its adaptation.csv): the pooled accuracy
#: of the shared model itself at the final evaluation, and the adaptation's budget in words
ADAPTATION_COLUMNS = ["before_adaptation", "adaptation_budget"]
#: results columns of a run whose evaluated models are adapted copies (its adaptation.csv): the pooled accuracy
#: of the shared model itself at the final evaluation, and the adaptation's budget in words
ADAPTATION_COLUMNS = ["before_adaptation", "adaptation_budget"]


def dataset_name(dataset: str) -> str:
    return DATASET_NAMES.get(dataset, dataset)
