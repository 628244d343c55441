"""The datasets `fedgmh download` knows: shape and number of classes (no torch: the workflow checks
its settings against them while it plans; fedgmh.data fetches and loads them)."""

from __future__ import annotations

from dataclasses import dataclass

from fedgmh.errors import UserError, did_you_mean


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    channels: int
    height: int
    width: int
    num_classes: int
    #: samples of the pooled train and test splits, which partitions divide among the clients
    num_samples: int


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo("mnist", 1, 28, 28, 10, 70_000),
        DatasetInfo("fashion_mnist", 1, 28, 28, 10, 70_000),
        DatasetInfo("cifar10", 3, 32, 32, 10, 60_000),
        DatasetInfo("cifar100", 3, 32, 32, 100, 60_000),
        DatasetInfo("digits", 1, 28, 28, 10, 1_797),
    )
}

#: the datasets whose models the paper's section 2.3 tabulates (`fedgmh costs --dataset` default)
COST_DATASETS = ("mnist", "cifar10", "cifar100")


def get_info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise UserError(f"unknown dataset {name!r}{did_you_mean(name, DATASETS)}; available: {', '.join(DATASETS)}") from None
