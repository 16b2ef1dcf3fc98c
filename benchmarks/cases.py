"""The registry of benchmark cases: one :class:`Case` per measurement of the four benchmarks.

A case names its benchmark, its volume (:mod:`benchmarks.volumes`), its writer
(:data:`benchmarks.writers.WRITERS`), where it writes (a local directory or an
``s3://`` URL with storage options) and the options of the write. The child
runner (:mod:`benchmarks.child`) gets it as JSON and needs nothing else.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SHARDS = (128, 256, 256)  # 16 MiB of uint16, 8 MiB of uint8
CHUNKS = (64, 64, 64)
CODECS = ("zstd1", "none")  # inner codecs: bytes + zstd level 1, or bytes only
BLOCK_CASES = ("aligned", "misaligned", "slabs")  # the suite's; s3 adds "multipart"
SUITE_WRITERS = {  # command-line name: report label, in report order
    "encode": "encode-only limit",
    "raw": "raw-write limit",
    "raw-fsync": "fsynced raw-write limit",
    "dask": "dask to_zarr",
    "zarrs": "dask to_zarr + zarrs",
    "format": "format-work limit",
    "format-fsync": "format-work limit (durable)",
    "tensorstore": "tensorstore",
    "tensorstore-crc": "tensorstore + crc32c",
    "tensorstore-crc-fsync": "tensorstore + crc32c (durable)",
    "cubed": "cubed store",
    "shardpipe": "shardpipe",
    "shardpipe-nofsync": "shardpipe (no fsync)",
}
DASK_WRITERS = ("dask", "zarrs", "shardpipe", "shardpipe-nofsync")  # once per block case
SIZES = {  # volume shape: (full size, --small)
    "suite": ((512, 1024, 1024), (256, 256, 512)),  # 1 GiB of uint16; 64 MiB, four shards
    "large-shard": ((1024, 1024, 1024), (256, 512, 512)),  # 1 GiB of uint8; 64 MiB
    "s3": ((256, 512, 512), (128, 256, 512)),  # 128 MiB of uint16, 8 shards; 32 MiB, 2 shards
    "cluster": ((1024, 1024, 1024), (256, 512, 512)),  # 1 GiB of uint8, 128 shards; 64 MiB, 8
}
SUITE_VOLUMES = ("smooth", "noisy")  # benchmarks.volumes: zstd-1 keeps 85 % and 62 % of them
CLUSTER_WORKERS = (1, 2)  # cluster: LocalCluster sizes measured by default
LARGE_SHARD = {  # by --small: Dask blocks (each one part of the shard), one-shard max_mem
    False: {"blocks": (64, 1024, 1024), "max_mem": "256MB"},  # 1 GiB shard = 4.2 x max_mem
    True: {"blocks": (64, 128, 512), "max_mem": "16MB"},  # 64 MiB shard = 4.2 x max_mem
}
S3_MULTIPART_MAX_MEM = "32MB"  # a 16 MiB shard > 32 MB / 3: one upload of 2 parts of 8 MiB
BUCKET = "shardpipe-bench"


@dataclass(frozen=True)
class Case:
    """One measurement: a writer writing a volume to a target, with its options."""

    bench: str  # "suite", "large-shard", "s3" or "cluster"
    label: str  # row name in the report
    writer: str  # key of benchmarks.writers.WRITERS
    volume: str  # "smooth", "noisy" or "synthetic" (benchmarks.volumes)
    shape: tuple[int, ...]
    target: str  # local directory or s3:// URL: emptied before each rep, deleted at the end
    codec: str = "zstd1"
    blocks: str | None = None  # name of the Dask block case
    block_shape: tuple[int, ...] | None = None  # Dask blocks; None: the NumPy volume
    shards: tuple[int, ...] = SHARDS
    chunks: tuple[int, ...] = CHUNKS
    max_mem: str | None = None  # shardpipe's (its default if None)
    workers: int = 0  # LocalCluster of single-threaded worker processes; 0: threaded scheduler
    storage_options: dict[str, Any] | None = None  # fsspec options of an s3:// target
    warm_up: bool = False  # first write a tiny two-part shard with shardpipe (untimed)
    shardpipe_checks: bool = False  # note shardpipe's plan, run shardpipe.verify on the output
    reps: int = 2  # timed repetitions; the fastest is reported
    seed: int = 0

    @property
    def n_shards(self) -> int:
        """Number of shards of the output."""
        return math.prod(-(-n // s) for n, s in zip(self.shape, self.shards, strict=True))

    def to_json(self) -> str:
        """The case as a JSON object (the child runner's argument)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Case:
        """Rebuild a case from :meth:`to_json` (lists become tuples again)."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(text).items()
        }
        return cls(**fields)


def block_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The Dask blocks of a block case, clipped to ``shape``."""
    blocks = {
        "aligned": SHARDS,  # one block per shard
        "misaligned": (100, 100, 100),
        "slabs": (1, *shape[1:]),  # single planes
        "multipart": (64, 256, 256),
    }[name]
    return tuple(min(b, n) for b, n in zip(blocks, shape, strict=True))


def suite_cases(
    shape: tuple[int, ...],
    volumes: list[str],
    writers: list[str],
    codecs: list[str],
    blocks: list[str],
    out_dir: Path,
    **common: Any,
) -> list[Case]:
    """The suite: per volume, each selected writer x codec (x block case for the Dask writers).

    The raw-write limit ignores the codec and runs once, under ``none``; the
    fsynced one writes the codec's shard sizes, so it runs under each.
    """
    cases = []
    for v, c in itertools.product(volumes, codecs):
        for w, label in SUITE_WRITERS.items():
            if w not in writers or (w == "raw" and c != "none"):
                continue
            for b in blocks if w in DASK_WRITERS else [None]:
                target = str(out_dir / f"{v}-{w}-{c}-{b or 'numpy'}")
                shape_b = block_shape(b, shape) if b else None
                cases.append(Case("suite", label, w, v, shape, target, c, b, shape_b, **common))
    return cases


def large_shard_cases(
    shape: tuple[int, ...],
    blocks: tuple[int, ...],
    max_mem: str,
    workers: int,
    with_dask: bool,
    out_dir: Path,
    **common: Any,
) -> list[Case]:
    """large-shard: generation alone, one shard > max_mem, fitting shards (, dask one shard).

    The report reads the first three in this order.
    """
    fitting = tuple(min(s, n) for s, n in zip(SHARDS, shape, strict=True))
    rows = [
        ("generate only", "generate", shape, None),
        ("shardpipe, one shard", "shardpipe", shape, max_mem),
        ("shardpipe, fitting shards", "shardpipe", fitting, None),
        *([("dask to_zarr, one shard", "dask", shape, None)] if with_dask else []),
    ]
    fixed: dict[str, Any] = {
        "block_shape": blocks,
        "workers": workers,
        "warm_up": True,
        "shardpipe_checks": True,
    }
    cases = []
    for label, w, shards, budget in rows:
        target = str(out_dir / f"large-shard-{w}-{'x'.join(map(str, shards))}")
        options = fixed | common | {"shards": shards, "max_mem": budget}
        cases.append(Case("large-shard", label, w, "synthetic", shape, target, **options))
    return cases


def s3_cases(shape: tuple[int, ...], endpoint: str, **common: Any) -> list[Case]:
    """s3: shardpipe and dask to_zarr, for aligned, misaligned and multipart blocks."""
    from shardpipe.testing.s3 import storage_options_for

    storage_options = storage_options_for(endpoint)  # no shared instances, no listing cache
    fixed: dict[str, Any] = {"storage_options": storage_options, "shardpipe_checks": True}
    cases = []
    for b in ("aligned", "misaligned", "multipart"):
        for w in ("shardpipe", "dask"):
            target = f"s3://{BUCKET}/{w}-{b}.zarr"
            budget = S3_MULTIPART_MAX_MEM if (b, w) == ("multipart", "shardpipe") else None
            options = fixed | common | {"block_shape": block_shape(b, shape), "max_mem": budget}
            cases.append(Case("s3", f"{w} {b}", w, "smooth", shape, target, "zstd1", b, **options))
    return cases


def cluster_cases(
    shape: tuple[int, ...], workers: list[int], out_dir: Path, **common: Any
) -> list[Case]:
    """cluster: generation alone and shardpipe (no fsync), threaded and on each cluster size.

    Dask blocks = shards = (128, 256, 256), zstd level 1; ``workers`` 0 is
    the threaded scheduler, which comes first. The report reads the rows by
    ``(writer, workers)``.
    """
    blocks = tuple(min(s, n) for s, n in zip(SHARDS, shape, strict=True))
    fixed: dict[str, Any] = {
        "block_shape": blocks,
        "shards": blocks,
        "warm_up": True,
        "shardpipe_checks": True,
    }
    cases = []
    for n in [0, *workers]:
        where = f"{n} worker{'s' if n > 1 else ''}" if n else "threaded"
        for w, label in (("generate", "generate only"), ("shardpipe-nofsync", "shardpipe")):
            target = str(out_dir / f"cluster-{w}-{n}")
            options = fixed | common | {"workers": n}
            case = Case("cluster", f"{where}: {label}", w, "synthetic", shape, target, **options)
            cases.append(case)
    return cases
