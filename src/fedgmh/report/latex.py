"""The one LaTeX writer of the reports: a frame of plain-text cells -> a booktabs table.

Cells, row labels and column labels are plain Unicode text ("98.66 ± 0.12", "ρ=0.4", "70%"); `tex`
escapes them and maps the symbols of TEX_SYMBOLS, and pandas' `Styler.to_latex` lays out the table
(booktabs rules, multi-level column headers, bold cells, `longtable` for long ones).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

#: Unicode text in report cells -> LaTeX (longest first when several start alike)
TEX_SYMBOLS: dict[str, str] = {
    "η_h": r"$\eta_h$", "±": r"$\pm$", "—": "--", "–": "--", "ρ": r"$\rho$", "β": r"$\beta$", "μ": r"$\mu$",
    "Δ": r"$\Delta$", "≤": r"$\le$", "×": r"$\times$", "·": r"$\cdot$", "√": r"$\surd$", "−": "$-$", "σ": r"$\sigma$", "α": r"$\alpha$", "²": r"$^2$", "∗": r"$^\ast$",
}
SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
            "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "|": r"$|$", "<": r"$<$", ">": r"$>$"}


def tex(text: object) -> str:
    """Plain text as LaTeX: special characters escaped, the symbols of TEX_SYMBOLS translated."""
    text, out, i = str(text), [], 0
    symbols = sorted(TEX_SYMBOLS, key=len, reverse=True)
    while i < len(text):
        symbol = next((s for s in symbols if text.startswith(s, i)), None)
        if symbol is not None:
            out.append(TEX_SYMBOLS[symbol])
            i += len(symbol)
        else:
            out.append(SPECIALS.get(text[i], text[i]))
            i += 1
    return "".join(out)


def _tex_index(index: pd.Index) -> pd.Index:
    if isinstance(index, pd.MultiIndex):
        return pd.MultiIndex.from_tuples([tuple(tex(v) for v in key) for key in index],
                                         names=[tex(n) if n else n for n in index.names])
    return pd.Index([tex(v) for v in index], name=tex(index.name) if index.name else None)


def latex_table(frame: pd.DataFrame, caption: str, label: str, *, corner: str | None = None, bold: pd.DataFrame | None = None,
                column_format: str | None = None, long: bool = False, size: str | None = None, notes: Sequence[str] = (),
                fit: bool = False, comment: str = "") -> str:
    """A booktabs table (or `longtable` when `long`) of `frame`'s text cells.

    Row labels come from the index (none when `corner` is None and the index is a plain range: then
    the index is hidden); `corner` is the header of the label column. `bold`: a frame of booleans of
    `frame`'s shape. `size`: a font size command (e.g. 'small'); `notes`: lines under the table;
    `fit`: shrink the tabular to the line width where it is wider (package adjustbox).
    """
    body = frame.map(tex)
    body.columns = _tex_index(frame.columns)
    show_index = corner is not None
    if show_index:
        body.index = _tex_index(frame.index)
        if isinstance(body.columns, pd.MultiIndex):
            body.columns.names = [tex(corner)] + [""] * (body.columns.nlevels - 1)
        else:
            body.columns.name = tex(corner)
        body.index.name = None
    styler = body.style
    if not show_index:
        styler = styler.hide(axis="index")
    if bold is not None:
        css = np.where(bold.to_numpy(dtype=bool), "textbf:--rwrap;", "")
        styler = styler.apply(lambda _: pd.DataFrame(css, index=body.index, columns=body.columns), axis=None)
    options = {"hrules": True, "caption": tex(caption) if caption else None, "label": label, "multicol_align": "c",
               "column_format": column_format or ("l" if show_index else "") + "c" * body.shape[1]}
    if long:
        options["environment"] = "longtable"
    else:
        options.update(position="htbp", position_float="centering")
    latex = styler.to_latex(**options)
    if fit and not long:
        latex = latex.replace("\\begin{tabular}", "\\begin{adjustbox}{max width=\\linewidth}\n\\begin{tabular}", 1)
        latex = latex.replace("\\end{tabular}\n", "\\end{tabular}\n\\end{adjustbox}\n", 1)
    under = "".join(rf"\par\smallskip{{\footnotesize {tex(note)}}}" + "\n" for note in notes)
    if long:
        latex = (f"{{\\{size}\n" if size else "") + latex + under + ("}\n" if size else "")
    else:
        head, _, tail = latex.partition("\\end{table}")
        latex = head.replace("\\centering\n", "\\centering\n" + (f"\\{size}\n" if size else ""), 1) + under + "\\end{table}" + tail
    needs = ("booktabs" + (", longtable" if long else "") + (", adjustbox" if fit and not long else "")
             + (", array" if ">{" in (column_format or "") else ""))
    header = "".join(f"% {line}\n" for line in comment.splitlines()) + f"% Needs \\usepackage{{{needs}}}.\n"
    return header + latex
