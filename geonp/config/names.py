"""The names of geonp's registries and single-option choices, torch- and numpy-free.

Each kind of name has one registry, in the module that owns the concept (it maps a name to what
it builds or means). Those modules import torch, numpy or rasterio, which ``geonp --help`` must
not, so the names are also kept here for the CLI's click choices and the checks of
:mod:`geonp.config`; tests/meta/test_registries.py checks that each tuple equals its registry.
"""

from __future__ import annotations

#: Model families: :data:`geonp.models.MODEL_FAMILIES`.
ARCHS = ("tnpkr", "tnpd", "cmanp")
#: TNP-KR attention kernels: :data:`geonp.models.attention.ATTENTIONS`.
ATTENTION_NAMES = ("scan", "dense", "dka", "performer")
#: Simulated gap kinds: :data:`geonp.data.gaps.MASK_MAKERS` (new kinds are appended: evaluation
#: seeds use the index).
MASK_KINDS = ("cloud", "stripe", "random", "borrowed", "mixed", "scene_cloud")
#: Gap kinds :func:`geonp.evaluate` simulates (``borrowed`` needs a real pattern: ``mask_file``).
EVALUATION_MASK_KINDS = tuple(k for k in MASK_KINDS if k != "borrowed")
#: How quality bands are read (``qa_kind``): :data:`geonp.io.qa.QA_KINDS`.
QA_KINDS = ("landsat-c2", "sentinel2-scl", "fmask")

# Choices of single options (no registry behind them)
#: Where a model runs (``device``).
DEVICES = ("auto", "cpu", "cuda")
#: Optimisers of :class:`TrainConfig`.
OPTIMIZERS = ("adamw", "yogi")
#: How a fill treats class rasters (:attr:`FillConfig.categorical`).
CATEGORICAL = ("auto", "nearest", "continuous")
#: How a fill uses references (:attr:`FillConfig.reference_fit`).
REFERENCE_FITS = ("regression", "none")
#: Which gap pixels a fill predicts (:attr:`FillConfig.queries`).
QUERY_MODES = ("lattice", "every")
