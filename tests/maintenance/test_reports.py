"""Every report shows itself in short (repr), as an HTML table, with numbers formatted one way.

Issue 32: ``VerifyReport`` and ``RepairReport`` reprs ran to about 11.5 KB for 80 shards
(the dataclass repr of every shard check) and had no ``_repr_html_``; ``verify`` printed
bytes without separators where ``info`` used them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.core.display import MOST_LINES, format_count, format_nbytes


def _write_80_shards(path: Path) -> None:
    data = np.arange(80 * 4 * 8, dtype="uint16").reshape(80 * 4, 8)
    shardpipe.to_sharded_zarr(data, str(path), shards=(4, 8), chunks=(2, 8))


def _damage(path: Path, n: int) -> None:
    for i in range(n):
        shard = path / "c" / str(i) / "0"
        damaged = bytearray(shard.read_bytes())
        damaged[-2] ^= 0x01  # inside the index CRC32C
        shard.write_bytes(bytes(damaged))


def _check_short(report: Any, *, problems: int = 0) -> str:
    text = repr(report)
    lines = text.splitlines()
    assert len(lines) <= MOST_LINES, text
    assert len(text) < 2500, len(text)
    assert lines[0].startswith(type(report).__name__), text
    if problems:
        assert f"{format_count(problems)} problem(s)" in lines[0], text
        assert lines[1].startswith("  problems (every one in ."), text  # problems first
    html = report._repr_html_()
    assert html.startswith("<div>") and "<table>" in html and "<tr>" in html
    return text


def test_verify_and_repair_of_80_damaged_shards(tmp_path: Path) -> None:
    _write_80_shards(tmp_path)
    _damage(tmp_path, 30)
    report = shardpipe.verify(tmp_path)
    assert len(report.shards) == 80 and len(report.problems) == 30
    text = _check_short(report, problems=30)
    assert "VerifyReport: FAILED, 30 problem(s)" in text
    assert "c/0/0: " in text and "... and 22 more" in text
    assert format_nbytes(report.nbytes) in text
    assert "30 problem(s)" in report._repr_html_()
    full = str(report)  # the command line's account keeps every problem
    assert full.count("CRC32C") == 30 and f"bytes: {format_nbytes(report.nbytes)}" in full
    repaired = shardpipe.repair(tmp_path)
    text = _check_short(repaired, problems=30)
    assert text.startswith("RepairReport: PROBLEMS LEFT") and ".verify.problems" in text


def test_clean_reports(tmp_path: Path) -> None:
    _write_80_shards(tmp_path / "a")
    verified = shardpipe.verify(tmp_path / "a")
    assert _check_short(verified).startswith("VerifyReport: OK\n")
    described = shardpipe.info(tmp_path / "a")
    text = _check_short(described)
    assert "shards present: 80 of 80" in text
    assert format_nbytes(described.nbytes_stored) in text and format_nbytes(
        described.nbytes_stored
    ) in str(described)
    compacted = shardpipe.compact(tmp_path / "a")
    assert "shards checked: 80" in _check_short(compacted)
    assert format_nbytes(compacted.nbytes_reclaimed) in str(compacted)
    written = shardpipe.prepare_write(
        np.ones((64, 64), "uint8"), str(tmp_path / "b"), shards=(16, 16), chunks=(8, 8)
    ).execute()
    text = _check_short(written)
    assert "shards written: 16" in text and format_nbytes(written.nbytes) in str(written)


def test_group_reports(tmp_path: Path) -> None:
    root = zarr.open_group(str(tmp_path / "g"), mode="w", zarr_format=3)
    for name in ("a", "b"):
        shardpipe.to_sharded_zarr(
            np.ones((32, 32), "uint8"),
            str(tmp_path / "g"),
            path=name,
            shards=(16, 16),
            chunks=(8, 8),
        )
    root.create_array("plain", shape=(4,), dtype="uint8")
    verified = shardpipe.verify(tmp_path / "g")
    text = _check_short(verified)
    assert "arrays: 2 checked, 1 skipped" in text
    described = shardpipe.info(tmp_path / "g")
    text = _check_short(described)
    assert "sharded arrays: 2" in text and format_nbytes(described.nbytes_stored) in text
    rechunked = shardpipe.rechunk_group(
        str(tmp_path / "g"), str(tmp_path / "r"), shards=(32, 32), chunks=(16, 16)
    )
    assert "GroupRechunkReport" in _check_short(rechunked)


def test_precomputed_reports(tmp_path: Path) -> None:
    path = tmp_path / "vol"
    shardpipe.to_neuroglancer_precomputed(
        np.ones((64, 64, 64), "uint8"), path, resolution=(1, 1, 1), chunk_size=(16, 16, 16)
    )
    for shard in sorted((path / "1_1_1").iterdir()):
        shard.write_bytes(shard.read_bytes()[:40])  # cut short
    report = shardpipe.verify(path)
    assert not report.ok
    text = _check_short(report, problems=report.n_problems)
    assert text.startswith("PrecomputedReport: PROBLEMS FOUND")
    assert "1_1_1: " in text
    _check_short(report.scales[0], problems=report.scales[0].n_problems)


def test_reports_built_by_hand() -> None:
    from shardpipe.legacy.migration import MigrateReport

    migrated = MigrateReport(arrays=["a"] * 100, shards=12345, nbytes=2**31)
    assert "shards copied: 12,345" in _check_short(migrated)
    assert "2,147,483,648 bytes (2.0 GiB)" in str(migrated)
    many = shardpipe.VerifyReport([])
    many.job_problems = [(f"k{i}", "left by a job") for i in range(1000)]
    repair = shardpipe.RepairReport(verify=many)
    dataset = shardpipe.DatasetRepairReport(
        arrays={f"v{i}": repair for i in range(3)}, unknown=["x"]
    )
    text = _check_short(dataset, problems=3000)
    assert "arrays[path].verify.problems" in text


def test_the_problems_line_says_where_they_are() -> None:
    """Problems of interrupted jobs are not counted "in 0 shard(s)"; a slow rate shows
    two figures, not "0 MB/s"."""
    from shardpipe.engine.reports import WriteReport

    report = shardpipe.VerifyReport([])
    assert "problems: 0\n" in str(report) + "\n"
    report.job_problems = [(".shardpipe/write.json", "an unfinished write")]
    assert "problems: 1 (1 elsewhere)" in str(report)
    assert "0.92 MB/s stored" in str(WriteReport(shards=1, nbytes=285_197, seconds=0.31))


def test_the_dataset_writers_report(tmp_path: Path) -> None:
    """``ds.shard.to_zarr`` returns a dict of reports, shown in short (not each in full)."""
    from shardpipe.testing.datasets import climate_dataset

    ds = climate_dataset(years=1, nlat=12, nlon=16)
    reports = ds.shard.to_zarr(tmp_path / "ds.zarr", shards={"time": 73})
    assert isinstance(reports, dict) and set(reports) == set(ds.data_vars)
    text = _check_short(reports)
    assert f"sharded variables: {len(ds.data_vars)}" in text
    assert format_nbytes(reports.total.nbytes) in text
    assert all(isinstance(r, shardpipe.WriteReport) for r in reports.values())


def _report_types() -> list[type]:
    return [
        obj
        for name, obj in vars(shardpipe).items()
        if inspect.isclass(obj) and (name.endswith("Report") or name.endswith("Info"))
    ]


@pytest.mark.parametrize("report_type", _report_types(), ids=lambda t: t.__name__)
def test_every_exported_report_has_a_short_repr_and_html(report_type: type) -> None:
    """No report keeps the dataclass repr (every field in full)."""
    assert "__repr__" not in vars(report_type) or report_type.__repr__ is not object.__repr__
    assert report_type.__repr__.__qualname__ == "ShowsSummary.__repr__"
    assert callable(getattr(report_type, "_repr_html_", None))
