"""Report artifacts: the tables, figures and document of paper_artifacts/<name>/, each declared once.

A module `fedgmh/report/artifacts/<family>.py` declares its artifacts in `ARTIFACTS` (a tuple of
`fedgmh.report.artifact.Artifact`); `artifacts()` collects them as `fedgmh.cards` collects the
algorithm cards, and report.smk makes a rule of each (docs/artifacts.md, "Adding a table"). No
pandas at import: the workflow reads them while it builds its DAG.
"""

from __future__ import annotations

import functools

from fedgmh.declarations import collect, module_names
from fedgmh.report.artifact import Artifact


def family_names() -> list[str]:
    """The declaring modules of this package."""
    return module_names(__path__)


@functools.cache
def artifacts() -> dict[str, Artifact]:
    """Every artifact by name, in the order of the modules and their lists."""
    return collect(__name__, __path__, "ARTIFACTS", Artifact, "artifact")


def of_kind(kind: str) -> list[Artifact]:
    """The artifacts of one kind (table, figure, document)."""
    return [artifact for artifact in artifacts().values() if artifact.kind == kind]


def in_document() -> list[Artifact]:
    """The artifacts that report_pdf puts into its document, in its order."""
    return sorted((a for a in artifacts().values() if a.document), key=lambda a: a.rank)
