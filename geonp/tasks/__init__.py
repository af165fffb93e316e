"""What a model sees: tiles, context geometry and normalisation, shared by training and filling.

:mod:`~geonp.tasks.tiling` (tiles and their blend weights), :mod:`~geonp.tasks.context` (which
observed pixels are a task's context), :mod:`~geonp.tasks.lattice` (which pixels of a tile are
queried), :mod:`~geonp.tasks.normalize` (per-band normalisation). Pure numpy and scipy: no torch,
no raster I/O.
"""
