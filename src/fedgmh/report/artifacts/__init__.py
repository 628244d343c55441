"""Report artifacts: the tables, figures and document of paper_artifacts/<name>/, each declared once.

A module `fedgmh/report/artifacts/<family>.py` declares its artifacts in `ARTIFACTS` (a tuple of
`fedgmh.report.artifact.Artifact`); `artifacts()` collects them as `fedgmh.cards` collects the
algorithm cards, and report.smk makes a rule of each (docs/artifacts.md, "Adding a table"). No
pandas at import: the workflow reads them while it builds its DAG.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from fedgmh.report.artifact import Artifact


def family_names() -> list[str]:
    """The declaring modules of this package."""
    return sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))


@functools.cache
def artifacts() -> dict[str, Artifact]:
    """Every artifact by name, in the order of the modules and their lists."""
    found: dict[str, Artifact] = {}
    for family in family_names():
        module = importlib.import_module(f"{__name__}.{family}")
        declared = getattr(module, "ARTIFACTS", None)
        if not (isinstance(declared, tuple) and declared and all(isinstance(a, Artifact) for a in declared)):
            raise ValueError(f"{module.__name__} declares no ARTIFACTS: a non-empty tuple of Artifact")
        for artifact in declared:
            if artifact.name in found:
                raise ValueError(f"artifact {artifact.name!r} is declared twice")
            found[artifact.name] = artifact
    return found


def of_kind(kind: str) -> list[Artifact]:
    """The artifacts of one kind (table, figure, document)."""
    return [artifact for artifact in artifacts().values() if artifact.kind == kind]


def in_document() -> list[Artifact]:
    """The artifacts that report_pdf puts into its document, in its order."""
    return sorted((a for a in artifacts().values() if a.document), key=lambda a: a.rank)
