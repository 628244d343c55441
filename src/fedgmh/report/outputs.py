"""The output files of a report command, checked before any of them is written: each write is atomic
(fedgmh.io), and these checks keep a command with several outputs from leaving the first ones behind
when a later one cannot be written."""

from __future__ import annotations

from pathlib import Path

from fedgmh.errors import UserError
from fedgmh.io import check_writable_folder


def check_outputs(*paths: Path | str | None) -> None:
    """Raise UserError unless every path (None: an output not asked for) names a file, once, in a folder
    that is, or can be made, writable."""
    given = [Path(path) for path in paths if path]
    for i, path in enumerate(given):
        if path.is_dir():
            raise UserError(f"output {path} is a folder; give a file name")
        if path.resolve() in {other.resolve() for other in given[:i]}:
            raise UserError(f"output {path} is named twice; give each output its own file")
        check_writable_folder(path.parent, f"output {path}: folder")


def check_figure_outputs(out: Path | str, png: Path | str | None = None, *others: Path | str | None) -> None:
    """`check_outputs`, and that matplotlib can write the figures `out` and `png` (the format from the suffix)."""
    for path in (out, png):
        if path:
            figure_format(path)
    check_outputs(out, png, *others)


def figure_format(path: Path | str) -> str:
    """The format of a figure file from its suffix (PDF without one); UserError when matplotlib cannot write it."""
    from matplotlib.backend_bases import FigureCanvasBase

    kind = Path(path).suffix.lstrip(".").lower() or "pdf"
    supported = FigureCanvasBase.get_supported_filetypes()
    if kind not in supported:
        raise UserError(f"figure {path}: matplotlib cannot write .{kind} files; give a name ending in "
                        f"{', '.join('.' + name for name in sorted(supported))}")
    return kind
