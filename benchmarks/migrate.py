"""Migrating a 1 GiB draft array to Zarr v3: ``python -m benchmarks.migrate``.

The draft array (written here, untimed, in the layout of the sharding
storage-transformer draft: ``meta/root/vol.array.json``, shards under
``data/root/vol/``): ``uint16`` (1024, 1024, 512), chunks (64, 64, 64) of
512 KiB, 4 x 4 x 4 chunks per shard (32 MiB shards), 32 shards, chunks
stored uncompressed. Each case runs in a fresh process on a fresh copy of
the draft, ``--reps`` times; time from the call to its return; peak RSS
above the RSS before the call. No fsync anywhere (``cp`` does not).

* ``cp``: ``cp -r`` of the draft's folder to another folder on the same
  disk: the raw-copy limit, the anchor;
* ``migrate-copy``: ``shardpipe.migrate(draft, target)`` (two stores: each
  shard read and written in parts of 8 MiB);
* ``migrate-in-place``: ``shardpipe.migrate(draft)`` (each shard a hard
  link inside the store, then the draft deleted);
* ``migrate-in-place-crc``: the same with ``add_crc32c=True`` (the index of
  every shard read and checksummed; each shard a file copy with 4 bytes
  appended).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child import REPO_ROOT, reset_peak, rss, run_module_child

SHAPE = (1024, 1024, 512)
SMALL = (256, 256, 512)
CHUNK = 64
PER_SHARD = 4
CASES = ("cp", "migrate-copy", "migrate-in-place", "migrate-in-place-crc")
DRAFT = "https://purl.org/zarr/spec/protocol/core/3.0"


def write_draft(root: Path, shape: tuple[int, ...]) -> int:
    """Write the draft array under ``root``; return its shard bytes."""
    (root / "meta/root").mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps({"zarr_format": DRAFT}))
    meta = {
        "attributes": {},
        "chunk_grid": {"chunk_shape": [CHUNK] * 3, "separator": "/", "type": "regular"},
        "chunk_memory_layout": "C",
        "data_type": "<u2",
        "extensions": [],
        "fill_value": 0,
        "shape": list(shape),
        "storage_transformers": [
            {
                "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
                "type": "indexed",
                "configuration": {"chunks_per_shard": [PER_SHARD] * 3},
            }
        ],
    }
    (root / "meta/root/vol.array.json").write_text(json.dumps(meta))
    rng = np.random.default_rng(0)
    chunk = rng.integers(0, 4096, (CHUNK,) * 3, dtype="<u2").tobytes()
    side = CHUNK * PER_SHARD
    total = 0
    for shard in np.ndindex(*(n // side for n in shape)):
        n_chunks = PER_SHARD**3
        index = np.array([(k * len(chunk), len(chunk)) for k in range(n_chunks)], dtype="<u8")
        body = chunk * n_chunks + index.tobytes()
        path = root / "data/root/vol" / ("c" + "/".join(map(str, shard)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        total += len(body)
    return total


def child(case: str, draft: Path) -> dict[str, Any]:
    """Run one case in this process; return its time and peak memory."""
    import shardpipe

    target = draft.parent / "out"
    reset_peak()
    base = rss()
    start = time.perf_counter()
    if case == "cp":
        subprocess.run(["cp", "-r", str(draft), str(target)], check=True)
    elif case == "migrate-copy":
        shardpipe.migrate(draft, target, storage_options={"fsync": False})
    else:
        crc = case == "migrate-in-place-crc"
        shardpipe.migrate(draft, add_crc32c=crc, storage_options={"fsync": False})
    seconds = time.perf_counter() - start
    peak = rss("VmHWM") - base
    ok = case == "cp" or shardpipe.verify(draft if "in-place" in case else target).ok
    return {"case": case, "seconds": seconds, "peak_above_base": peak, "verify_ok": bool(ok)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help=f"shape {SMALL} (a smoke run)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "DRAFT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = SMALL if args.small else SHAPE
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return 0
    results = []
    for rep in range(args.reps):
        for case in CASES:
            with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
                draft = Path(tmp) / "draft"
                nbytes = write_draft(draft, shape)
                subprocess.run(["sync"], check=True)
                record = run_module_child("benchmarks.migrate", args.small, case, str(draft))
                record.update(rep=rep, nbytes=nbytes)
                results.append(record)
                shutil.rmtree(tmp, ignore_errors=True)
            print(
                f"{case:>22} rep {rep}: {record['seconds']:.2f} s, "
                f"{nbytes / record['seconds'] / 1e6:.0f} MB/s, "
                f"peak +{record['peak_above_base'] / 2**20:.0f} MiB, verify {record['verify_ok']}",
                flush=True,
            )
    anchor = min(r["seconds"] for r in results if r["case"] == "cp")
    for case in CASES:
        mine = [r for r in results if r["case"] == case]
        best = min(r["seconds"] for r in mine)
        peak = max(r["peak_above_base"] for r in mine)
        print(f"{case:>22}: best {best:.2f} s ({best / anchor:.2f}x cp), peak +{peak >> 20} MiB")
    if args.out:
        meta = {"machine": platform.platform(), "shape": shape, "chunk": CHUNK}
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0 if all(r["verify_ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
