"""Numba kernels on raw CSR arrays (``indptr`` int64, ``indices`` int32 read as uint32)."""
