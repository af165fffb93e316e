"""Model directories: save, check, load, list the built-in ones, store calibration.

This package sits above :mod:`geonp.models` (which is torch only and reads no file): it is the
only code that reads or writes a model directory's ``config.json``, ``model.safetensors`` and
``card.md``, and the training state that ``geonp train --resume`` uses.

- :mod:`~geonp.model_files.checkpoint`: :class:`LoadedModel`, ``save_model``,
  ``load_checkpoint``, ``write_calibration``.
- :mod:`~geonp.model_files.card`: :class:`ModelCard`, the typed model card.
- :mod:`~geonp.model_files.checks`: the checks a ``config.json`` and a weights file pass before
  anything is built from them.
- :mod:`~geonp.model_files.registry`: built-in models, ``load_model(name_or_path)``,
  ``list_models()``.
- :mod:`~geonp.model_files.train_state`: ``save_training_state`` / ``load_training_state``.
"""
