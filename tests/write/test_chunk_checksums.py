"""Checksums of inner chunks: ``crc32c`` at the end of the inner chain by default, and verify.

Every front-end that creates arrays (``to_sharded_zarr``, ``rechunk``,
``ds.shard.to_zarr``, the CLI) ends the inner chain with zarr's ``crc32c``
codec unless ``chunk_checksums=False`` (``--no-chunk-checksums``); chains
that already check their chunks are kept as given. ``verify`` names every
failing chunk by its coordinates, slot and shard, with the cause in words.
The bit-flip experiment of issue #10 (item 7) runs here too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import crc32c
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.codec.chunk_codec import ChunkCodec, ChunkDecodeError, sharding_codec_of
from shardpipe.codec.zstd_frames import zstd_frames
from shardpipe.errors import InvalidArgumentError
from shardpipe.stored.metadata import format_of
from tests.support.readers import assert_same, read_tensorstore, read_zarr

SHARDS, CHUNKS = (32, 64), (16, 32)
ZARRS = "zarrs.ZarrsCodecPipeline"


def image(shape: tuple[int, ...] = (64, 128), seed: int = 0) -> np.ndarray:
    """A smooth uint16 image with noise in the low bits, as in the benchmarks."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*(np.linspace(0, 3, n) for n in shape), indexing="ij")
    smooth = sum(np.sin(g * (k + 1)) for k, g in enumerate(grids))
    scaled = (smooth - smooth.min()) / (np.ptp(smooth) or 1) * 60000
    noise = rng.integers(0, 8, shape)
    return (scaled.astype(np.uint64) + noise).astype(np.uint16)


def inner_codecs(path: Path | str, name: str | None = None) -> tuple[Any, ...]:
    array = zarr.open_array(str(path), path=name or "", mode="r")
    return tuple(sharding_codec_of(array.metadata).codecs)


def names(codecs: tuple[Any, ...]) -> list[str]:
    return [str(c.to_dict()["name"]) for c in codecs]


def chunk_ranges(path: Path, key: str = "c/0/0") -> list[tuple[int, int, int]]:
    """``(slot, start, stop)`` of the stored inner chunks of the shard at ``key``."""
    metadata = zarr.open_array(str(path), mode="r").metadata
    blob = (path / key).read_bytes()
    index, _ = format_of(metadata).read_index(lambda a, b: blob[a:b], len(blob), shard=(0,))
    stored = np.flatnonzero(index.stored())
    return [(int(s), int(index.entries[s, 0]), int(sum(index.entries[s]))) for s in stored]


# --- default on, for every front-end -------------------------------------------------------


def test_to_sharded_zarr_ends_the_chain_with_crc32c_and_every_reader_reads_it(
    tmp_path: Path,
) -> None:
    data = image()
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(20, 50)), str(tmp_path), shards=SHARDS, chunks=CHUNKS
    )
    assert inner_codecs(tmp_path) == (
        BytesCodec(endian="little"),
        ZstdCodec(level=0, checksum=False),
        Crc32cCodec(),
    )
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)
    assert_same(read_zarr(str(tmp_path), pipeline=ZARRS), data)
    report = shardpipe.verify(str(tmp_path))
    assert report.ok and not report.notes, str(report)


def test_opt_out_writes_the_chain_as_given_and_verify_notes_it(tmp_path: Path) -> None:
    data = image()
    shardpipe.to_sharded_zarr(
        data, str(tmp_path), shards=SHARDS, chunks=CHUNKS, chunk_checksums=False
    )
    assert names(inner_codecs(tmp_path)) == ["bytes", "zstd"]
    assert_same(read_tensorstore(str(tmp_path)), data)
    report = shardpipe.verify(str(tmp_path))
    assert report.ok
    assert len(report.notes) == 1 and "carry no checksum" in report.notes[0]
    assert "note: inner chunks carry no checksum (inner codecs bytes -> zstd)" in str(report)


@pytest.mark.parametrize(
    ("compressors", "expected"),
    [
        (None, ["bytes", "crc32c"]),
        (ZstdCodec(level=3), ["bytes", "zstd", "crc32c"]),
        ({"name": "gzip", "configuration": {"level": 1}}, ["bytes", "gzip", "crc32c"]),
        ([ZstdCodec(level=1), Crc32cCodec()], ["bytes", "zstd", "crc32c"]),
        ([Crc32cCodec(), GzipCodec(level=1)], ["bytes", "crc32c", "gzip"]),
        (ZstdCodec(level=1, checksum=True), ["bytes", "zstd"]),
    ],
    ids=["none", "zstd", "gzip-dict", "ends-crc32c", "crc32c-inside", "zstd-checksum"],
)
def test_own_compressors_get_one_checksum_at_most(
    tmp_path: Path, compressors: Any, expected: list[str]
) -> None:
    data = image((32, 64))
    shardpipe.to_sharded_zarr(
        data, str(tmp_path), shards=SHARDS, chunks=CHUNKS, compressors=compressors
    )
    assert names(inner_codecs(tmp_path)) == expected
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)
    report = shardpipe.verify(str(tmp_path))
    assert report.ok and not report.notes


def test_filters_and_serializer_keep_their_place(tmp_path: Path) -> None:
    from zarr.codecs import TransposeCodec

    data = image((32, 64))
    shardpipe.to_sharded_zarr(
        data,
        str(tmp_path),
        shards=SHARDS,
        chunks=CHUNKS,
        filters=[TransposeCodec(order=(1, 0))],
        serializer=BytesCodec(endian="big"),
    )
    assert names(inner_codecs(tmp_path)) == ["transpose", "bytes", "zstd", "crc32c"]
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)


def test_rechunk_and_plan_rechunk(tmp_path: Path) -> None:
    data = image()
    source = zarr.create_array(
        str(tmp_path / "src"), shape=data.shape, dtype=data.dtype, chunks=(8, 128)
    )
    source[...] = data
    shardpipe.rechunk(str(tmp_path / "src"), str(tmp_path / "on"), shards=SHARDS, chunks=CHUNKS)
    assert names(inner_codecs(tmp_path / "on")) == ["bytes", "zstd", "crc32c"]
    assert_same(read_tensorstore(str(tmp_path / "on")), data)
    job = shardpipe.plan_rechunk(
        str(tmp_path / "src"),
        str(tmp_path / "off"),
        shards=SHARDS,
        chunks=CHUNKS,
        chunk_checksums=False,
    )
    assert "bytes -> zstd\n" in repr(job) or repr(job).rstrip().endswith("bytes -> zstd")
    job.execute()
    assert names(inner_codecs(tmp_path / "off")) == ["bytes", "zstd"]
    assert_same(read_zarr(str(tmp_path / "off")), data)


def _dataset() -> xr.Dataset:
    t2m = xr.DataArray(image((32, 128)).astype("float32"), dims=("time", "x"))
    return xr.Dataset({"t2m": t2m}, coords={"time": np.arange(32), "x": np.arange(128)})


def test_accessor_default_opt_out_and_own_encoding(tmp_path: Path) -> None:
    ds = _dataset()
    ds.shard.to_zarr(str(tmp_path / "on"), shards={"time": 16}, chunks={"x": 32})
    assert names(inner_codecs(tmp_path / "on", "t2m")) == ["bytes", "zstd", "crc32c"]
    xr.testing.assert_identical(xr.open_zarr(str(tmp_path / "on")).load(), ds)
    assert_same(read_tensorstore(str(tmp_path / "on" / "t2m")), ds["t2m"].values)
    ds.shard.to_zarr(str(tmp_path / "off"), shards={"time": 16}, chunk_checksums=False)
    assert names(inner_codecs(tmp_path / "off", "t2m")) == ["bytes", "zstd"]
    own = {"t2m": {"compressors": [ZstdCodec(level=2), Crc32cCodec()]}}
    ds.shard.to_zarr(str(tmp_path / "own"), shards={"time": 16}, encoding=own)
    assert names(inner_codecs(tmp_path / "own", "t2m")) == ["bytes", "zstd", "crc32c"]
    xr.testing.assert_identical(xr.open_zarr(str(tmp_path / "own")).load(), ds)


def test_cli_commands_default_and_no_chunk_checksums(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = image()
    source = zarr.create_array(
        str(tmp_path / "src"), shape=data.shape, dtype=data.dtype, chunks=(8, 128)
    )
    source[...] = data
    shapes = ["--shards", "32,64", "--chunks", "16,32"]
    assert (
        main(["rechunk", str(tmp_path / "src"), str(tmp_path / "on"), *shapes, "--no-progress"])
        == 0
    )
    assert names(inner_codecs(tmp_path / "on")) == ["bytes", "zstd", "crc32c"]
    argv = ["rechunk", str(tmp_path / "src"), str(tmp_path / "off"), *shapes, "--no-progress"]
    assert main([*argv, "--no-chunk-checksums"]) == 0
    assert names(inner_codecs(tmp_path / "off")) == ["bytes", "zstd"]
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "new"), "--shape", "64,128", *shapes]) == 0
    assert "bytes -> zstd -> crc32c" in capsys.readouterr().out
    assert (
        main(["plan", str(tmp_path / "new"), "--shape", "64,128", *shapes, "--no-chunk-checksums"])
        == 0
    )
    assert "bytes -> zstd -> crc32c" not in capsys.readouterr().out
    assert not (tmp_path / "new").exists()
    _dataset().to_zarr(str(tmp_path / "ds.zarr"), zarr_format=2, consolidated=True)
    assert main(["write-dataset", str(tmp_path / "ds.zarr"), str(tmp_path / "dson")]) == 0
    assert names(inner_codecs(tmp_path / "dson", "t2m")) == ["bytes", "zstd", "crc32c"]
    assert (
        main(
            [
                "write-dataset",
                str(tmp_path / "ds.zarr"),
                str(tmp_path / "dsoff"),
                "--no-chunk-checksums",
            ]
        )
        == 0
    )
    assert names(inner_codecs(tmp_path / "dsoff", "t2m")) == ["bytes", "zstd"]


@pytest.mark.parametrize("value", ["False", 1, None, [True]])
def test_chunk_checksums_is_validated_before_anything_is_written(
    tmp_path: Path, value: Any
) -> None:
    data = image((32, 64))
    calls = {
        "to_sharded_zarr": lambda t: shardpipe.to_sharded_zarr(data, t, chunk_checksums=value),
        "prepare_write": lambda t: shardpipe.prepare_write(data, t, chunk_checksums=value),
        "rechunk": lambda t: shardpipe.rechunk(da.from_array(data), t, chunk_checksums=value),
        "accessor": lambda t: _dataset().shard.to_zarr(t, chunk_checksums=value),
    }
    for name, call in calls.items():
        target = tmp_path / name
        with pytest.raises(InvalidArgumentError) as caught:
            call(str(target))
        assert caught.value.parameter == "chunk_checksums", name
        assert repr(value) in str(caught.value) and "chunk_checksums=False" in str(caught.value)
        assert not target.exists(), name


def test_updates_keep_the_stored_chain(tmp_path: Path) -> None:
    data = image((64, 128))
    for checksums in (False, True):
        path = str(tmp_path / str(checksums))
        shardpipe.to_sharded_zarr(
            data[:32], path, shards=SHARDS, chunks=CHUNKS, chunk_checksums=checksums
        )
        before = inner_codecs(path)
        shardpipe.to_sharded_zarr(data[32:], path, append_dim=0)  # chunk_checksums left at True
        shardpipe.to_sharded_zarr(data[:8] + 1, path, region=(slice(0, 8), slice(None)))
        assert inner_codecs(path) == before
        expected = data.copy()
        expected[:8] += 1
        assert_same(read_zarr(path), expected)
        assert_same(read_tensorstore(path), expected)
        assert shardpipe.verify(path).ok


def test_memory_model_counts_the_four_bytes() -> None:
    codecs = {}
    for checksums in (False, True):
        array = zarr.create_array(
            zarr.storage.MemoryStore(),
            shape=(64, 64),
            dtype="uint16",
            chunks=(16, 16),
            shards=(32, 32),
            compressors=shardpipe.codec.checksums.checksummed_compressors(
                "auto", np.dtype("uint16"), chunk_checksums=checksums
            ),
        )
        codecs[checksums] = ChunkCodec.from_metadata(array.metadata)
    (factor_off, extra_off), (factor_on, extra_on) = codecs[False].expansion, codecs[True].expansion
    assert factor_on == factor_off and extra_on == extra_off + 4
    chunk = np.arange(256, dtype="uint16").reshape(16, 16)
    encoded, plain = codecs[True].encode(chunk), codecs[False].encode(chunk)
    assert encoded is not None and plain is not None
    assert bytes(encoded) == bytes(plain) + crc32c.crc32c(bytes(plain)).to_bytes(4, "little")
    assert_same(codecs[True].decode(encoded), chunk)


# --- verify: which chunk, and why ----------------------------------------------------------


def _flip(path: Path, key: str, byte: int, bit: int = 0) -> None:
    blob = bytearray((path / key).read_bytes())
    blob[byte] ^= 1 << bit
    (path / key).write_bytes(bytes(blob))


def test_verify_names_the_chunk_its_slot_shard_and_the_crc_mismatch(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(image(), str(tmp_path), shards=SHARDS, chunks=CHUNKS)
    slot, start, stop = chunk_ranges(tmp_path, "c/1/1")[3]
    _flip(tmp_path, "c/1/1", (start + stop) // 2)
    report = shardpipe.verify(str(tmp_path))
    assert not report.ok
    [failure] = report.chunk_failures
    assert (failure.key, failure.slot) == ("c/1/1", slot)
    # slot 3 of shard (1, 1) is its chunk (1, 1): chunk (1 * 2 + 1, 1 * 2 + 1) of the array
    assert failure.chunk == (3, 3)
    assert failure.cause.startswith("CRC32C mismatch (stored 0x")
    assert ", computed 0x" in failure.cause
    assert f"c/1/1: inner chunk (3, 3) (slot {slot}): CRC32C mismatch" in str(report)
    with pytest.raises(ValueError, match="checksum do not match"):
        zarr.open_array(str(tmp_path), mode="r")[...]  # zarr-python refuses it too


def _forge_content_size(frame: bytes, size: int) -> bytes:
    """The zstd ``frame`` with its header rewritten to declare ``size`` bytes of content."""
    descriptor = frame[4]
    single = (descriptor >> 5) & 1
    fcs_nbytes = (1 if single else 0, 2, 4, 8)[descriptor >> 6]
    header_end = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3] + fcs_nbytes
    middle = frame[5 : header_end - fcs_nbytes]
    return (
        frame[:4]
        + bytes([0xC0 | (descriptor & 0x3F)])
        + middle
        + size.to_bytes(8, "little")
        + frame[header_end:]
    )


@pytest.mark.parametrize("checksums", [False, True])
def test_a_frame_declaring_two_to_the_forty_bytes_is_reported_not_allocated(
    tmp_path: Path, checksums: bool
) -> None:
    data = image()
    shardpipe.to_sharded_zarr(
        data, str(tmp_path), shards=SHARDS, chunks=CHUNKS, chunk_checksums=checksums
    )
    blob = (tmp_path / "c/0/1").read_bytes()
    # forge the chunk stored last, so that no other chunk moves
    slot, start, stop = max(chunk_ranges(tmp_path, "c/0/1"), key=lambda r: r[2])
    chunk = blob[start:stop]
    frame = chunk[:-4] if checksums else chunk
    forged = _forge_content_size(frame, 1 << 40)
    assert zstd_frames(forged).declared == 1 << 40
    if checksums:  # a forger who also fixes the CRC32C
        forged += crc32c.crc32c(forged).to_bytes(4, "little")
    metadata = zarr.open_array(str(tmp_path), mode="r").metadata
    index_nbytes = format_of(metadata).index_nbytes()
    index = np.frombuffer(blob[-index_nbytes:-4], dtype="<u8").reshape(-1, 2).copy()
    index[slot, 1] = len(forged)
    body = index.tobytes()
    shard = blob[:start] + forged + body + crc32c.crc32c(body).to_bytes(4, "little")
    (tmp_path / "c/0/1").write_bytes(shard)
    report = shardpipe.verify(str(tmp_path))
    [failure] = report.chunk_failures
    raw = 16 * 32 * 2
    assert failure.cause == f"zstd frame declares {1 << 40} bytes of content, the chunk holds {raw}"
    local = np.unravel_index(slot, (2, 2))
    assert failure.chunk == (int(local[0]), 2 + int(local[1])) and failure.key == "c/0/1"
    assert "()" not in str(report)


def test_garbage_and_truncated_chunks_say_what_happened(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(
        image(), str(tmp_path), shards=SHARDS, chunks=CHUNKS, chunk_checksums=False
    )
    codec = ChunkCodec.from_metadata(zarr.open_array(str(tmp_path), mode="r").metadata)
    with pytest.raises(ChunkDecodeError, match=r"no zstd frame at byte 0 \(magic number 0x"):
        codec.decode(b"\x00" * 64)
    blob = (tmp_path / "c/0/0").read_bytes()
    _, start, stop = chunk_ranges(tmp_path)[0]
    with pytest.raises(ChunkDecodeError, match="runs past the end of the"):
        codec.decode(blob[start : stop - 10])
    damaged = bytearray(blob[start:stop])
    damaged[len(damaged) // 2] ^= 0xFF
    try:
        codec.decode(bytes(damaged))
    except ChunkDecodeError as err:
        assert str(err).startswith("does not decode (zstd): RuntimeError: ") and "()" not in str(
            err
        )
    checksummed = ChunkCodec(
        (BytesCodec(endian="little"), Crc32cCodec()), codec.chunk_shape, codec.spec
    )
    with pytest.raises(
        ChunkDecodeError, match=r"holds 3 byte\(s\), fewer than the 4 of its CRC32C"
    ):
        checksummed.decode(b"abc")


def test_zstd_frames_reads_headers_of_real_frames() -> None:
    from numcodecs import Zstd

    raw = image((64, 64)).tobytes()
    one = Zstd(level=1).encode(raw)
    assert zstd_frames(one).declared == len(raw) and zstd_frames(one).frames == 1
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    two = zstd_frames(bytes(one) + skippable + bytes(one))
    assert (two.frames, two.declared) == (2, 2 * len(raw))


# --- the experiment of issue #10, item 7 ---------------------------------------------------

FLIPS = 200


def _flip_experiment(tmp_path: Path, checksums: bool) -> dict[str, int]:
    """Flip one random bit of the chunk bytes of a shard, ``FLIPS`` times; classify each.

    ``detected``: verify reports a problem; ``silent_change``: verify says OK
    but zarr-python reads other values; ``no_change``: verify OK, same values.
    """
    path = tmp_path / f"checksums-{checksums}"
    data = image((32, 64))
    shardpipe.to_sharded_zarr(
        data, str(path), shards=SHARDS, chunks=CHUNKS, chunk_checksums=checksums
    )
    key = "c/0/0"
    original = (path / key).read_bytes()
    positions = [b for _, start, stop in chunk_ranges(path, key) for b in range(start, stop)]
    rng = np.random.default_rng(7)
    counts = {"detected": 0, "silent_change": 0, "no_change": 0}
    for _ in range(FLIPS):
        blob = bytearray(original)
        blob[positions[int(rng.integers(len(positions)))]] ^= 1 << int(rng.integers(8))
        (path / key).write_bytes(bytes(blob))
        if not shardpipe.verify(str(path), workers=1).ok:
            counts["detected"] += 1
            continue
        same = np.array_equal(zarr.open_array(str(path), mode="r")[...], data)
        counts["no_change" if same else "silent_change"] += 1
    (path / key).write_bytes(original)
    return counts


def test_bit_flips_in_chunk_bytes_are_all_detected_with_checksums(tmp_path: Path) -> None:
    on = _flip_experiment(tmp_path, checksums=True)
    off = _flip_experiment(tmp_path, checksums=False)
    print(
        f"\n{FLIPS} single-bit flips in chunk bytes: with crc32c {json.dumps(on)}; "
        f"without {json.dumps(off)}"
    )
    assert on == {"detected": FLIPS, "silent_change": 0, "no_change": 0}
    assert off["detected"] < FLIPS  # without checksums some flips pass verify
    assert off["silent_change"] > 0  # ... and read back as other values
