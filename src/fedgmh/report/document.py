"""Every table and figure of a config in one LaTeX document (`report.tex`), compiled to PDF with latexmk.

The experiment tables appear with the paper's value beside ours (`make_table`'s `beside`, where the
reference has the cells), then the paper's claims with their verdicts (claims.csv of `fedgmh
claims`), the other tables (rounds to target, costs, the comparison) as written by their commands,
then the figures. `compile_pdf` runs `latexmk -pdf` (Debian: latexmk,
texlive-latex-base, -recommended, -extra) in a scratch folder and copies the PDF out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from fedgmh.errors import UserError
from fedgmh.filing import format_number, parse_setting_id
from fedgmh.io import atomic_path, write_text
from fedgmh.report.claims_report import claims_latex, read_claims_table
from fedgmh.report.latex import tex
from fedgmh.report.labels import dataset_name
from fedgmh.report.paper import read_reference
from fedgmh.report.runs import read_results
from fedgmh.report.summary import DEFAULT_ACCURACY
from fedgmh.report.tables import make_table

# Captions carry no number of LaTeX's own: the titles give the paper's ("Table 2 (...)", "Figure 3
# (...)"), so one numbering remains. pdfTeX writes no date and no random file id (the same .tex gives
# the same PDF bytes).
PREAMBLE = r"""\documentclass[10pt]{article}
\ifdefined\pdftrailerid \pdfinfoomitdate=1 \pdftrailerid{} \fi
\usepackage[margin=2cm]{geometry}
\usepackage{array,booktabs,longtable,adjustbox,graphicx}
\usepackage[font=small,labelformat=empty,labelsep=none]{caption}
\setlength{\LTcapwidth}{\textwidth}
"""
TEX_ENGINE = "latexmk"


def figure_caption(path: Path) -> str:
    """A caption for a figure without one: partition heat-maps (named by their partition id) by their
    setting, others by name."""
    try:
        parts = parse_setting_id(path.stem)
    except ValueError:
        parts = None
    if parts and parts.partition == path.stem:
        scheme = "chain" if parts.assignment == "chain" else "ExDir"
        clients = f", {parts.clients} clients" if parts.clients else ""
        return (f"Partition: samples per class and client, {dataset_name(parts.dataset)} "
                f"{scheme}({parts.classes_per_client}, {format_number(parts.alpha)}){clients}.")
    return path.stem.replace("_", " ")


def _figure(path: Path, caption: str, folder: Path) -> str:
    relative = os.path.relpath(path, folder).replace(os.sep, "/")
    return "\n".join([r"\begin{figure}[htbp]", r"\centering", rf"\includegraphics[width=\linewidth,height=0.8\textheight,keepaspectratio]{{{relative}}}",
                      rf"\caption{{{tex(caption)}}}", r"\end{figure}", ""])


def build_document(out: Path | str, title: str, results: Sequence[Path | str], titles: Mapping[str, str] | None = None,
                   reference: Path | str | None = None, accuracy: str = DEFAULT_ACCURACY, inputs: Sequence[Path | str] = (),
                   figures: Sequence[tuple[Path | str, str]] = (), claims: Path | str | None = None) -> str:
    """Write report.tex: the tables of every experiment in `results`, the claims' verdicts (`claims`:
    a claims.csv), the LaTeX files `inputs` (pasted in), and `figures` (path, caption; '' =
    `figure_caption`). Returns the text."""
    out = Path(out)
    titles = titles or {}
    ref = read_reference(reference) if reference else None
    parts = [PREAMBLE, rf"\title{{{tex(title)}}}", r"\date{}", r"\begin{document}", r"\maketitle", ""]
    parts += [r"\section{Tables}", "Ours beside the paper's value where the paper has the cell "
              "(the paper: mean $\\pm$ std over 5 seeds of the best test accuracy over all rounds).", ""]
    for path in results:
        frame = read_results(path)
        for experiment in dict.fromkeys(frame["experiment"]):
            table = make_table(frame, experiment, title=titles.get(experiment, experiment), reference=ref, accuracy=accuracy)
            parts.append(table["beside"] or table["latex"])
    if claims:
        parts += [r"\clearpage", r"\section{The paper's claims}",
                  "Each claim of the paper's text, in our words, tested on this config's runs (holds, does not hold, "
                  "inconclusive, not run); the numbers are those of the comparison that decides it.", "",
                  claims_latex(read_claims_table(claims))]
    for path in inputs:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path} not found; make it first (it is one of the report's tables)")
        parts += [r"\clearpage", f"% {path.name}", path.read_text(encoding="utf-8")]
    if figures:
        parts += [r"\clearpage", r"\section{Figures}", ""]
        for path, caption in figures:
            path = Path(path)
            if not path.is_file():
                raise UserError(f"figure {path} not found; draw it first")
            parts.append(_figure(path, caption or figure_caption(path), out.parent))
    parts += [r"\end{document}", ""]
    text = "\n".join(parts)
    write_text(text, out)
    return text


def tex_engine() -> str | None:
    """The path of latexmk, or None when no TeX engine is installed."""
    return shutil.which(TEX_ENGINE)


def compile_pdf(tex_path: Path | str, pdf: Path | str, log: Path | str | None = None) -> Path:
    """Compile `tex_path` with latexmk (pdflatex) in a scratch folder and copy the PDF to `pdf`."""
    engine = tex_engine()
    if engine is None:
        raise UserError("latexmk not found: install a TeX engine (Debian: apt-get install latexmk texlive-latex-base "
                        "texlive-latex-recommended texlive-latex-extra) to build the PDF; report.tex is written")
    tex_path = Path(tex_path).resolve()
    with tempfile.TemporaryDirectory(prefix="fedgmh-latex-") as scratch:
        run = subprocess.run([engine, "-pdf", "-interaction=nonstopmode", "-halt-on-error", f"-outdir={scratch}", tex_path.name],
                             cwd=tex_path.parent, capture_output=True, text=True, check=False)
        if log:
            write_text(run.stdout + run.stderr, log)
        built = Path(scratch) / f"{tex_path.stem}.pdf"
        if run.returncode != 0 or not built.is_file():
            errors = [line for line in run.stdout.splitlines() if line.startswith("!")][:3]
            raise UserError(f"latexmk could not build {tex_path.name}: {'; '.join(errors) or 'see its log'}"
                            + (f" ({log})" if log else ""))
        with atomic_path(Path(pdf)) as tmp:
            shutil.copyfile(built, tmp)
    return Path(pdf)
