"""perf's numba kernels, on the raw CSR arrays of one shard or on small dense arrays:
:mod:`.cuts` (the cutting-plane passes, the rank cut, small dense helpers), :mod:`.selective`
(the rows near the margin kept in memory by ``--variant selective``), :mod:`.sparse` (sparse
cutting planes at any width), :mod:`.qp` (the working set's QP on the simplex),
:mod:`.svmperf` (``--variant svmperf``'s full and partial rounds) and :mod:`.dcd` (the dual
coordinate descent sweeps of ``--variant dcd``)."""
