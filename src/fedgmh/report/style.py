"""One look for every figure: a fixed colour, line style and marker per method, FedGMH standing out.

FedGMH is black, with a thicker line drawn on top. Every other method of the paper has a colour of
its own (Okabe-Ito's and Paul Tol's "muted" and "vibrant" palettes, distinguishable with
colour-vision deficiencies), and keeps its style in every figure: it depends on the method's place in the paper's
order, not on which methods are drawn. Neighbours in that order differ in colour, line style and
marker, so identical curves (FedAvg and FedProx with mu = 0) stay visible as a dashed line over a
solid one.
"""

from __future__ import annotations

from typing import Any

from fedgmh.cards import algorithm_order

HIGHLIGHT = "fedgmh"
HIGHLIGHT_COLOR = "#000000"
COLORS = ("#E69F00", "#0072B2", "#117733", "#CC6677", "#332288", "#882255", "#88CCEE", "#999933", "#AA4499", "#44AA99",
          "#7F7F7F", "#D55E00", "#56B4E9", "#009E73", "#CC79A7", "#DDCC77", "#661100", "#4477AA", "#EE7733", "#BBBBBB",
          "#0077BB", "#EE3377")
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("s", "x", "^", "v", "D", "P", "<", ">", "*", "h", "p", "d", "1", "+", "X", "8", "H", "2", "3", "4", "|", "_")


def method_style(algorithm: str) -> dict[str, Any]:
    """matplotlib keyword arguments (color, linestyle, marker, linewidth, zorder) of a method."""
    if algorithm == HIGHLIGHT:
        return {"color": HIGHLIGHT_COLOR, "linestyle": "-", "marker": "o", "linewidth": 2.6, "markersize": 5, "zorder": 10}
    others = [a for a in algorithm_order() if a != HIGHLIGHT]
    i = others.index(algorithm) if algorithm in others else len(others) + sum(map(ord, algorithm))
    return {"color": COLORS[i % len(COLORS)], "linestyle": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)],
            "linewidth": 1.5, "markersize": 4.5, "zorder": 3}


def use_agg() -> Any:
    """matplotlib.pyplot on the file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
