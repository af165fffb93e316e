import numpy as np
import pytest

from geonp.data import gap_shapes, gaps
from geonp.errors import ConfigError

SHAPES = [(64, 64), (256, 256)]
SCORED_KINDS = ["cloud", "stripe", "random", "mixed"]


def _stripe_source() -> np.ndarray:
    """A 168x168 SLC-off-like pattern: diagonal stripes, ~47 % gaps (like the Landsat-7 file)."""
    y, x = np.mgrid[0:168, 0:168]
    return ((y * np.cos(0.18) + x * np.sin(0.18)) % 9.0) < 4.2


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", SCORED_KINDS)
@pytest.mark.parametrize("coverage", [0.1, 0.3, 0.6])
def test_coverage_within_tolerance(kind, shape, coverage):
    for seed in range(3):
        m = gaps.make_mask(kind, shape, coverage=coverage, rng=seed)
        assert m.dtype == np.bool_ and m.shape == shape
        assert abs(m.mean() - coverage) <= 0.05, (kind, shape, seed, m.mean())


@pytest.mark.parametrize("kind", ["cloud", "stripe", "mixed"])
def test_score_based_kinds_are_exact_to_one_pixel(kind):
    m = gaps.make_mask(kind, (64, 64), coverage=0.37, rng=5)
    assert m.sum() == round(0.37 * 64 * 64)


def test_cloud_without_shadow_and_extremes():
    assert gap_shapes.cloud_mask((64, 64), coverage=0.25, rng=1, shadow=False).sum() == 1024
    assert not gap_shapes.cloud_mask((64, 64), coverage=0.0, rng=1).any()
    assert gap_shapes.stripe_mask((64, 64), coverage=1.0, rng=1).all()


@pytest.mark.parametrize("kind", MASK := ["cloud", "stripe", "random", "mixed", "borrowed"])
def test_determinism(kind):
    src = _stripe_source()
    a = gaps.make_mask(kind, (64, 64), coverage=0.3, rng=np.random.default_rng(7), source=src)
    b = gaps.make_mask(kind, (64, 64), coverage=0.3, rng=np.random.default_rng(7), source=src)
    c = gaps.make_mask(kind, (64, 64), coverage=0.3, rng=np.random.default_rng(8), source=src)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()
    # an integer seed is the same as default_rng(seed)
    np.testing.assert_array_equal(
        gaps.make_mask(kind, (64, 64), coverage=0.3, rng=7, source=src), a
    )


def _shadow_shift(cloud: np.ndarray, shade: np.ndarray) -> np.ndarray:
    """(dy, dx) that best maps the cloud mask onto the shadow mask (cross-correlation peak)."""
    h, w = cloud.shape
    a = np.zeros((2 * h, 2 * w))
    b = np.zeros((2 * h, 2 * w))
    a[:h, :w] = cloud
    b[:h, :w] = shade
    corr = np.fft.irfft2(np.fft.rfft2(b) * np.conj(np.fft.rfft2(a)), s=a.shape)
    ky, kx = np.unravel_index(np.argmax(corr), corr.shape)
    return np.array([ky if ky < h else ky - 2 * h, kx if kx < w else kx - 2 * w])


def test_shadows_are_offset_from_clouds():
    offset = np.array([12, -8])  # (dy, dx): shadows fall down and to the left
    for seed in range(3):
        cloud, shade = gap_shapes.cloud_and_shadow(
            (256, 256), coverage=0.3, rng=seed, shadow_offset=(12, -8)
        )
        assert not (cloud & shade).any()
        assert (cloud | shade).sum() == round(0.3 * 256 * 256)
        assert shade.mean() > 0.03
        np.testing.assert_array_equal(
            cloud | shade,
            gap_shapes.cloud_mask((256, 256), coverage=0.3, rng=seed, shadow_offset=(12, -8)),
        )
        # shadow-only pixels sit one offset away from the clouds (within 1 px of erosion)
        assert np.abs(_shadow_shift(cloud, shade) - offset).max() <= 1
        # the cloud moved by the offset lands on cloud or shadow (not 100 %: shadows are the
        # cloud eroded by 1 px) far more often than the cloud moved the other way
        moved = np.zeros_like(cloud)
        moved[12:, :-8] = cloud[:-12, 8:]
        moved_wrong = np.zeros_like(cloud)
        moved_wrong[:-12, 8:] = cloud[12:, :-8]
        hit = (moved & (cloud | shade)).sum() / moved.sum()
        hit_wrong = (moved_wrong & (cloud | shade)).sum() / moved_wrong.sum()
        assert hit > 0.75
        assert hit > hit_wrong + 0.2


def test_default_shadow_offset_is_3_to_15_percent_of_the_size():
    lengths = []
    for seed in range(8):
        cloud, shade = gap_shapes.cloud_and_shadow((256, 256), coverage=0.3, rng=seed)
        assert shade.mean() > 0.01
        lengths.append(np.hypot(*_shadow_shift(cloud, shade)))
    assert min(lengths) >= 0.03 * 256 - 1.5
    assert max(lengths) <= 0.15 * 256 + 1.5
    assert np.std(lengths) > 2.0  # the length is random


def test_stripes_repeat_with_the_period_along_rows():
    m = gap_shapes.stripe_mask((256, 256), coverage=0.3, rng=2, angle_deg=0.0, period=16.0)
    same = (m[16:] == m[:-16]).mean()
    half = (m[8:] == m[:-8]).mean()
    assert same > 0.99
    assert half < 0.6


def test_stripes_are_parallel_at_the_angle():
    # (dy, dx) = (-3, 17) points along a +10 degree stripe (tan 10 deg = 0.1763 ~ 3 / 17);
    # 10 rows down is half a period across the stripes
    for seed in range(4):
        m = gap_shapes.stripe_mask((256, 256), coverage=0.3, rng=seed, angle_deg=10.0, period=20.0)
        along = (m[:-3, 17:] == m[3:, :-17]).mean()
        across = (m[10:] == m[:-10]).mean()
        assert along > 0.9
        assert across < 0.6


def test_default_stripe_angle_and_period_match_slc_off():
    for seed in range(6):
        m = gap_shapes.stripe_mask((256, 256), coverage=0.3, rng=seed).astype(float)
        spec = np.abs(np.fft.fft2(m - m.mean()))
        spec[0, 0] = 0
        ky, kx = np.unravel_index(np.argmax(spec), spec.shape)
        fy = np.fft.fftfreq(256)[ky]
        fx = np.fft.fftfreq(256)[kx]
        period = 1.0 / np.hypot(fx, fy)
        angle = np.degrees(np.arctan2(abs(fx), abs(fy)))  # stripe normal vs the column axis
        assert 9.0 <= period <= 32.0, period
        assert 4.0 <= angle <= 19.0, angle


def test_stripe_gap_is_a_wedge_from_the_centre_line():
    prio = gap_shapes.stripe_priority(
        (128, 128), angle_deg=0.0, period=16.0, phase=0.0, centre_offset=0.0
    )
    m = gap_shapes.hide_highest(prio, 0.3)
    width = m.mean(0)  # gap fraction per column
    assert width[62:66].max() < 0.05
    assert width[:8].mean() > 0.45 and width[-8:].mean() > 0.45
    assert (np.diff(width[64:]) >= -1e-12).all()  # grows monotonically to the edge


def test_random_mask_is_iid_bernoulli():
    m = gap_shapes.random_mask((256, 256), coverage=0.2, rng=0)
    assert abs(m.mean() - 0.2) < 0.01
    # no spatial structure: horizontal neighbours agree as often as independent draws would
    both = (m[:, 1:] & m[:, :-1]).mean()
    assert abs(both - 0.04) < 0.005


def test_borrowed_mask_is_a_transform_of_the_source():
    src = gap_shapes.random_mask((64, 64), coverage=0.4, rng=11)
    variants = [np.rot90(src, k) for k in range(4)]
    variants += [v[:, ::-1] for v in variants]
    for seed in range(8):
        m = gap_shapes.borrowed_mask((64, 64), source=src, rng=seed)
        assert any(np.array_equal(m, v) for v in variants)


def test_borrowed_mask_keeps_the_source_fraction():
    src = _stripe_source()
    fracs = [gap_shapes.borrowed_mask((64, 64), source=src, rng=s).mean() for s in range(40)]
    assert abs(np.mean(fracs) - src.mean()) < 0.03
    # source smaller than the shape: mirror-tiled, fraction kept
    big = gap_shapes.borrowed_mask((400, 300), source=src, rng=0)
    assert big.shape == (400, 300)
    assert abs(big.mean() - src.mean()) < 0.03


def test_make_mask_borrowed_picks_crop_near_coverage():
    src = gap_shapes.cloud_mask((512, 512), coverage=0.4, rng=0, shadow=False)
    m = gaps.make_mask("borrowed", (64, 64), coverage=0.4, rng=1, source=src)
    assert abs(m.mean() - 0.4) < 0.1


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(
        ConfigError,
        match=r"kind='clouds' is not one of \['cloud', 'stripe', 'random', "
        r"'borrowed', 'mixed'",
    ):
        gaps.make_mask("clouds", (64, 64), coverage=0.3, rng=0)
    assert gaps.MASK_KINDS == ("cloud", "stripe", "random", "borrowed", "mixed", "scene_cloud")


def test_bad_arguments_raise_config_error():
    with pytest.raises(ConfigError, match="coverage=1.5 is outside"):
        gap_shapes.cloud_mask((64, 64), coverage=1.5, rng=0)
    with pytest.raises(ConfigError, match="source=None"):
        gaps.make_mask("borrowed", (64, 64), coverage=0.3, rng=0)
    with pytest.raises(ConfigError, match="not a numpy Generator"):
        gap_shapes.random_mask((64, 64), coverage=0.3, rng=None)
    with pytest.raises(ConfigError, match="two positive integers"):
        gap_shapes.stripe_mask((0, 64), coverage=0.3, rng=0)


def test_training_mask_distribution():
    src = _stripe_source()
    n = 64 * 64
    fracs = []
    for seed in range(200):
        m = gaps.sample_training_mask((64, 64), rng=seed, source=src)
        assert m.shape == (64, 64) and m.dtype == np.bool_
        assert (~m).sum() >= np.ceil(0.05 * n) and m.sum() >= 1
        fracs.append(m.mean())
    fracs = np.array(fracs)
    assert fracs.min() > 0.05 and fracs.max() < 0.8
    assert abs(fracs.mean() - 0.4) < 0.05  # uniform coverage in [0.1, 0.7]


def test_training_mask_keeps_5_percent_visible_with_an_all_gap_source():
    src = np.ones((32, 32), dtype=bool)
    for seed in range(30):
        m = gaps.sample_training_mask((64, 64), rng=seed, source=src)
        assert (~m).sum() >= 205  # ceil(0.05 * 4096)
        assert m.sum() >= 1


def test_training_mask_kind_weights():
    # only borrowed can reproduce an all-visible source: it then keeps exactly 1 hidden pixel
    src = np.zeros((64, 64), dtype=bool)
    hits = sum(
        gaps.sample_training_mask((64, 64), rng=s, source=src).sum() == 1 for s in range(400)
    )
    assert abs(hits / 400 - 0.15) < 0.05


def test_scene_cloud_masks_hold_gaps_hundreds_of_pixels_across():
    from scipy import ndimage

    m = gaps.make_mask("scene_cloud", (1024, 408), coverage=0.3, rng=0)
    assert m.sum() == round(0.3 * 1024 * 408)
    inscribed = 2 * ndimage.distance_transform_edt(m).max()
    assert inscribed >= 200  # a disk 200 px across fits inside a gap
    small = gaps.make_mask("cloud", (1024, 408), coverage=0.3, rng=0)
    assert 2 * ndimage.distance_transform_edt(small).max() < inscribed


def test_footprint_mask_is_a_straight_collar():
    out = gap_shapes.footprint_mask((128, 128), rng=3, fraction=(0.2, 0.2))
    assert out.sum() == round(0.2 * 128 * 128)
    # a half-plane: convex, so its convex hull adds nothing (every row is one run, touching an edge)
    for row in out:
        idx = np.flatnonzero(row)
        if idx.size:
            assert idx[-1] - idx[0] + 1 == idx.size and (idx[0] == 0 or idx[-1] == 127)


def test_sample_window_mask_mix_and_sparse_kind():
    shape = (256, 256)
    sparse = [gaps.sample_window_mask(shape, rng=s, weights={"sparse": 1.0}, footprint_probability=0.0)
              for s in range(5)]
    for is_gap, outside in sparse:
        assert 1 <= (~is_gap).sum() <= 64 and not outside.any()
    scene = [gaps.sample_window_mask(shape, rng=s, weights={"scene_cloud": 1.0}, footprint_probability=1.0)
             for s in range(5)]
    for is_gap, outside in scene:
        assert outside.any() and not (is_gap & outside).any()
        assert 0.3 <= is_gap.sum() / (~outside).sum() <= 0.95
    a = gaps.sample_window_mask(shape, rng=7, source=_stripe_source())
    b = gaps.sample_window_mask(shape, rng=7, source=_stripe_source())
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(ConfigError, match=r"gap_mix kind='fog' is not one of \['cloud', .*'sparse'\]"):
        gaps.sample_window_mask(shape, rng=0, weights={"fog": 1.0})
    with pytest.raises(ConfigError, match="borrowed needs --gap-source"):
        gaps.sample_window_mask(shape, rng=0, weights={"borrowed": 1.0})
