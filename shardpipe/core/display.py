"""How values show themselves to people: numbers, ``(label, value)`` tables, short reports.

One place formats the numbers every report and plan prints, so that a count
or a size reads the same in ``verify``, ``info``, ``repair``, ``compact``,
the write reports and the plans: counts with thousands separators
(:func:`format_count`), exact byte counts with their size in binary units
(:func:`format_nbytes`), and estimates in binary units alone
(:func:`format_bytes`).

Reports show a :class:`Summary`: a title and status, the problems first
(at most :data:`MOST_PROBLEM_LINES`, the full list named by the attribute
that holds it), then a few rows of counts, as text of at most
:data:`MOST_LINES` lines (``repr``) or as an HTML table (``_repr_html_``,
for notebooks). :class:`ShowsSummary` gives a report class both from one
``_summary`` method. A report's ``str`` stays the full account the command
line prints.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

MOST_LINES = 20
"""Lines of a report's ``repr``, at most."""

MOST_PROBLEM_LINES = 8
"""Problems a report's ``repr`` lists; the rest are on the attribute it names."""

LINE_WIDTH = 120
"""Characters of one problem line in a ``repr``; longer lines are cut."""


def format_count(n: int) -> str:
    """A count with thousands separators: ``"12,345"``."""
    return f"{n:,}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the number ``n`` takes: ``"1 part"``, ``"12,345 parts"``.

    Examples
    --------
    >>> counted(1, "Dask block"), counted(0, "part"), counted(2, "entry", "entries")
    ('1 Dask block', '0 parts', '2 entries')
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def format_bytes(n: float) -> str:
    """An estimate of bytes in binary units: ``"1.5 GiB"`` (``"512 B"`` below 1 KiB)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError  # pragma: no cover


def format_nbytes(n: int) -> str:
    """An exact byte count and its size: ``"2,359,385 bytes (2.3 MiB)"``, ``"512 bytes"``."""
    exact = f"{n:,} byte" + ("" if n == 1 else "s")
    return exact if abs(n) < 1024 else f"{exact} ({format_bytes(n)})"


def text_table(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """``title`` and one ``label: value`` line per row, labels right-aligned."""
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join([title, *(f"  {label:>{width}}: {value}" for label, value in rows)])


def html_table(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """The same as an HTML table, for notebooks (``_repr_html_``)."""
    return f"<div><strong>{html.escape(title)}</strong>{_rows_html(rows)}</div>"


def _rows_html(rows: Sequence[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
        f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
        for label, value in rows
    )
    return f"<table>{cells}</table>"


def _cut(line: str) -> str:
    return line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 3] + "..."


@dataclass(frozen=True)
class Summary:
    """What a report shows in short: status, problems first, then counts.

    Attributes
    ----------
    title : str
        The report's type, e.g. ``"VerifyReport"``.
    status : str or None
        ``"OK"``, ``"FAILED"``... (None: a report with no verdict).
    rows : sequence of (str, str)
        The counts, as ``(label, formatted value)``.
    problems : sequence of str
        The problems (only the first :data:`MOST_PROBLEM_LINES` are shown).
    n_problems : int or None
        All problems, where ``problems`` lists only some (None: all listed).
    where : str
        The attribute holding every problem (named when some are not shown).
    """

    title: str
    status: str | None
    rows: Sequence[tuple[str, str]]
    problems: Sequence[str] = ()
    n_problems: int | None = None
    where: str = "problems"

    @property
    def total_problems(self) -> int:
        """Every problem, listed or not."""
        return len(self.problems) if self.n_problems is None else self.n_problems

    def _heading(self) -> str:
        parts = [self.status] if self.status else []
        if self.total_problems:
            parts.append(f"{format_count(self.total_problems)} problem(s)")
        return self.title + (": " + ", ".join(parts) if parts else "")

    def _problem_lines(self, most: int) -> list[str]:
        if not self.total_problems:
            return []
        shown = list(self.problems[:most])
        lines = [f"  problems (every one in .{self.where}):"]
        lines += [_cut(f"    {p}") for p in shown]
        if self.total_problems > len(shown):
            lines.append(f"    ... and {format_count(self.total_problems - len(shown))} more")
        return lines

    def text(self) -> str:
        """At most :data:`MOST_LINES` lines: heading, problems, counts."""
        lines = [self._heading(), *self._problem_lines(MOST_PROBLEM_LINES)]
        width = max((len(label) for label, _ in self.rows), default=0)
        room = MOST_LINES - len(lines)
        rows = [_cut(f"  {label:>{width}}: {value}") for label, value in self.rows]
        if len(rows) > room:
            rows = [*rows[: room - 1], f"  ... {len(rows) - room + 1} more row(s): see str()"]
        return "\n".join(lines + rows)

    def html(self) -> str:
        """An HTML table: heading, the problems (as many as the text shows), the counts."""
        parts = [f"<div><strong>{html.escape(self._heading())}</strong>"]
        if self.total_problems:
            shown = self.problems[:MOST_PROBLEM_LINES]
            items = "".join(f"<li>{html.escape(p)}</li>" for p in shown)
            more = self.total_problems - len(shown)
            if more:
                items += f"<li>... and {format_count(more)} more</li>"
            parts.append(
                f"<details open><summary>problems (every one in "
                f"<code>.{html.escape(self.where)}</code>)</summary><ul>{items}</ul></details>"
            )
        parts.append(_rows_html(self.rows))
        parts.append("</div>")
        return "".join(parts)


class ShowsSummary:
    """A report's short ``repr`` and ``_repr_html_``, both from its ``_summary()``.

    Dataclasses using it are declared with ``repr=False`` (else the
    generated ``__repr__``, every field in full, wins).
    """

    def _summary(self) -> Summary:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self._summary().text()

    def _repr_html_(self) -> str:
        return self._summary().html()
