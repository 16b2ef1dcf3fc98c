"""Wave schedules (``shardpipe.core.waves``) against brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.waves import WaveSchedule, wave_shards
from tests.support.examples import scaled


@st.composite
def schedules(draw: st.DrawFn) -> WaveSchedule:
    ndim = draw(st.integers(1, 4))
    ranges = []
    for _ in range(ndim):
        start = draw(st.integers(0, 3))
        ranges.append(range(start, start + draw(st.integers(0, 5))))
    return WaveSchedule(tuple(ranges), draw(st.integers(1, 40)))


@given(schedules())
@settings(max_examples=scaled(300), deadline=None)
def test_waves_are_boxes_that_partition_the_shards_in_c_order(schedule: WaveSchedule) -> None:
    shards = list(itertools.product(*schedule.ranges))
    waves = list(schedule)
    assert len(waves) == schedule.n_waves
    in_order = [s for w in waves for s in itertools.product(*w.ranges)]
    assert in_order == shards  # every shard once, waves in C order
    for number, wave in enumerate(waves):
        assert wave.number == number
        assert 1 <= wave.n_shards <= schedule.max_shards
        for shard in itertools.product(*wave.ranges):
            assert wave.contains(shard)
            assert schedule.wave_of(shard) == number
    if shards and len(shards) <= schedule.max_shards:
        assert len(waves) == 1


def test_rows_split_only_when_a_row_is_larger_than_a_wave() -> None:
    grid = (range(4), range(6))
    assert [w.ranges for w in WaveSchedule(grid, 12)] == [
        (range(0, 2), range(6)),
        (range(2, 4), range(6)),
    ]
    assert WaveSchedule(grid, 6).n_waves == 4
    assert [w.ranges[1] for w in WaveSchedule(grid, 4)][:2] == [range(0, 4), range(4, 6)]


def test_a_petabyte_grid_has_waves_of_bounded_size() -> None:
    grid = (range(98),) * 3  # 941,192 shards of 1 GiB
    schedule = WaveSchedule(grid, 3333)
    assert schedule.n_waves == 98 * 3  # 3,333 shards: 34 rows of 98, three waves per plane
    sizes = {schedule.wave(k).n_shards for k in range(schedule.n_waves)}
    assert max(sizes) <= 3333
    assert sum(schedule.wave(k).n_shards for k in range(schedule.n_waves)) == 98**3


@pytest.mark.parametrize(
    ("per_shard", "max_tasks", "min_shards", "total", "expected"),
    [
        (6, 20_000, 4, 1_000_000, 3333),
        (6, 20_000, 4, 100, 100),  # a small write is one wave
        (100_000, 20_000, 4, 1_000, 4),  # never fewer shards than threads need
        (0.5, 10, 1, 1_000, 10),
        (1, 10, 1, 0, 1),
    ],
)
def test_wave_size(per_shard, max_tasks, min_shards, total, expected) -> None:
    assert wave_shards(per_shard, max_tasks, min_shards, total) == expected


def test_bad_wave_size() -> None:
    with pytest.raises(ValueError, match="max_shards"):
        WaveSchedule((range(3),), 0)
