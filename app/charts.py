"""The app's one palette and the few things every chart shares.

Okabe and Ito's eight colours stay distinct under the common colour-vision deficiencies. Every figure,
token role and tree state takes its colour from here, and each also carries a second cue (a marker
symbol, a dash, an underline) so colour never carries a meaning alone.
"""
from __future__ import annotations

from pathlib import Path

from app import ROOT

BLUE = "#0072B2"
ORANGE = "#E69F00"
GREEN = "#009E73"  # bluish green
PURPLE = "#CC79A7"  # reddish purple
SKY = "#56B4E9"
VERMILLION = "#D55E00"
YELLOW = "#F0E442"
BLACK = "#000000"
OKABE_ITO = (BLUE, ORANGE, GREEN, PURPLE, SKY, VERMILLION, YELLOW, BLACK)

# Neutrals for what is not a series: guides, unreached nodes, thin edges; and yellow darkened for a line
# on a white page (the palette's yellow is for fills).
GREY = "#999999"
LIGHT_GREY = "#BBBBBB"
DARK_GREY = "#555555"
DARK_YELLOW = "#9A8F00"

SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "pentagon")


def colour(i: int) -> str:
    """The i-th series' colour (the palette repeats after eight)."""
    return OKABE_ITO[i % len(OKABE_ITO)]


def series_style(i: int) -> dict:
    """The i-th series' line and marker: its colour and a symbol of its own, for a plotly scatter."""
    return {"line": dict(color=colour(i)), "marker": dict(symbol=SYMBOLS[i % len(SYMBOLS)], size=9)}


def shown_path(path: Path) -> str:
    """A result file's path as a caption shows it: relative to the repository when it lies inside."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
