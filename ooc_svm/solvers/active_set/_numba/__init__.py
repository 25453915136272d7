"""active-set's numba kernels: :mod:`.blocks` (dense kernel blocks and columns, expansions),
:mod:`.cholesky` (the factor's substitutions, rotations and appends) and :mod:`.sprint` (a
sprint's minor iterations in one compiled loop)."""
