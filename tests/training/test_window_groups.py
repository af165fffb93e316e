"""Training windows from several sources: each folder of inputs an equal share of the draw."""

import numpy as np
import pytest

from geonp.data.datasets import ColumnSplit
from geonp.training.windows import PoolOptions, TaskShape, window_groups
from tests.conftest import smooth_field, write_raster


def _scene(path, bands, size, seed):
    path.parent.mkdir(exist_ok=True)
    return write_raster(path, np.stack([smooth_field((size, size), seed=seed + b) for b in range(bands)]))


def test_each_folder_gets_an_equal_share_and_its_groups_split_it_by_the_root_of_their_pixels(tmp_path):
    a3 = _scene(tmp_path / "a" / "three.tif", 3, 64, 0)
    a1 = _scene(tmp_path / "a" / "one.tif", 1, 128, 10)  # 4x the pixels of a3: twice its share in folder a
    b3 = _scene(tmp_path / "b" / "big.tif", 3, 256, 20)  # 16x a3's pixels, yet only folder b's half
    pools = PoolOptions(None, None, ColumnSplit(0.15, 0.2), pool_size=16, val_count=4, pool_megabytes=8.0)
    train, val = window_groups([a3, a1, b3], TaskShape(patch_size=32, core_size=16), pools, seed=0)
    assert [g.pool.values.shape[1] for g in train] == [3, 1, 3]  # a's 3-band, a's 1-band, b's 3-band
    # training columns: 64 -> 41, 128 -> 83; sqrt(64*41) = 51.2, sqrt(128*83) = 103.1
    a_three, a_one = np.sqrt(64 * 41), np.sqrt(128 * 83)
    expected = [0.5 * a_three / (a_three + a_one), 0.5 * a_one / (a_three + a_one), 0.5]
    assert [g.weight for g in train] == pytest.approx(expected)
    assert [g.weight for g in val] == pytest.approx(expected)
