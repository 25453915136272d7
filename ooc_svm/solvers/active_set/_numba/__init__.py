"""active-set's numba kernels: :mod:`.blocks` (dense kernel blocks and columns, expansions)
and :mod:`.sprint` (a sprint's minor iterations in one compiled loop)."""
