"""How numbers and short reports show: one format for counts and bytes, at most 20 lines."""

from __future__ import annotations

import pytest

from shardpipe.core.display import (
    MOST_LINES,
    Summary,
    format_bytes,
    format_count,
    format_nbytes,
)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (1023, "1,023 bytes"),
        (1024, "1,024 bytes (1.0 KiB)"),
        (2_359_385, "2,359,385 bytes (2.3 MiB)"),
        (2**64 - 1, "18,446,744,073,709,551,615 bytes (16384.0 PiB)"),
    ],
)
def test_exact_bytes_with_their_size(n: int, text: str) -> None:
    assert format_nbytes(n) == text


def test_counts_and_estimates() -> None:
    assert format_count(1234567) == "1,234,567"
    assert format_bytes(512) == "512 B" and format_bytes(3 << 30) == "3.0 GiB"


def test_a_summary_shows_problems_first_and_stays_short() -> None:
    rows = [(f"row {i}", format_count(i * 1000)) for i in range(30)]
    problems = [f"c/{i}/0: the index points past the end " + "x" * 300 for i in range(500)]
    summary = Summary("SomeReport", "FAILED", rows, problems[:20], 500)
    lines = summary.text().splitlines()
    assert len(lines) <= MOST_LINES
    assert lines[0] == "SomeReport: FAILED, 500 problem(s)"
    assert lines[1] == "  problems (every one in .problems):"
    assert lines[2].startswith("    c/0/0: the index") and len(lines[2]) <= 120
    assert "... and 492 more" in summary.text()
    assert lines[-1].endswith("more row(s): see str()")
    html = summary.html()
    assert html.count("<tr>") == 30 and "c/7/0" in html and "c/8/0" not in html
    assert "SomeReport: FAILED, 500 problem(s)" in html


def test_a_summary_without_problems() -> None:
    summary = Summary("CompactReport", None, [("shards", "3")])
    assert summary.text() == "CompactReport\n  shards: 3"
    assert "<table>" in summary.html() and "problems" not in summary.html()


def test_html_is_escaped() -> None:
    html = Summary("R", "OK", [("<b>", "&")], ["<script>"]).html()
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp;" in html
