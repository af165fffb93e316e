"""Raster input and output: rasterio, rioxarray and numpy, never torch.

Reading: :mod:`~geonp.io.raster` (open, describe, read windows), :mod:`~geonp.io.masks` and
:mod:`~geonp.io.observed` (the one rule for a missing pixel), :mod:`~geonp.io.qa`,
:mod:`~geonp.io.vector`, :mod:`~geonp.io.reproject`, :mod:`~geonp.io.footprint`,
:mod:`~geonp.io.gap_sources`, :mod:`~geonp.io.hints`; other dates: :mod:`~geonp.io.dates`,
:mod:`~geonp.io.references`, :mod:`~geonp.io.timeseries`.

Writing: :mod:`~geonp.io.paths` (output checks), :mod:`~geonp.io.profiles` (profiles, ``--co``,
COG), :mod:`~geonp.io.formats` (drivers, GDAL's trial), :mod:`~geonp.io.metadata`,
:mod:`~geonp.io.validity`, :mod:`~geonp.io.atomic` (atomic writers),
:mod:`~geonp.io.partials` (their temporary files), :mod:`~geonp.io.write_errors` (full disks).
"""
