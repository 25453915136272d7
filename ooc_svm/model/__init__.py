"""Trained models and what scores them, one layer each (top to bottom): :mod:`.model` (the
``Model``, save / load), :mod:`.shard_scores` and :mod:`.model_files`, :mod:`.expansion` and
:mod:`.ovo`, :mod:`.probability` and :mod:`.model_like`. The package imports none of them: a
module below the model loads without the model above it."""
