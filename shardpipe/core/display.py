"""How plan values show themselves: ``(label, value)`` rows as text or as an HTML table."""

from __future__ import annotations

import html
from collections.abc import Sequence


def text_table(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """``title`` and one ``label: value`` line per row, labels right-aligned."""
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join([title, *(f"  {label:>{width}}: {value}" for label, value in rows)])


def html_table(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """The same as an HTML table, for notebooks (``_repr_html_``)."""
    cells = "".join(
        f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
        f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
        for label, value in rows
    )
    return f"<div><strong>{html.escape(title)}</strong><table>{cells}</table></div>"
