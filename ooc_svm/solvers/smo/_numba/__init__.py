"""smo's numba kernels: :mod:`.wss2` (LIBSVM's second-order selection, gradient updates,
shrinking, kernel columns through the cache) and :mod:`.platt` (Platt's examine loop)."""
