"""report_pdf: every table (the paper's value beside ours) and figure in one LaTeX document, compiled."""

from __future__ import annotations

import os

from fedgmh.report.artifact import Artifact, Output, aggregated, every, need, one, title


def _document_files(plan, kind: str) -> list[str]:
    from fedgmh.report.artifacts import in_document

    return [artifact.file(plan, artifact.document, instance)
            for artifact in in_document() if artifact.kind == kind for instance in artifact.instances(plan)]


def _inputs(plan, _) -> dict[str, list[str]]:
    heatmaps = [f"{plan.artifacts}/partitions/{partition}.pdf" for partition in plan.partitions]
    return {
        "results": [aggregated(plan, name) for name in plan.config["experiments"]],
        "reference": [plan.reference] if plan.reference else [],
        "claims": [f"{plan.artifacts}/claims.csv"] if plan.claims else [],
        "tables": _document_files(plan, "table"),
        "figures": _document_files(plan, "figure") + heatmaps,
    }


def _params(plan, _) -> dict:
    from fedgmh.report.artifacts import in_document

    captions = {os.path.splitext(os.path.basename(artifact.file(plan, artifact.document, instance)))[0]: artifact.caption(plan, instance)
                for artifact in in_document() if artifact.caption for instance in artifact.instances(plan)}
    return {"title": f"FedGMH reproduction: every table and figure of config {plan.name}",
            "titles": {name: title(plan, name) for name in plan.config["experiments"]}, "captions": captions,
            "accuracy": plan.config["table_accuracy"], "latex_log": f"{plan.logs}/report/latexmk.log"}


def _write(inputs, outputs, params) -> str:
    from fedgmh.report.document import build_document, compile_pdf

    out, pdf = need(outputs, "tex"), one(outputs, "pdf")
    results, tables, figures = every(inputs, "results"), every(inputs, "tables"), every(inputs, "figures")
    build_document(out, params["title"], results, titles=params["titles"], reference=one(inputs, "reference"), accuracy=params["accuracy"],
                   inputs=tables, figures=[(path, params["captions"].get(os.path.splitext(os.path.basename(path))[0], "")) for path in figures],
                   claims=one(inputs, "claims"))
    if pdf:
        compile_pdf(out, pdf, log=params["latex_log"])
    return f"document: {len(results)} results files, {len(tables)} tables, {len(figures)} figures -> {out}" + (f", {pdf}" if pdf else "")


REPORT_PDF = Artifact(
    name="report_pdf",
    kind="document",
    outputs={"tex": Output("report.tex"), "pdf": Output("report.pdf")},
    inputs=_inputs,
    params=_params,
    instances=lambda plan: [],  # not part of `all`: the rest of the workflow needs no TeX
    logs={"latex": "latexmk.log"},
    write=_write,
)

ARTIFACTS = (REPORT_PDF,)
