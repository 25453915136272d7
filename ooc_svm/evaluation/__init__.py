"""How good a model is, in layers (top to bottom): :mod:`.evaluation` and
:mod:`.cross_validation` (a model's quality on a store, cross-validated scores) above the
solvers, :mod:`.scoring` (compatibility checks, ``predict`` output files), and below the model
:mod:`.metrics` and :mod:`.reports` (objectives and metrics, history files and plots). The
package imports none of them: each module keeps its own place in the layers."""
