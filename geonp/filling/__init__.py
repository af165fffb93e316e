"""Fill the gaps of a raster, an array or a data cube with a trained model.

One fill runs six stages; each names the module that does it::

    read ──> gaps ──> tasks ──> model ──> blocks ──> write

    read    raster.fill_raster opens a file (geonp.io.raster); arrays.fill_array and
            xarray_fill.fill take numpy and xarray/Dask, cube.fill a cube with a time dimension;
            inputs types a file's gaps, outputs and references (Gaps, Outputs, Reference);
            survey samples the normalisation statistics
    gaps    the missing-pixel rule and extra gap sources (geonp.io.masks, geonp.io.gap_sources);
            survey counts the gaps and plans a dry run
    tasks   tile_tasks.block_tasks cuts a block into tiles and each tile into a task (geonp.tasks:
            tiling, context, lattice, normalize)
    model   predict.Predictor runs the tasks in batched model calls and blends the tiles;
            references (multi-date regression), classes (class rasters: no model) and
            calibration (the std by distance to data) act on its output
    blocks  plan.FillPlan.build fixes once what every block needs (tiles, normaliser,
            calibration, reference lines); block.fill_block fills one block's arrays;
            engine reads each block of a file with a halo and runs fill_block here, in a
            process pool (interrupts) or on Dask (dask_client); xarray_fill slices blocks
            of Dask arrays for the same fill_block
    write   raster writes the filled raster and its std atomically (geonp.io.atomic) and
            counts every missing pixel in a report (FillReport);
            xarray_result builds the Dataset that geonp.fill returns

The public entry points are ``geonp.fill_raster``, ``geonp.fill_array`` and ``geonp.fill``.
"""
