"""Figures of a bounds run: acceptance against the number of drafts and against temperature,
and the distribution of each verifier's per-step gap to the bound.

Every function takes the tables a run writes (``summary.csv``, ``gap_histogram.csv``; or
:func:`otbound.analysis.summarise` / :func:`otbound.analysis.gap_histogram` of a per-step
table) and returns a :class:`matplotlib.figure.Figure` (no pyplot state is touched, so they
work in scripts, workers and notebooks alike). :func:`save_run_figures` writes the PNG files
of a run, each atomically.
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from otbound._files import atomic_output
from otbound.drafts import DESIGNS, get_design
from otbound.verifiers import VERIFIERS

#: How each design is titled in the figures, in registry order (each design's ``title``).
DESIGN_TITLES: dict[str, str] = {name: get_design(name).figure_title for name in DESIGNS}

_BOUND_STYLE: dict[str, Any] = {
    "color": "black",
    "linestyle": "--",
    "marker": "s",
    "linewidth": 1.6,
}
_DPI = 150


def verifier_color(name: str) -> str:
    """A fixed colour per verifier, the same in every figure."""
    palette = [f"C{i}" for i in range(10)]
    if name in VERIFIERS:
        return palette[VERIFIERS.index(name) % 10]
    return palette[zlib.crc32(name.encode()) % 10]  # stable across processes


def panel_grid(panels: int, width: float = 4.3, height: float = 3.3) -> tuple[Figure, list[Axes]]:
    """A figure with ``panels`` axes on a grid (shared by the figures of a run and of trees).

    Up to three columns (two for four panels, a 2 × 2 grid); the unused cells of the last row
    are hidden.

    Parameters
    ----------
    panels : int
        Number of axes wanted.
    width, height : float
        Size of one panel in inches (the figure is at least 7 inches wide, plus 0.9 inches for
        the titles).

    Returns
    -------
    (matplotlib.figure.Figure, list of matplotlib.axes.Axes)
        The figure (constrained layout, no pyplot state) and its ``panels`` visible axes, row
        by row.
    """
    cols = 2 if panels == 4 else min(3, max(panels, 1))  # 2 × 2 rather than 3 + 1
    rows = math.ceil(max(panels, 1) / cols)
    fig = Figure(figsize=(max(width * cols, 7.0), height * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def _legend_order(label: str) -> tuple[int, int, str]:
    """The bound first, then the shipped verifiers in table order, then the others."""
    if label.startswith("α*"):
        return (0, 0, label)
    if label in VERIFIERS:
        return (1, VERIFIERS.index(label), label)
    return (2, 0, label)


def _legend(fig: Figure, axes: Iterable[Axes]) -> None:
    handles: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    labels = sorted(handles, key=_legend_order)
    if handles:
        fig.legend(
            [handles[label] for label in labels],
            labels,
            loc="outside lower center",
            ncols=min(len(handles), 6),
            frameon=False,
        )


def _only(frame: pd.DataFrame, column: str, value: float | None, what: str) -> pd.DataFrame:
    """Rows at ``value`` of ``column`` (default: its only value, or 1 for temperature)."""
    values = sorted(frame[column].unique())
    if value is None:
        if len(values) == 1:
            return frame
        if frame[column].isna().any():
            raise ValueError(
                f"{what}: some rows have no {column} (NaN) and others do; pick a {column}"
            )
        value = 1.0 if (column == "temperature" and 1.0 in values) else values[0]
    picked = frame[np.isclose(frame[column].astype(float), float(value))]
    if picked.empty:
        raise ValueError(f"{what}: no rows at {column} = {value}; available: {values}")
    return picked


def _interval_band(
    ax: Axes, x: ArrayLike, low: ArrayLike, high: ArrayLike, color: str, alpha: float = 0.15
) -> None:
    low, high = np.asarray(low, float), np.asarray(high, float)
    ok = ~(np.isnan(low) | np.isnan(high))
    if ok.any():
        ax.fill_between(
            np.asarray(x, float)[ok], low[ok], high[ok], color=color, alpha=alpha, linewidth=0
        )


def _draw_series(ax: Axes, part: pd.DataFrame, x: str) -> None:
    """One design's panel: the bound (with its band) and a line per verifier."""
    bound = part[part["verifier"] == "bound"].sort_values(x)
    if not bound.empty and bound["alpha_star"].notna().all():
        ax.plot(bound[x], bound["alpha_star"], label="α* (optimal, bound)", **_BOUND_STYLE)
        _interval_band(
            ax, bound[x], bound["alpha_star_ci_low"], bound["alpha_star_ci_high"], "black"
        )
    elif not bound.empty:  # truncated rows: the certified interval, not a value
        style: dict[str, Any] = {**_BOUND_STYLE, "marker": "v"}
        ax.plot(bound[x], bound["alpha_star_upper"], label="α* upper (top-k rows)", **style)
        ax.plot(
            bound[x],
            bound["alpha_star_lower"],
            label="α* lower (top-k rows)",
            **{**style, "marker": "^", "linestyle": ":"},
        )
        _interval_band(
            ax, bound[x], bound["alpha_star_lower"], bound["alpha_star_upper"], "black", 0.12
        )
    for name, rows in part[part["verifier"] != "bound"].groupby("verifier", sort=False):
        rows = rows.sort_values(x)
        color = verifier_color(str(name))
        err = np.vstack(
            [
                rows["acceptance"] - rows["acceptance_ci_low"],
                rows["acceptance_ci_high"] - rows["acceptance"],
            ]
        )
        ax.errorbar(
            rows[x],
            rows["acceptance"],
            yerr=np.nan_to_num(np.abs(err)),
            color=color,
            marker="o",
            markersize=4,
            capsize=3,
            linewidth=1.4,
            label=str(name),
        )
    ax.grid(True, alpha=0.3)


def _designs(frame: pd.DataFrame) -> list[str]:
    order = list(DESIGN_TITLES)
    present = list(dict.fromkeys(frame["design"]))
    return sorted(present, key=lambda d: order.index(d) if d in order else len(order))


def acceptance_vs_n(summary: pd.DataFrame, temperature: float | None = None) -> Figure:
    """Mean acceptance of each verifier against the number of drafts, beside the bound.

    One panel per draft design; error bars and the grey band are 95% intervals of the mean
    (cluster-robust over prompts); for truncated (top-k) dumps the band is the certified
    interval of ``α*``.

    Parameters
    ----------
    summary : pandas.DataFrame
        A run's ``summary.csv``.
    temperature : float, optional
        Which temperature to draw (default: the only one, else 1, else the lowest).
    """
    frame = _only(summary, "temperature", temperature, "acceptance_vs_n")
    designs = _designs(frame)
    fig, axes = panel_grid(len(designs))
    for ax, design in zip(axes, designs, strict=True):
        part = frame[frame["design"] == design]
        _draw_series(ax, part, "n")
        ax.set_title(DESIGN_TITLES.get(design, design))
        ax.set_xlabel("drafts n")
        ax.set_xticks(sorted(part["n"].unique()))
        ax.set_ylabel("acceptance rate")
    steps = int(frame["steps"].max())
    fig.suptitle(
        f"Acceptance against the number of drafts ({_temperature_words(frame)}{steps} steps)"
    )
    _legend(fig, axes)
    return fig


def acceptance_vs_temperature(summary: pd.DataFrame, n: int | None = None) -> Figure:
    """Mean acceptance of each verifier and the bound against temperature, at one ``n``.

    Parameters
    ----------
    summary : pandas.DataFrame
        A run's ``summary.csv`` with several temperatures.
    n : int, optional
        Number of drafts (default: the only one, else the smallest).
    """
    frame = _only(summary, "n", n, "acceptance_vs_temperature")
    designs = _designs(frame)
    fig, axes = panel_grid(len(designs))
    for ax, design in zip(axes, designs, strict=True):
        part = frame[frame["design"] == design]
        _draw_series(ax, part, "temperature")
        ax.set_title(DESIGN_TITLES.get(design, design))
        ax.set_xlabel("temperature")
        temps = sorted(part["temperature"].dropna().unique())
        if len(temps) <= 8:  # tick the temperatures analysed
            ax.set_xticks(temps, [f"{t:g}" for t in temps])
        ax.set_ylabel("acceptance rate")
    steps = int(frame["steps"].max())
    fig.suptitle(
        f"Acceptance against temperature (n = {int(frame['n'].iloc[0])} drafts, {steps} steps)"
    )
    _legend(fig, axes)
    return fig


def gap_distribution(histogram: pd.DataFrame, temperature: float | None = None) -> Figure:
    """How far each verifier falls below the bound, step by step: the empirical distribution
    function of the per-step gap ``α* − acceptance``, one panel per number of drafts.

    Parameters
    ----------
    histogram : pandas.DataFrame
        A run's ``gap_histogram.csv`` (:func:`otbound.analysis.gap_histogram`).
    temperature : float, optional
        As in :func:`acceptance_vs_n`.
    """
    if histogram.empty:
        fig, axes = panel_grid(1)
        axes[0].text(0.5, 0.5, "no verifier rows", ha="center", va="center")
        return fig
    frame = _only(histogram, "temperature", temperature, "gap_distribution")
    ns = sorted(frame["n"].unique())
    fig, axes = panel_grid(len(ns))
    top = float(frame.loc[frame["count"] > 0, "bin_high"].max())
    low = float(min(0.0, frame.loc[frame["count"] > 0, "bin_low"].min()))
    for ax, k in zip(axes, ns, strict=True):
        part = frame[frame["n"] == k]
        for name, rows in part.groupby("verifier", sort=False):
            rows = rows.sort_values("bin_low")
            x = np.concatenate([[low], rows["bin_high"].to_numpy(float)])
            y = np.concatenate([[0.0], np.cumsum(rows["count"].to_numpy(float))])
            y /= y[-1]
            ax.step(
                x, y, where="post", color=verifier_color(str(name)), linewidth=1.6, label=str(name)
            )
        ax.set_xlim(low, max(top, 0.01))
        ax.set_ylim(0, 1.02)
        ax.set_title(f"n = {k} drafts")
        ax.set_xlabel("gap to the bound, α* − acceptance")
        ax.set_ylabel("fraction of steps with gap ≤ x")
        ax.grid(True, alpha=0.3)
    words = _temperature_words(frame).removesuffix(", ")
    fig.suptitle("Per-step gap to the optimal acceptance" + (f" ({words})" if words else ""))
    _legend(fig, axes)
    return fig


def _temperature_words(frame: pd.DataFrame) -> str:
    """``"temperature 0.7, "``; empty where the rows have none (a summary of
    :func:`otbound.compare`'s table, whose ``p`` and ``q`` come as they are)."""
    temp = float(frame["temperature"].iloc[0])
    return "" if math.isnan(temp) else f"temperature {temp:g}, "


@contextlib.contextmanager
def _laid_out(fig: Figure, dpi: float) -> Iterator[None]:
    """``fig`` on an Agg canvas at ``dpi``, its layout done and its layout engine off.

    ``Figure.savefig`` draws a figure that has a layout engine (every figure here: constrained
    layout) twice, once without output to run the engine and once to render. Running the
    engine here, on the canvas and at the resolution the PNG is written with, leaves
    ``savefig`` one draw: the same pixels in about 15% less time. The figure's canvas, dpi
    and layout engine are restored on exit.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure to save.
    dpi : float
        The resolution ``fig.savefig`` is then called with.
    """
    engine, canvas, figure_dpi = fig.get_layout_engine(), fig.canvas, fig.dpi
    FigureCanvasAgg(fig)  # the canvas (and renderer) the layout and the save share
    try:
        fig.dpi = dpi
        if engine is not None:
            engine.execute(fig)
            # ``None`` is "no engine" unless the rc settings ask for one: they must not here
            with mpl.rc_context(
                {"figure.autolayout": False, "figure.constrained_layout.use": False}
            ):
                fig.set_layout_engine(None)
        yield
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)
        fig.dpi = figure_dpi
        fig.set_canvas(canvas)


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as a PNG, atomically (a temporary name, then a rename).

    The figure is drawn once (see :func:`_laid_out`) and left as it was.
    """
    path = Path(path)
    with atomic_output(path) as tmp, open(tmp, "wb") as f, _laid_out(fig, _DPI):
        fig.savefig(f, format="png", dpi=_DPI)
    return path


def _suffix(values: Sequence[float], value: float, prefix: str) -> str:
    return "" if len(values) == 1 else f"_{prefix}{value:g}"


@dataclass(frozen=True)
class RunFigure:
    """One PNG figure of a run, to be drawn by :meth:`save` (in this process or another: it
    holds the small tables it is drawn from, and pickles).

    Attributes
    ----------
    kind : str
        ``"acceptance_vs_n"``, ``"gap_distribution"`` or ``"acceptance_vs_temperature"``.
    table : pandas.DataFrame
        The summary (or, for ``gap_distribution``, the gap histogram) of the run.
    at : float
        The temperature (or, for ``acceptance_vs_temperature``, the number of drafts ``n``).
    path : pathlib.Path
    """

    kind: str
    table: pd.DataFrame
    at: float
    path: Path

    def save(self) -> Path:
        """Draw the figure and write it to :attr:`path` (atomically)."""
        if self.kind == "acceptance_vs_n":
            fig = acceptance_vs_n(self.table, self.at)
        elif self.kind == "gap_distribution":
            fig = gap_distribution(self.table, self.at)
        elif self.kind == "acceptance_vs_temperature":
            fig = acceptance_vs_temperature(self.table, int(self.at))
        else:
            raise ValueError(f"unknown figure kind {self.kind!r}")
        return save_figure(fig, self.path)


def run_figures(
    summary: pd.DataFrame, histogram: pd.DataFrame, out: str | os.PathLike[str]
) -> list[RunFigure]:
    """The figures :func:`save_run_figures` writes, not drawn yet."""
    out = Path(out)
    figures = []
    temps = sorted(summary["temperature"].unique())
    for t in temps:
        tag = _suffix(temps, t, "T")
        figures.append(RunFigure("acceptance_vs_n", summary, t, out / f"acceptance_vs_n{tag}.png"))
        if not histogram.empty and np.isclose(histogram["temperature"], t).any():
            path = out / f"gap_distribution{tag}.png"
            figures.append(RunFigure("gap_distribution", histogram, t, path))
    if len(temps) > 1:
        for k in sorted(summary["n"].unique()):
            path = out / f"acceptance_vs_temperature_n{k}.png"
            figures.append(RunFigure("acceptance_vs_temperature", summary, int(k), path))
    return figures


def save_run_figures(
    summary: pd.DataFrame, histogram: pd.DataFrame, out: str | os.PathLike[str]
) -> list[Path]:
    """The PNG figures of a run, written into ``out``.

    ``acceptance_vs_n.png`` and ``gap_distribution.png`` (one of each per temperature, named
    ``..._T0.7.png``, when several were run) and, for a temperature sweep,
    ``acceptance_vs_temperature_n{n}.png`` for each ``n``.

    Returns
    -------
    list of pathlib.Path
    """
    return [figure.save() for figure in run_figures(summary, histogram, out)]
