"""Training: the fit loop, checkpoints, raster training."""
