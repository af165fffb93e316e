"""geonp: fill gaps in geospatial rasters with Transformer Neural Processes.

The public API is re-exported lazily (PEP 562) so that ``import geonp`` and ``geonp --help``
do not import torch or rasterio. The CLI (``geonp_cli``) imports only these names and the
modules ``geonp.config``, ``geonp.errors`` and ``geonp._version``
(``tests/meta/test_import_boundaries.py`` checks it).
"""

from __future__ import annotations

import importlib
from typing import Any

from geonp._version import __version__

#: Public name -> the module that defines it (``module:name`` where the module names it otherwise).
_LAZY = {
    "fill": "geonp.array_fill",
    "fill_array": "geonp.array_fill",
    "fill_raster": "geonp.inference",
    "load_model": "geonp.model_files.registry",
    "list_models": "geonp.model_files.registry",
    "train": "geonp.training.raster",
    "evaluate": "geonp.evaluation",
    "fill_many": "geonp.jobs",
    "FillConfig": "geonp.config",
    "TaskShape": "geonp.training.windows",
    "train_series": "geonp.training.multidate",
    "SeriesRecipe": "geonp.training.multidate",
    "ContextSpec": "geonp.context",
    "parse_date": "geonp.io.dates",
    "scan_series": "geonp.io.timeseries",
    "default_uncertainty_path": "geonp.inference",
    "check_output_path": "geonp.io.paths",
    "evaluate_series": "geonp.evaluation.series",
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
