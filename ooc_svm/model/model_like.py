"""What scoring reads of a trained model: :class:`ModelLike`, the attributes of
:class:`ooc_svm.model.model.Model` that :mod:`.shard_scores`, :mod:`.expansion` and
:mod:`.ovo` use.

Those modules sit below the model (``Model.decision_function`` of a store calls
:func:`ooc_svm.model.shard_scores.score_store`) and take a model as an argument: they name
this protocol in their annotations, not ``Model``, so that no import, not even one for the type
checker, goes up to the model. The protocol is read-only; ``Model`` satisfies it structurally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import scipy.sparse as sp


class ModelLike(Protocol):
    """A trained model as scoring reads it (see :class:`ooc_svm.model.model.Model`)."""

    @property
    def kind(self) -> str: ...
    @property
    def n_features(self) -> int: ...
    @property
    def classes(self) -> list[float]: ...
    @property
    def coef_(self) -> np.ndarray | None: ...
    @property
    def intercept_(self) -> Any: ...
    @property
    def support_vectors_(self) -> sp.csr_matrix | None: ...
    @property
    def dual_coef_(self) -> np.ndarray | None: ...
    @property
    def kernel(self) -> str: ...
    @property
    def gamma(self) -> float: ...
    @property
    def degree(self) -> int: ...
    @property
    def coef0(self) -> float: ...
    @property
    def info(self) -> dict: ...
