"""Fill every raster of a directory (``geonp batch``), resumably.

:mod:`~geonp.batch.jobs` (``fill_many``: one Dask task per file, each a
:func:`geonp.fill_raster`), :mod:`~geonp.batch.manifest` (the JSON manifest a killed run resumes
from).
"""
