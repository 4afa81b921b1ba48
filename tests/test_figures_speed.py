""":func:`otbound.plots.save_figure` draws a figure once (its constrained layout run on the
canvas the PNG is written from) and writes the same pixels as a plain ``Figure.savefig``, which
draws it twice; the figure is left as it was."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from PIL import Image

from otbound import plots

#: One design and one verifier at three numbers of drafts, as in a run's ``summary.csv``.
SUMMARY = pd.DataFrame(
    {
        "design": ["iid"] * 6,
        "verifier": ["bound"] * 3 + ["rrs"] * 3,
        "n": [2, 3, 4] * 2,
        "temperature": [1.0] * 6,
        "steps": [10] * 6,
        "alpha_star": [0.7, 0.8, 0.85, np.nan, np.nan, np.nan],
        "alpha_star_ci_low": [0.65, 0.75, 0.8, np.nan, np.nan, np.nan],
        "alpha_star_ci_high": [0.75, 0.85, 0.9, np.nan, np.nan, np.nan],
        "acceptance": [np.nan] * 3 + [0.6, 0.65, 0.7],
        "acceptance_ci_low": [np.nan] * 3 + [0.55, 0.6, 0.65],
        "acceptance_ci_high": [np.nan] * 3 + [0.65, 0.7, 0.75],
    }
)


def _pixels(png: bytes | Path) -> np.ndarray:
    """The RGBA pixels of a PNG file or its bytes."""
    source = io.BytesIO(png) if isinstance(png, bytes) else png
    with Image.open(source) as image:
        return np.asarray(image.convert("RGBA"))


def _draws(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """A list that gets the figure of every ``Figure.draw`` from now on."""
    seen: list[Figure] = []
    draw = Figure.draw

    def counted(self: Figure, renderer: object) -> None:
        seen.append(self)
        draw(self, renderer)

    monkeypatch.setattr(Figure, "draw", counted)
    return seen


def test_save_figure_writes_the_pixels_of_savefig(tmp_path: Path) -> None:
    reference = io.BytesIO()
    plots.acceptance_vs_n(SUMMARY).savefig(reference, format="png", dpi=plots._DPI)
    path = plots.save_figure(plots.acceptance_vs_n(SUMMARY), tmp_path / "figure.png")
    np.testing.assert_array_equal(_pixels(path), _pixels(reference.getvalue()))


def test_save_figure_draws_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fig = plots.acceptance_vs_n(SUMMARY)
    draws = _draws(monkeypatch)
    plots.save_figure(fig, tmp_path / "figure.png")
    assert draws == [fig]


def test_save_figure_leaves_the_figure_as_it_was(tmp_path: Path) -> None:
    fig = plots.acceptance_vs_n(SUMMARY)
    canvas, dpi, engine = fig.canvas, fig.dpi, fig.get_layout_engine()
    plots.save_figure(fig, tmp_path / "figure.png")
    assert (fig.canvas, fig.dpi, fig.get_layout_engine()) == (canvas, dpi, engine)
    again = plots.save_figure(fig, tmp_path / "again.png")  # and saves the same again
    np.testing.assert_array_equal(_pixels(again), _pixels(tmp_path / "figure.png"))


def test_save_figure_without_a_layout_engine(tmp_path: Path) -> None:
    fig = Figure(figsize=(3, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    reference = io.BytesIO()
    fig.savefig(reference, format="png", dpi=plots._DPI)
    path = plots.save_figure(fig, tmp_path / "plain.png")
    assert fig.get_layout_engine() is None
    np.testing.assert_array_equal(_pixels(path), _pixels(reference.getvalue()))
