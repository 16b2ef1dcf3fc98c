"""The pieces of the scale benchmark (``python -m benchmarks scale``) that its numbers rest on."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from benchmarks import scale, scale_child, scale_report


@pytest.mark.parametrize(
    ("size", "shape"),
    [
        ("1PiB", (131072, 131072, 65536)),
        ("10PiB", (262144, 262144, 163840)),
        ("4TiB", (16384, 16384, 16384)),
        ("2GiB", (2048, 1024, 1024)),
        ("1GiB", (1024, 1024, 1024)),
        ("1000", (1024, 1024, 1024)),  # at least one shard
    ],
)
def test_shapes_hold_the_size_in_whole_shards(size: str, shape: tuple[int, ...]) -> None:
    assert scale.shape_for(scale.parse_size(size)) == shape


def test_the_source_depends_on_coordinates_only() -> None:
    shape = (300, 700, 650)
    a = scale_child.source(shape, (128, 256, 512))
    b = scale_child.source(shape, (300, 100, 77))
    box = (slice(90, 250), slice(200, 690), slice(400, 650))
    values = np.asarray(a[box].compute())
    assert np.array_equal(values, b[box].compute())
    assert values.dtype == np.uint8 and len(np.unique(values)) > 40
    assert a.numblocks == (3, 3, 2) and len(a.dask.layers) == 1


def _payload(tasks: int, n_shards: int, rate: float) -> dict[str, Any]:
    facts = {"num_tasks": tasks, "n_shards": n_shards}
    big = {"role": "big", "status": "ok", "mb_per_s": rate, "result": {"facts": facts}}
    return {"null": [big], "plan": []}


def test_the_estimate_scales_the_measured_rate() -> None:
    e = scale_report.estimate(_payload(20, 2, 250.0), [10, 100], 200.0)
    assert e["shards"] == 2**20 and e["tasks_per_shard"] == 10 and e["tasks"] == 10 * 2**20
    assert e["waves"] is None
    ten, hundred = e["rows"]
    assert ten["mb_per_s"] == 2500 and hundred["mb_per_s"] == 25000
    assert math.isclose(ten["hours"] * 3600, 2**50 / 2.5e9)
    assert math.isclose(hundred["tasks_per_s"], 10 * hundred["shards_per_s"])
    assert math.isclose(hundred["scheduler_cores"], hundred["tasks_per_s"] * 200e-6)
    assert "waves: unknown" in scale_report.report({"meta": _meta(), "estimate": e})


def test_the_estimate_counts_the_waves_of_the_petabyte_plan() -> None:
    payload = _payload(20, 2, 250.0)
    payload["null"][0]["result"]["facts"]["wave_shards"] = 2  # cut to the small array
    assert scale_report.estimate(payload, [10], 200.0)["waves"] is None
    facts = {"num_tasks": 12 * 2**20, "n_shards": 2**20, "wave_shards": 1000}
    plan = {"nbytes": 2**50, "status": "ok", "peak_rss": 2**27, "result": {"facts": facts}}
    payload["plan"] = [plan]
    e = scale_report.estimate(payload, [10], 200.0)
    assert e["waves"] == math.ceil(2**20 / 1000)
    assert math.isclose(e["wave_tasks"], 12 * 2**20 / e["waves"])
    assert e["tasks_per_shard"] == 12 and e["tasks_per_shard_from"] == "the 1 PiB plan"
    assert e["client_plan_peak_rss"] == 2**27
    assert math.isclose(e["rows"][0]["wave_s"] * e["waves"], e["rows"][0]["hours"] * 3600)
    facts["n_waves"] = 1024  # boxes of whole rows: more waves than the division says
    assert scale_report.estimate(payload, [10], 200.0)["waves"] == 1024


def test_null_ratios_use_the_median_of_the_small_runs() -> None:
    runs = [
        {"role": "base", "mb_per_s": 100.0, "mb_per_cpu_s": 50.0},
        {"role": "big", "mb_per_s": 90.0, "mb_per_cpu_s": 60.0},
        {"role": "base", "mb_per_s": 80.0, "mb_per_cpu_s": 70.0},
    ]
    ratios = scale_report.null_ratios(runs)
    assert ratios == {"wall": 1.0, "cpu": 1.0, "base_runs": 2}


def test_a_child_stopped_by_its_hook_is_killed_and_says_why() -> None:
    options: dict[str, Any] = {"shards": [64] * 3, "chunks": [32] * 3, "blocks": [64] * 3}
    options |= {"max_mem": "64MB"}
    options |= {"seed": 0, "zstd_level": 1, "shape": [64] * 3}
    record = scale.run_child("plan", options, 60, 2**30, hook=lambda proc, lines: "enough")
    assert record["status"] == "enough" and record["result"] is None
    assert record["rss_samples"] and record["seconds"] < 30
    record = scale.run_child("plan", options, 60, 2**30)
    assert record["status"] == "ok", record["stderr_tail"]
    assert record["result"]["facts"]["n_shards"] == 1 and "ShardedWrite" in record["result"]["repr"]


def _meta() -> dict[str, Any]:
    return {
        "started": "now",
        "git_commit": "abc",
        "shardpipe_uncommitted_changes": False,
        "cpu_count": 2,
        "mem_total_gib": 8.0,
        "load_at_start": [1.0, 1.0, 1.0],
        "shards": scale.SHARDS,
        "chunks": scale.CHUNKS,
        "blocks": scale.BLOCKS,
        "max_mem": "768MB",
        "zstd_level": 1,
    }
