"""What makes two runs the same run: a `RunSpec`, everything that decides a run's numbers.

A spec is built from the workflow's plan (`from_run`), from `fedgmh train`'s arguments
(`from_config`) or from a run record, run.json (`from_record`); two runs are the same run when
their specs are equal (docs/store.md, "Run identity"). The results store's key, the Snakemake
rerun trigger, a snapshot's check, `fedgmh plan` and the campaign all compare specs.

A spec holds the results version, the config fields of `CONFIG_KEYS`, the resolved algorithm and
engine options (an option a record predates at its default; not the `EXECUTION_OPTIONS`) and the
partition's parameters with its data fields (`DATA_FIELDS`: the dataset's fingerprint and the
digest of the index arrays). A plan knows no data until the partition file is made: its spec has
None there, and is compared with `without_data()` of the other.

Two different runs can compute the same numbers: an algorithm whose option at a neutral value makes
it another algorithm (`SAME_COMPUTATION`: FedProx with mu = 0 is FedAvg, its proximal term zero).
`computation()` is the spec of what a run computes; the store reuses a record of the same
computation (`as_run`: the record filed as the run it stands for), the plan and the campaign count it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import fedgmh
from fedgmh.cards import card, resolve_options
from fedgmh.config import EngineOptions
from fedgmh.datasets import DATASETS
from fedgmh.errors import UserError

#: the config fields that decide a run's numbers (not paths, device or threads)
CONFIG_KEYS = ("dataset", "algorithm", "rounds", "join_ratio", "local_epochs", "batch_size", "lr", "seed")
#: the partition's fields in a spec (and, when it is not ExDir's random draw, its `assignment`)
PARTITION_KEYS = ("scheme", "dataset", "dataset_fingerprint", "num_samples", "num_classes", "num_clients",
                  "classes_per_client", "alpha", "train_ratio", "seed", "digest")
#: the partition fields that only the data decides
DATA_FIELDS = ("dataset_fingerprint", "digest")
#: engine options that choose how a run is computed, not what: never part of a spec
EXECUTION_OPTIONS = frozenset({"eval_batch_size", "eval_cache", "eval_batched", "vectorise", "memory_format", "conv"})

Items = tuple[tuple[str, Any], ...]

#: algorithm -> (the algorithm it computes, the option values that make it so): FedProx's proximal
#: term (mu/2)||w - w_global||^2 adds mu * (w - w_global) = 0 to each gradient at mu = 0, so its
#: every number is FedAvg's (tests/test_store.py trains both)
SAME_COMPUTATION: dict[str, tuple[str, dict[str, Any]]] = {"fedprox": ("fedavg", {"mu": 0})}


def _frozen(value: Any) -> Any:
    """A JSON value as a hashable one (a record may hold a list where an option is expected)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _items(mapping: dict[str, Any], keys: Any = None) -> Items:
    return tuple((k, _frozen(mapping[k])) for k in (sorted(mapping) if keys is None else keys))


@dataclass(frozen=True)
class RunSpec:
    """Everything that decides a run's results. Equal specs: the same run (numbers compare as values,
    alpha 5 == 5.0); `key()` is its JSON form, `digest` a short name of that."""

    results_version: Any
    dataset: str
    algorithm: str
    rounds: int
    join_ratio: float
    local_epochs: int
    batch_size: int
    lr: float
    seed: int
    algorithm_options: Items
    engine_options: Items
    partition: Items

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RunSpec:
        """The spec of a run.json (or of the identity fields `run_identity` gives a run about to start)."""
        try:
            config, partition = record["config"], record["partition"]
            filled = with_option_defaults(record)
            engine = {k: v for k, v in filled["engine_options"].items() if k not in EXECUTION_OPTIONS}
            # a chain partition says so (its digest differs anyway); ExDir's random draw has no such field
            assignment = partition.get("assignment", "random")
            parts = {k: partition.get(k) for k in PARTITION_KEYS} | ({"assignment": assignment} if assignment != "random" else {})
            return cls(results_version=record.get("results_version"), **{k: config[k] for k in CONFIG_KEYS},
                       algorithm_options=_items(filled["algorithm_options"]), engine_options=_items(engine),
                       partition=_items(parts, list(parts)))
        except (KeyError, TypeError, AttributeError) as err:
            raise UserError(f"not a run record of fedgmh train (missing {err})") from None

    @classmethod
    def from_key(cls, key: dict[str, Any]) -> RunSpec:
        """The spec whose `key()` is `key`."""
        try:
            return cls(results_version=key["results_version"], **{k: key[k] for k in CONFIG_KEYS},
                       algorithm_options=_items(key["algorithm_options"]), engine_options=_items(key["engine_options"]),
                       partition=_items(key["partition"], list(key["partition"])))
        except (KeyError, TypeError, AttributeError) as err:
            raise UserError(f"not a run key (missing {err})") from None

    @classmethod
    def from_config(cls, config: Any, partition_meta: dict[str, Any]) -> RunSpec:
        """The spec of `fedgmh train` with this TrainConfig and partition (its file's meta and digest)."""
        return cls.from_record(run_identity(config, partition_meta))

    @classmethod
    def from_run(cls, run: Any, made: dict[str, Any] | None = None) -> RunSpec:
        """The spec of a run of the workflow's plan (`fedgmh.plan.Run`). Its partition's data fields
        (DATA_FIELDS) are None, unless `made`, the meta (and digest) of its partition file, says the
        file was made with the plan's parameters: then they are the file's."""
        algorithm_options, engine = _resolved(run.algorithm, _items(run.options))
        partition = planned_partition(run)
        if made is not None and _parameters(made) == _parameters(partition):
            partition |= {k: made.get(k) for k in DATA_FIELDS}
        record = {"results_version": fedgmh.RESULTS_VERSION, "config": {k: getattr(run, k) for k in CONFIG_KEYS},
                  "algorithm_options": dict(algorithm_options), "engine_options": dict(engine), "partition": partition}
        return cls.from_record(record)

    # ------------------------------------------------------------------ views

    def key(self) -> dict[str, Any]:
        """The spec as a JSON object (the results store's run key)."""
        return {"results_version": self.results_version, **{k: getattr(self, k) for k in CONFIG_KEYS},
                "algorithm_options": dict(self.algorithm_options), "engine_options": dict(self.engine_options),
                "partition": dict(self.partition)}

    @property
    def text(self) -> str:
        """The key as canonical JSON: the train rule's rerun trigger."""
        return json.dumps(self.key(), sort_keys=True)

    @property
    def digest(self) -> str:
        """A short, stable name of the run (names a record's folder beside another run's)."""
        return key_digest(self.key())

    @property
    def knows_data(self) -> bool:
        return any(dict(self.partition).get(k) is not None for k in DATA_FIELDS)

    def without_data(self) -> RunSpec:
        """This spec as a plan knows it before the partition file is made (DATA_FIELDS None)."""
        return dataclasses.replace(self, partition=tuple((k, None if k in DATA_FIELDS else v) for k, v in self.partition))

    def difference(self, other: RunSpec) -> list[str]:
        """'field: mine vs other' for every field in which two specs differ."""
        mine, theirs = _flat(self.key()), _flat(other.key())
        return [f"{k}: {mine.get(k)!r} vs {theirs.get(k)!r}" for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]

    def computation(self) -> RunSpec:
        """The spec of what this run computes: that of the run it equals by `SAME_COMPUTATION` (its
        neutral options dropped), else itself. Two runs of equal computation have the same numbers."""
        other, neutral = SAME_COMPUTATION.get(self.algorithm, (None, {}))
        options = dict(self.algorithm_options)
        if other is None or any(options.get(name) != value for name, value in neutral.items()):
            return self
        return dataclasses.replace(self, algorithm=other, algorithm_options=tuple(
            (k, v) for k, v in self.algorithm_options if k not in neutral))

    def describe(self) -> str:
        partition = dict(self.partition)
        return (f"{self.algorithm} on {self.dataset} ExDir({partition.get('classes_per_client')}, {partition.get('alpha')}), "
                f"{self.rounds} rounds, seed {self.seed}")


def as_run(record: dict[str, Any], spec: RunSpec) -> dict[str, Any]:
    """A record of the same computation as `spec` (not the same run) filed as the run of `spec`: its
    algorithm and options those of `spec`, `computed_as` naming the run whose numbers they are."""
    found = RunSpec.from_record(record)
    if found.computation() != spec.computation():
        raise UserError(f"the record of {found.describe()} does not compute {spec.describe()}")
    config = {**record["config"], "algorithm": spec.algorithm}
    computed_as = {"algorithm": found.algorithm, "algorithm_options": dict(found.algorithm_options), "run_key": found.digest}
    filed = {**record, "algorithm": spec.algorithm, "config": config, "algorithm_options": dict(spec.algorithm_options),
             "computed_as": computed_as}
    filed_spec = RunSpec.from_record(filed)
    assert (filed_spec if spec.knows_data else filed_spec.without_data()) == spec, filed_spec.difference(spec)
    return filed


def _parameters(partition_meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in partition_meta.items() if k not in DATA_FIELDS}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def key_digest(key: dict[str, Any]) -> str:
    """A short, stable name for a run key (sha256 of its canonical JSON)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def run_key(record: dict[str, Any]) -> dict[str, Any]:
    """The run key of a record (or of a run identity): its spec's `key()`."""
    return RunSpec.from_record(record).key()


# --------------------------------------------------------------------- how runs describe themselves


def _option_defaults(options_class: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(options_class) if f.default is not dataclasses.MISSING}


def with_option_defaults(record: dict[str, Any]) -> dict[str, Any]:
    """The record (or run identity) with every option it predates added at its default: a record
    written before an option existed ran as the option's default runs. (The dataclass default:
    an option a preset or variant sets otherwise counts as a difference, the safe side.)"""
    algorithm_options = {**_option_defaults(card(record["config"]["algorithm"]).options), **record["algorithm_options"]}
    return {**record, "algorithm_options": algorithm_options,
            "engine_options": {**_option_defaults(EngineOptions), **record["engine_options"]}}


@functools.lru_cache(maxsize=4096)
def _resolved(algorithm: str, options: Items) -> tuple[Items, Items]:
    """The resolved algorithm and engine options of `--set` pairs; cached: a plan resolves the same ones many times."""
    algorithm_options, engine = resolve_options(algorithm, dict(options))
    return _items(dataclasses.asdict(algorithm_options)), _items(dataclasses.asdict(engine))


def run_identity(config: Any, partition_meta: dict[str, Any]) -> dict[str, Any]:
    """What `fedgmh train` records of the run it makes (run.json's identity fields; a snapshot holds
    them as text): its TrainConfig but threads, the resolved options, the partition file's meta with
    its digest, the versions."""
    algorithm_options, engine = _resolved(config.algorithm, _items(config.overrides))
    return {
        "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "threads"},
        "algorithm_options": dict(algorithm_options),
        "engine_options": dict(engine),
        "partition": partition_meta,
        "fedgmh": fedgmh.__version__,
        "results_version": fedgmh.RESULTS_VERSION,
    }


def exdir_meta(dataset: str, fingerprint: str | None, num_samples: int, num_classes: int, clients: int, classes_per_client: int,
               alpha: float, train_ratio: float, seed: int, assignment: str = "random") -> dict[str, Any]:
    """The meta `fedgmh partition` writes into an ExDir partition file: what it was made from."""
    meta = {"scheme": "exdir", "dataset": dataset, "dataset_fingerprint": fingerprint, "num_samples": num_samples,
            "num_classes": num_classes, "num_clients": clients, "classes_per_client": classes_per_client, "alpha": alpha,
            "train_ratio": train_ratio, "seed": seed}
    # absent for the default, so existing partition files (and specs) stay as they were
    return meta | ({"assignment": assignment} if assignment != "random" else {})


def planned_partition(run: Any) -> dict[str, Any]:
    """The meta of the plan's run's partition file, its data fields (DATA_FIELDS) None."""
    info = DATASETS[run.dataset]
    return {**exdir_meta(run.dataset, None, info.num_samples, info.num_classes, run.clients, run.classes_per_client, run.alpha,
                         run.train_ratio, run.partition_seed, run.assignment), "digest": None}


# --------------------------------------------------------------------- snapshots


def identity_text(identity: dict[str, Any] | str) -> str:
    """A run identity as the canonical JSON text a snapshot stores."""
    return identity if isinstance(identity, str) else json.dumps(identity, sort_keys=True, default=str)


def same_snapshot_run(stored: dict[str, Any] | str, identity: dict[str, Any] | str) -> bool:
    """Whether a snapshot saved with the identity `stored` resumes the run `identity` describes: the
    same spec. Paths, device, threads and the execution-only options (EXECUTION_OPTIONS) do not count:
    a resume may change them as it may change the device; text that is no run identity matches equal
    text only."""
    if identity_text(stored) == identity_text(identity):
        return True
    try:
        runs = [json.loads(identity_text(x)) for x in (stored, identity)]
        return RunSpec.from_record(runs[0]) == RunSpec.from_record(runs[1])
    except (ValueError, KeyError, TypeError, AttributeError, UserError):
        return False
