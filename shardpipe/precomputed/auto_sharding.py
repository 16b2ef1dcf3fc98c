"""The ``sharding="auto"`` rule of precomputed writes: one aligned box of chunks per shard.

The ``auto`` rule (:func:`auto_sharding`): identity hash; the lowest
``p`` bits of a chunk id (``preshift_bits + minishard_bits``) span an
aligned box of chunks, chosen as the largest box whose raw bytes stay within
``target_shard_nbytes`` (a third of ``max_mem``: one task holds a shard),
so that every shard is one box and one task owns it. Of those bits, the
minishard bits are as many as keep each minishard to at most 64 chunks (an
index of 1.5 KiB before gzip) without the shard index passing 8 KiB (512
minishards); the rest are preshift bits. ``shard_bits`` is what remains of
the ids, so no two boxes share a shard.

Against cloud-volume's recommendation (``compute_shard_params_for_image``,
which igneous uses): it also takes the identity hash for images and a
power-of-two number of chunks per shard, but sizes shards to about 3.5 GB
uncompressed (igneous tasks are sized to hold them) and lets a minishard
list up to 4,000 chunks (an index of up to 96 KB), keeping the shard index
to 8 KiB too. shardpipe's shards follow the memory budget instead, and its
smaller minishard indexes make a viewer's first read of a chunk cheaper.
"""

from __future__ import annotations

import math

from shardpipe.core.morton import low_bits_box
from shardpipe.core.precomputed_plan import ScaleGrid
from shardpipe.formats.precomputed import PrecomputedSharding

MINISHARD_CHUNKS_BITS = 6
"""Up to 2**6 chunks per minishard in the ``auto`` rule (where the shard index allows)."""

MAX_MINISHARD_BITS = 9
"""At most 2**9 minishards: a shard index of 8 KiB."""


def auto_sharding(
    scale: ScaleGrid, chunk_nbytes: int, target_shard_nbytes: int
) -> PrecomputedSharding:
    """The ``sharding="auto"`` spec of a scale (the rule is in the module's docstring).

    Parameters
    ----------
    scale : ScaleGrid
        The scale's grid.
    chunk_nbytes : int
        Raw bytes of a whole chunk (all channels).
    target_shard_nbytes : int
        Most raw bytes of a shard's box.
    """
    bits = scale.id_bits
    low = 0
    while low < bits and chunk_nbytes * math.prod(low_bits_box(scale.grid, low + 1)) <= (
        target_shard_nbytes
    ):
        low += 1
    minishard = min(max(low - MINISHARD_CHUNKS_BITS, 0), MAX_MINISHARD_BITS)
    preshift = low - minishard
    return PrecomputedSharding(
        preshift_bits=preshift,
        minishard_bits=minishard,
        shard_bits=bits - low,
        hash="identity",
        minishard_index_encoding="gzip",
        data_encoding="raw",
    )
