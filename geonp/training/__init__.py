"""Training: the fit loop, its optimisers, raster training (model files: :mod:`geonp.model_files`)."""
