"""Charts as inline SVG, drawn with plain Python for ``bot report``'s self-contained page: bars with their
intervals, lines, and stacked horizontal bars. Every drawn value also carries its number (``data-value``, or
``data-x``/``data-y`` for a point) and a ``<title>`` tooltip, and every bar its value in text, so the page can
be checked against the record it was drawn from. No ``xmlns``, no link: nothing in a chart names a URL."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from bot.formatting import number

# Tableau 10 less its grey: distinguishable, and readable on white.
COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
WIDTH = 760
LEFT, RIGHT, TOP = 70, 20, 24
PLOT_HEIGHT = 240
LEGEND_ROW = 20
FONT = 'font-family="sans-serif" font-size="12"'


def color(index: int) -> str:
    """The color of the ``index``-th series or part (colors repeat after nine)."""
    return COLORS[index % len(COLORS)]


@dataclass(frozen=True)
class Bar:
    """One bar: its label, value and interval (``low``, ``high``; None where there is none)."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Series:
    """One line: its name and ``(x, y)`` points in x order."""

    name: str
    points: Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Stack:
    """One stacked bar: its label and each part's value, in the order of the chart's parts (None where a part
    was not measured: drawn as nothing)."""

    label: str
    parts: Sequence[float | None]


@dataclass(frozen=True)
class Scale:
    """A linear map from data values (``low``..``high``) to pixels (``start``..``end``)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return self.start + (value - self.low) * (self.end - self.start) / span


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values from at or below ``low`` to at or above ``high`` (steps of 1, 2 or 5
    times a power of ten)."""
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = [first]
    while ticks[-1] < high - 1e-9 * step:
        ticks.append(first + len(ticks) * step)
    return [round(tick, 12) for tick in ticks]


def bar_chart(bars: Sequence[Bar], *, y_label: str) -> Markup:
    """Vertical bars from zero, each with its interval as a whisker and its value written above it."""
    rotate = len(bars) > 6 or any(len(bar.label) > 12 for bar in bars)
    bottom = TOP + PLOT_HEIGHT
    height = bottom + (90 if rotate else 40)
    top_value = max(max(bar.value, bar.high or bar.value) for bar in bars)
    ticks = nice_ticks(0.0, top_value * 1.08)
    y = Scale(0.0, ticks[-1], bottom, TOP)
    body = _y_axis(ticks, y, y_label)
    body.append(_line(LEFT, bottom, WIDTH - RIGHT, bottom, "#333"))
    slot = (WIDTH - RIGHT - LEFT) / len(bars)
    width = min(slot * 0.6, 80.0)
    for index, bar in enumerate(bars):
        middle = LEFT + slot * (index + 0.5)
        interval = (
            f" [{number(bar.low)} – {number(bar.high)}]"
            if bar.low is not None and bar.high is not None
            else ""
        )
        body.append(
            f'<rect class="bar" x="{middle - width / 2:.1f}" y="{y(bar.value):.1f}" width="{width:.1f}" '
            f'height="{bottom - y(bar.value):.1f}" fill="{color(0)}" data-label="{escape(bar.label)}" '
            f'data-value="{bar.value!r}"><title>{escape(f"{bar.label}: {number(bar.value)}{interval}")}'
            "</title></rect>"
        )
        if bar.low is not None and bar.high is not None:
            low, high = y(bar.low), y(bar.high)
            body.append(
                f'<g class="interval" data-low="{bar.low!r}" data-high="{bar.high!r}">'
                + _line(middle, low, middle, high, "#222")
                + _line(middle - 8, low, middle + 8, low, "#222")
                + _line(middle - 8, high, middle + 8, high, "#222")
                + "</g>"
            )
        above = y(max(bar.value, bar.high or bar.value)) - 6
        body.append(_text(middle, above, number(bar.value), extra=' class="value"'))
        if rotate:
            turn = f' transform="rotate(-35 {middle:.1f} {bottom + 14:.1f})"'
            body.append(_text(middle, bottom + 14, bar.label, "end", turn))
        else:
            body.append(_text(middle, bottom + 16, bar.label))
    return _svg(height, y_label, body)


def line_chart(series: Sequence[Series], *, x_label: str, y_label: str) -> Markup:
    """One line per series over shared axes (y not from zero: the lines' own range), with a legend below."""
    xs = [x for line in series for x, _ in line.points]
    ys = [y for line in series for _, y in line.points]
    margin = (max(ys) - min(ys)) * 0.05 or abs(max(ys)) * 0.05 or 1.0
    floor = min(ys) - margin if min(ys) < 0 else max(0.0, min(ys) - margin)  # no negative ticks under losses
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs)), nice_ticks(floor, max(ys) + margin)
    bottom = TOP + PLOT_HEIGHT
    x = Scale(x_ticks[0], x_ticks[-1], LEFT, WIDTH - RIGHT)
    y = Scale(y_ticks[0], y_ticks[-1], bottom, TOP)
    body = _y_axis(y_ticks, y, y_label)
    body += _x_axis(x_ticks, x, bottom, x_label)
    for index, line in enumerate(series):
        stroke = color(index)
        path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in line.points)
        body.append(f'<g class="series" data-name="{escape(line.name)}">')
        if len(line.points) > 1:
            width = 4 if index == 0 else 2  # the first line stays visible under later ones that match it
            body.append(f'<polyline points="{path}" fill="none" stroke="{stroke}" stroke-width="{width}"/>')
        for px, py in line.points:
            tip = escape(f"{line.name}: {number(py)} at {number(px)}")
            body.append(
                f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="2.5" fill="{stroke}" data-x="{px!r}" '
                f'data-y="{py!r}"><title>{tip}</title></circle>'
            )
        body.append("</g>")
    legend_top = bottom + 60
    body += _legend([line.name for line in series], legend_top)
    return _svg(legend_top + LEGEND_ROW * _legend_rows(len(series)), y_label, body)


def stacked_bars(stacks: Sequence[Stack], *, parts: Sequence[str], unit: str) -> Markup:
    """Horizontal bars, one per stack, each split into its parts, with a legend above and the total at its
    end."""
    label_width = 150
    row = 26
    top = TOP + LEGEND_ROW * _legend_rows(len(parts))
    bottom = top + row * len(stacks)
    totals = [sum(value or 0.0 for value in stack.parts) for stack in stacks]
    ticks = nice_ticks(0.0, max(totals) * 1.1 or 1.0)
    x = Scale(0.0, ticks[-1], label_width, WIDTH - RIGHT - 50)
    body = _legend(parts, TOP - 8)
    body += _x_axis(ticks, x, bottom, unit)
    for index, (stack, total) in enumerate(zip(stacks, totals, strict=True)):
        top_edge = top + row * index + 4
        body.append(_text(label_width - 8, top_edge + 13, stack.label, "end"))
        start = 0.0
        for part, (name, value) in enumerate(zip(parts, stack.parts, strict=True)):
            if value is None:
                continue
            body.append(
                f'<rect class="part" x="{x(start):.1f}" y="{top_edge:.1f}" width="{x(start + value) - x(start):.1f}"'
                f' height="{row - 8}" fill="{color(part)}" data-part="{escape(name)}" data-value="{value!r}">'
                f"<title>{escape(f'{stack.label} {name}: {number(value)} {unit}')}</title></rect>"
            )
            start += value
        body.append(_text(x(total) + 6, top_edge + 13, f"{number(total)} {unit}", "start", ' class="total"'))
    return _svg(bottom + 44, unit, body)


def _y_axis(ticks: list[float], y: Scale, label: str) -> list[str]:
    """The y axis at the left: gridlines, tick values and the rotated label."""
    parts = [_line(LEFT, y(ticks[-1]), LEFT, y(ticks[0]), "#333")]
    for tick in ticks:
        parts.append(_line(LEFT, y(tick), WIDTH - RIGHT, y(tick), "#e5e5e5"))
        parts.append(_text(LEFT - 6, y(tick) + 4, _tick(tick), "end"))
    middle = (y(ticks[0]) + y(ticks[-1])) / 2
    parts.append(_text(16, middle, label, extra=f' transform="rotate(-90 16 {middle:.1f})"'))
    return parts


def _x_axis(ticks: list[float], x: Scale, bottom: float, label: str) -> list[str]:
    """The x axis at ``bottom``: tick marks, their values and the label under them."""
    parts = [_line(x(ticks[0]), bottom, x(ticks[-1]), bottom, "#333")]
    for tick in ticks:
        parts.append(_line(x(tick), bottom, x(tick), bottom + 4, "#333"))
        parts.append(_text(x(tick), bottom + 17, _tick(tick)))
    parts.append(_text((x(ticks[0]) + x(ticks[-1])) / 2, bottom + 34, label))
    return parts


def _tick(value: float) -> str:
    """A tick value: thousands separated, no trailing zeros (``1,500``, ``500``, ``2.5``)."""
    return f"{value:,.6g}"


def _legend_rows(count: int) -> int:
    return math.ceil(count / 3)


def _legend(names: Sequence[str], top: float) -> list[str]:
    """Swatches and names, three to a row."""
    parts = []
    column = (WIDTH - LEFT) / 3
    for index, name in enumerate(names):
        left = LEFT + column * (index % 3)
        y = top + LEGEND_ROW * (index // 3)
        parts.append(f'<rect x="{left:.1f}" y="{y - 10:.1f}" width="12" height="12" fill="{color(index)}"/>')
        parts.append(_text(left + 18, y, name, "start", ' class="legend"'))
    return parts


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"/>'


def _text(x: float, y: float, text: str, anchor: str = "middle", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {FONT}{extra}>{escape(text)}</text>'


def _svg(height: float, label: str, body: list[str]) -> Markup:
    head = (
        f'<svg class="chart" role="img" aria-label="{escape(label)}" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}">'
    )
    return Markup(head + "".join(body) + "</svg>")
