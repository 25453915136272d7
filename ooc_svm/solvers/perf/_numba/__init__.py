"""perf's numba kernels, on the raw CSR arrays of one shard: :mod:`.cuts` (the cutting-plane
passes, the rank cut, small dense helpers), :mod:`.selective` (the rows near the margin kept
in memory by ``--variant selective``), :mod:`.sparse` (sparse cutting planes at any width),
:mod:`.dcd` (the dual coordinate descent sweeps of ``--variant dcd``)."""
