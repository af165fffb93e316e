"""Tasks and data for training and evaluation (numpy, plus torch only for :class:`Batch`).

:mod:`~geonp.data.tasks` (raster windows to tasks, padding), :mod:`~geonp.data.batch`,
:mod:`~geonp.data.gaps` and :mod:`~geonp.data.gap_shapes` (simulated gaps),
:mod:`~geonp.data.synthetic` and :mod:`~geonp.data.gp_tasks` (Gaussian-process data),
:mod:`~geonp.data.datasets` (training patches from the user's rasters).
"""
