"""geonp: fill gaps in geospatial rasters with Transformer Neural Processes.

Public API (``help(geonp.NAME)`` for each):

- ``fill_raster(input, output, ...)``: fill a raster file; write the filled raster and its std.
- ``fill(dataarray, ...)``: fill an xarray DataArray (numpy or Dask), one date or a cube with a
  ``time`` dimension (each date from its nearest dates); returns filled and std.
- ``fill_array(values, valid, ...)``: fill a numpy array ``[bands, h, w]``.
- ``fill_many(input_dir, output_dir, ...)``: fill every raster of a directory (``geonp batch``),
  with ``Files`` (which), ``Cluster`` (where) and ``Neighbours`` (other dates as references).
- ``load_model(name_or_dir)``, ``list_models()``: the built-in and trained models.
- ``train(data, output, recipe, run=...)``, ``train_series(data, output, recipe, ...)``: train a
  model (single- or multi-date): ``TrainingData`` or ``SeriesData`` (what on), ``TrainOutput``
  (where to), ``TrainRecipe`` (model, optimisation, tasks), ``TrainRun`` (processes, callbacks).
- ``evaluate(raster, ...)``, ``evaluate_series(series, SeriesProtocol(...), ...)``: score a model on hidden pixels.
- ``Gaps``, ``Outputs``, ``Reference``: a file fill's gap sources, its outputs, another date.
- ``FillConfig``, ``TaskShape``, ``SeriesRecipe``, ``ContextSpec``: option objects.
- ``default_uncertainty_path``, ``check_output_path``, ``check_quicklook_path``, ``parse_date``,
  ``scan_series``, ``series_summary``, ``series_report``: helpers the command line uses.

The public API is re-exported lazily (PEP 562) so that ``import geonp`` and ``geonp --help``
do not import torch or rasterio; ``dir(geonp)`` lists it without importing anything. The CLI
(``geonp_cli``) imports only these names and the modules ``geonp.config``, ``geonp.errors``
and ``geonp._version`` (``tests/meta/test_import_boundaries.py`` checks it).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from geonp._version import __version__

#: Public name -> the module that defines it (``module:name`` where the module names it otherwise).
_LAZY = {
    "fill": "geonp.filling.cube",  # one date (geonp.filling.xarray_fill.fill) or a cube with a time dimension
    "fill_array": "geonp.filling.arrays",
    "fill_raster": "geonp.filling.raster",
    "load_model": "geonp.model_files.registry",
    "list_models": "geonp.model_files.registry",
    "train": "geonp.training.raster",
    "evaluate": "geonp.evaluation",
    "fill_many": "geonp.batch.jobs",
    "Files": "geonp.batch.options",
    "Cluster": "geonp.batch.options",
    "Neighbours": "geonp.batch.options",
    "FillConfig": "geonp.config",
    "Gaps": "geonp.io.gap_sources",
    "Outputs": "geonp.filling.inputs",
    "Reference": "geonp.filling.inputs",
    "TaskShape": "geonp.training.windows",
    "TrainingData": "geonp.training.settings",
    "TrainOutput": "geonp.training.settings",
    "TrainRecipe": "geonp.training.settings",
    "TrainRun": "geonp.training.settings",
    "train_series": "geonp.training.multidate",
    "SeriesData": "geonp.training.series_settings",
    "SeriesRecipe": "geonp.training.series_settings",
    "ContextSpec": "geonp.tasks.context",
    "parse_date": "geonp.io.dates",
    "scan_series": "geonp.io.timeseries",
    "default_uncertainty_path": "geonp.io.paths",
    "check_output_path": "geonp.io.paths",
    "check_quicklook_path": "geonp.io.paths",
    "evaluate_series": "geonp.evaluation.series",
    "SeriesProtocol": "geonp.evaluation.series",
    "series_summary": "geonp.evaluation.series:summary",
    "series_report": "geonp.evaluation.series:report_lines",
}

__all__ = ["__version__"]
__all__.extend(sorted(_LAZY))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attr or name)
    raise AttributeError(f"module 'geonp' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (exported lazily), special names and loaded submodules, for ``dir`` and ``help``."""
    loaded = {name for name, value in globals().items()
              if isinstance(value, ModuleType) and value.__name__ == f"{__name__}.{name}"}
    return sorted(set(__all__) | loaded | {name for name in globals() if name.startswith("__")})
