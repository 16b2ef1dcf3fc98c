"""Inner chunks as bytes: encoding, decoding and reading compressed frames safely.

zarr's codecs on a fast synchronous path, plain codec chains, the chunk-major
canvas that gathered parts are pasted on, decompression bounded by what the
metadata promises, and zlib streams re-wrapped as gzip.
"""
