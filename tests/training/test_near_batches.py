"""Near batches: training tasks shaped like the fill's tiles near data, and the fill's use of them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from geonp.config import ModelConfig, TrainConfig
from geonp.data.tasks import TaskWindow, window_task
from geonp.errors import ConfigError
from geonp.filling.block_input import BlockInput
from geonp.filling.plan import tile_options
from geonp.filling.tile_tasks import TileOptions, block_tasks
from geonp.model_files.checkpoint import load_checkpoint
from geonp.tasks.context import ContextSpec
from geonp.tasks.lattice import LATTICE, NEAR_DISTANCE
from geonp.tasks.tiling import Region
from geonp.training import windows
from geonp.training.raster import train
from geonp.training.settings import TrainingData, TrainRecipe
from geonp.training.windows import (
    NEAR_BATCH_FRACTION,
    NEAR_CORES,
    TaskRecipe,
    TaskShape,
    is_near_batch,
)
from tests.conftest import smooth_field, write_raster


def test_window_task_targets_only_the_marked_hidden_pixels_and_hides_all_of_them():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(1, 32, 32))
    valid = np.ones((32, 32), bool)
    gap = np.zeros((32, 32), bool)
    gap[8:24, 8:24] = True
    marked = ndimage.distance_transform_edt(gap) <= 2  # a 2-px rim of the hole
    task = window_task(TaskWindow(values, valid, gap, targets=marked), core=(0, 32, 0, 32), spec=ContextSpec(n_near=64),
                       max_targets=1000, rng=rng)
    got = {tuple(p) for p in task.xt.astype(int)}
    assert got == {tuple(p) for p in np.argwhere(gap & marked)}
    assert len(got) == 16 * 16 - 12 * 12
    # the unmarked hidden pixels are not context either
    assert not gap[task.xc[:, 0].astype(int), task.xc[:, 1].astype(int)].any()


def test_near_batches_are_cut_like_the_fills_tiles_near_data():
    shape = TaskShape(patch_size=96, core_size=48, max_context=256, max_targets=64, n_far=16, rings=3, sectors=4,
                      search_radius=64, tasks_per_window=3, near_context=200)
    recipe = TaskRecipe(shape, {"cloud": 1.0}, None, 0.0)
    near = recipe.near()
    assert near.near_only and near.shape.max_context == 200 and near.shape.n_far == 0
    # no sparse windows in near batches (a handful of pixels: their std came out too small)
    assert TaskRecipe(shape, {"cloud": 0.5, "sparse": 0.1}, None, 0.0).near().gap_mix == {"cloud": 0.5}
    field = np.random.default_rng(1).normal(size=(1, 96, 96)).astype(np.float32)

    def nearest_context(recipe):  # each target's distance to its nearest context pixel, and the cores
        dist, cores = [], set()
        for seed in range(12):
            for t in windows.cut_tasks([field] * 3, np.ones((96, 96), bool), recipe, np.random.default_rng(seed)):
                dist.append(np.sqrt(((t.xt[:, None, :] - t.xc[None, :, :]) ** 2).sum(-1)).min(1))
                cores.add(min(c for c in (*NEAR_CORES, 96) if c > t.xt.max()))
                assert 0 < t.xc.shape[0] <= recipe.shape.max_context + recipe.shape.n_far
        return np.concatenate(dist), cores

    dist, cores = nearest_context(near)
    # targets lie within NEAR_DISTANCE of data (a 48-px window of many near targets may leave a
    # few of them without their nearest pixel in its 200: the fill's tiles alike)
    assert np.mean(dist <= NEAR_DISTANCE) > 0.97 and len(cores) >= 2
    dist, cores = nearest_context(recipe)  # the standard recipe: targets deep in clouds too, 48-px windows
    assert np.mean(dist > NEAR_DISTANCE) > 0.03 and cores == {48}


def test_about_half_the_steps_are_near_batches_drawn_from_seed_and_step():
    shape = TaskShape(near_context=32)
    draws = [is_near_batch(shape, 1, step) for step in range(400)]
    assert abs(np.mean(draws) - NEAR_BATCH_FRACTION) < 0.08
    assert draws == [is_near_batch(shape, 1, step) for step in range(400)]  # a resumed run draws the same
    assert draws != [is_near_batch(shape, 2, step) for step in range(400)]
    assert not any(is_near_batch(TaskShape(), 1, step) for step in range(50))  # no near context, no near batch
    # near_percent: every batch (a near model) or none; 50 draws the same as the default
    assert all(is_near_batch(TaskShape(near_context=32, near_percent=100), 1, step) for step in range(400))
    assert not any(is_near_batch(TaskShape(near_context=32, near_percent=0), 1, step) for step in range(400))
    assert draws == [is_near_batch(TaskShape(near_context=32, near_percent=50), 1, step) for step in range(400)]
    with pytest.raises(ConfigError, match=r"near_percent=101 must be an integer in 0..100"):
        TaskShape(near_percent=101)


def test_a_model_trained_with_near_batches_gives_the_fills_tiles_near_data_its_near_context(tmp_path):
    arr = np.stack([smooth_field((96, 160), seed=s) for s in (1, 2)]).astype("uint16")
    raster = write_raster(tmp_path / "scene.tif", arr)
    shape = TaskShape(patch_size=48, core_size=16, max_context=48, max_targets=32, near_context=20)
    train(TrainingData([raster], nodata=0), tmp_path / "m",
          TrainRecipe(training=TrainConfig(steps=4, val_every=2, warmup_steps=1), task_shape=shape,
                      model=ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32), batch_size=8, val_tasks=16,
                      pool_size=40, calibrate=False))
    loaded = load_checkpoint(tmp_path / "m")
    assert loaded.card.task_shape["near_context"] == 20 and loaded.card.task_shape["near_percent"] == 50
    assert tile_options(loaded, None, None, None, None).near_context == 20
    assert tile_options(loaded, None, 30, None, None).near_context is None  # --max-context sets every tile's


def test_tiles_near_data_take_the_near_context_or_all_their_gaps_neighbours():
    size = 120
    values = np.stack([smooth_field((size, size), seed=s, scale=1.0, offset=0.0) for s in (0, 1)])
    gap = np.zeros((size, size), bool)
    gap[20:100, 20:100] = True
    gap |= np.random.default_rng(0).random((size, size)) < 0.01  # dropped pixels: 8 neighbours each
    gap[104:107, :] = True  # a 3-px stripe below the hole
    observed, to_fill = np.broadcast_to(~gap, values.shape).copy(), np.broadcast_to(gap, values.shape).copy()
    spec = ContextSpec(n_near=64, n_far=16, search_radius=96, rings=3, sectors=4)
    runs = {}
    for near_context in (None, 40):
        opts = TileOptions(tile_size=24, overlap=8, context=spec, near_far=0, near_context=near_context,
                           lattice=LATTICE, near_overlap=3)
        tasks = block_tasks(BlockInput(values, observed, Region(0, size, 0, size)), to_fill, opts)
        runs[near_context] = {tuple(t.index[:2]): t for t in tasks}
    assert runs[None].keys() == runs[40].keys()
    sizes = {(runs[None][k].task.xc.shape[0], runs[40][k].task.xc.shape[0]) for k in runs[None]}
    # tiles reaching the hole keep 64 near + 16 far; near-only tiles had 64 near pixels, now 40,
    # or their gaps' neighbours where those are more (up to 64)
    assert (80, 80) in sizes and (64, 40) in sizes
    assert {a for a, _ in sizes} == {64, 80} and all(40 <= b <= 64 for a, b in sizes if a == 64)
    assert any(40 < b < 64 for _, b in sizes)
    for t in runs[40].values():
        if t.task.xc.shape[0] == 64 or t.task.xc.shape[0] == 80:
            continue
        # every observed 8-neighbour of every target is in the context
        first = t.index[0] % (size * size)  # the first target's pixel (near tiles: output i is target i)
        corner = np.array([first // size - t.task.xt[0, 0], first % size - t.task.xt[0, 1]])
        context = {tuple(p) for p in (t.task.xc + corner).astype(int)}
        for r, c in (t.task.xt + corner).astype(int):
            ring = {(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
                    if 0 <= r + dr < size and 0 <= c + dc < size and observed[0, r + dr, c + dc]}
            assert ring <= context
