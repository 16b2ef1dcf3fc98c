"""What the figures of the rechunk sweep (``python -m benchmarks.rechunk_sweep``) rest on."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from benchmarks import rechunk_report, rechunk_sweep
from benchmarks.rechunk_cases import SMALL_CASES, compare, ensure_source, planes, regions
from benchmarks.rechunk_limit import COPY_PARTS, PARTS, rechunk_limit


@pytest.mark.parametrize("name", sorted(SMALL_CASES))
def test_the_limit_writes_the_source_as_the_sharded_target(name: str, tmp_path: Path) -> None:
    case = SMALL_CASES[name]
    source, written = ensure_source(case, tmp_path)
    assert written and ensure_source(case, tmp_path) == (source, False)  # cached
    facts = rechunk_limit(case, source, tmp_path / "limit.zarr")
    assert compare(case, source, tmp_path / "limit.zarr") == []
    assert set(facts["parts_s"]) == set(PARTS) and all(v > 0 for v in facts["parts_s"].values())
    assert math.isclose(facts["limit_s"], sum(facts["parts_s"].values()) / facts["cores"])
    copy = facts["copy_parts_s"]
    assert set(copy) == set(COPY_PARTS) and all(v > 0 for v in copy.values())
    assert math.isclose(
        facts["two_pass_limit_s"], facts["limit_s"] + sum(copy.values()) / facts["cores"]
    )
    assert not (tmp_path / "limit.zarr.copy").exists()  # the copy's scratch files removed
    assert facts["stored_bytes"] == sum(
        p.stat().st_size for p in (tmp_path / "limit.zarr" / "c").rglob("*") if p.is_file()
    )


def test_a_target_that_differs_from_its_source_is_reported(tmp_path: Path) -> None:
    case = SMALL_CASES["frames"]  # partial edge shards and chunks
    source, _ = ensure_source(case, tmp_path)
    target = tmp_path / "limit.zarr"
    rechunk_limit(case, source, target)
    array = zarr.open_array(target, mode="r+")
    corner = np.asarray(array[-1:, -1:, -1:])
    array[-1:, -1:, -1:] = corner + 1
    problems = compare(case, source, target)
    assert len(problems) == 1 and "1 shard regions differ" in problems[0]


def test_the_data_depends_on_the_plane_index_alone() -> None:
    for case in SMALL_CASES.values():
        whole = planes(case, 0, 8)
        assert whole.dtype == np.dtype(case.dtype) and len(np.unique(whole)) > 50
        assert np.array_equal(planes(case, 3, 5), whole[3:5])


def test_regions_tile_the_shape_clipped_at_its_edges() -> None:
    boxes = list(regions((5, 7), (2, 4)))
    assert len(boxes) == 6 and boxes[-1] == (slice(4, 5), slice(4, 7))
    assert sum(math.prod(s.stop - s.start for s in box) for box in boxes) == 35


def test_runs_put_the_anchors_first_then_every_budget() -> None:
    runs = rechunk_sweep.runs(["slabs"], ["64MB", "1GB"], ["limit", "shardpipe", "dask", "cubed"])
    assert runs == [
        ("slabs", "limit", "none"),
        ("slabs", "dask", "none"),
        ("slabs", "shardpipe", "64MB"),
        ("slabs", "cubed", "64MB"),
        ("slabs", "shardpipe", "1GB"),
        ("slabs", "cubed", "1GB"),
    ]


def _record(writer: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"case": "slabs", "writer": writer, "budget": "none", "status": "ok"} | {
        "seconds": seconds,
        **extra,
    }


def test_ratios_divide_each_anchor_by_the_writer_in_the_same_case() -> None:
    records = [
        # the limit's anchor is limit_s, not its wall time
        _record("limit", 9.0, limit_s=1.0, parts_s={"read": 2.0}, cores=2, two_pass_limit_s=1.5)
        | {"copy_parts_s": {"copy_write": 1.0}},
        _record("tensorstore", 3.0),
        _record("dask", 4.0),
        _record("shardpipe", 2.0, budget="256MB", passes=1),
        _record("cubed", 8.0) | {"status": "error"},
        _record("shardpipe", 3.0, budget="64MB", passes=2),
    ]
    ratios = rechunk_report.ratios(records, records[3])
    assert ratios == {"limit": 0.5, "tensorstore": 1.5, "dask": 2.0, "p2p": None}
    assert set(rechunk_report.ratios(records, records[4]).values()) == {None}
    text = rechunk_report.table(records, {"slabs": "slabs: a description"})
    assert "### slabs: a description" in text
    assert "two-pass limit: 1.50 s" in text and "(copy_write 1.00) s" in text
    assert "| shardpipe | 256MB | 2.00 | 0.50 | - | 1.50 | 2.00 | - |" in text
    assert "| shardpipe | 64MB | 3.00 | 0.33 | 0.50 | 1.00 | 1.33 | - |" in text
