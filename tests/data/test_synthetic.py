import math

import numpy as np
import pytest

from geonp.data import synthetic
from geonp.errors import ConfigError

KERNELS = ["rbf", "matern12", "matern32", "matern52"]


def test_kernel_values_at_known_distances():
    x1 = np.array([[0.0, 0.0]])
    x2 = np.array([[0.0, 0.0], [3.0, 4.0]])  # distances 0 and 5
    r = 5.0 / 2.0
    expected = {
        "rbf": math.exp(-0.5 * r * r),
        "matern12": math.exp(-r),
        "matern32": (1 + math.sqrt(3) * r) * math.exp(-math.sqrt(3) * r),
        "matern52": (1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(-math.sqrt(5) * r),
    }
    for kernel, value in expected.items():
        k = synthetic.kernel_matrix(x1, x2, kernel=kernel, lengthscale=2.0, variance=3.0)
        np.testing.assert_allclose(k, [[3.0, 3.0 * value]], rtol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("lengthscale", [1.0, 8.0, 64.0])
def test_circulant_embedding_reproduces_the_kernel(kernel, lengthscale):
    # the sample's covariance is IFFT(clip(eigenvalues)); on all in-patch lags it must equal
    # the kernel (negative eigenvalues, clipped, cost at most 2e-4 of the variance at l = 64)
    lam = synthetic._embedding_eigenvalues((64, 48), kernel, lengthscale, 2.0)
    assert lam.shape[0] >= 128 and lam.shape[1] >= 96
    assert lam.shape[0] >= 64 + 8 * lengthscale
    cov = np.fft.ifft2(np.clip(lam, 0.0, None)).real[:64, :48]
    dist = np.hypot(*np.mgrid[0:64, 0:48])
    exact = synthetic._kernel_of_distance(dist, kernel, lengthscale, 2.0)
    np.testing.assert_allclose(cov, exact, atol=5e-4 * 2.0, rtol=0)
    assert lam.min() > -1e-4 * lam.max()


@pytest.mark.parametrize("kernel", KERNELS)
def test_grid_field_variance_and_covariance_at_one_lengthscale(kernel):
    # 200 seeded 64x64 fields, lengthscale 4 px, variance 2. Standard error of the pooled
    # variance ~0.02 (1 %), so 4 % relative and 0.08 absolute on the covariance are >3 sigma.
    fields = np.stack(
        [
            synthetic.gp_grid_field(
                (64, 64), kernel=kernel, lengthscale=4.0, rng=seed, variance=2.0
            )
            for seed in range(200)
        ]
    )
    assert fields.dtype == np.float64 and fields.shape == (200, 64, 64)
    assert abs(fields.mean()) < 0.05
    assert abs((fields**2).mean() / 2.0 - 1.0) < 0.04
    k_at_l = synthetic.kernel_matrix(
        [[0.0]], [[4.0]], kernel=kernel, lengthscale=4.0, variance=2.0
    )[0, 0]
    cov_x = (fields[:, :, :-4] * fields[:, :, 4:]).mean()
    cov_y = (fields[:, :-4, :] * fields[:, 4:, :]).mean()
    assert abs(cov_x - k_at_l) < 0.08
    assert abs(cov_y - k_at_l) < 0.08
    # far beyond the lengthscale the field decorrelates (no periodic wrap across the patch)
    assert abs((fields[:, :, 0] * fields[:, :, -1]).mean()) < 0.1


def test_grid_field_is_deterministic_and_seed_dependent():
    a = synthetic.gp_grid_field((32, 40), kernel="matern32", lengthscale=5.0, rng=3)
    b = synthetic.gp_grid_field(
        (32, 40), kernel="matern32", lengthscale=5.0, rng=np.random.default_rng(3)
    )
    c = synthetic.gp_grid_field((32, 40), kernel="matern32", lengthscale=5.0, rng=4)
    assert a.shape == (32, 40)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.1


def test_rbf_field_is_smoother_than_matern12():
    def roughness(kernel):
        f = synthetic.gp_grid_field((128, 128), kernel=kernel, lengthscale=6.0, rng=0)
        return np.mean(np.diff(f, axis=1) ** 2) / np.var(f)

    assert roughness("rbf") < 0.05 < roughness("matern12")


def _direct_posterior(xc, yc, xt, kernel, lengthscale, variance, noise):
    kw = {"kernel": kernel, "lengthscale": lengthscale, "variance": variance}
    k_cc = synthetic.kernel_matrix(xc, xc, **kw) + (noise**2 + 1e-8 * variance) * np.eye(len(xc))
    k_tc = synthetic.kernel_matrix(xt, xc, **kw)
    mean = k_tc @ np.linalg.solve(k_cc, yc)
    var = variance - np.einsum("ij,ji->i", k_tc, np.linalg.solve(k_cc, k_tc.T))
    return mean, np.sqrt(var + noise**2)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_posterior_matches_direct_formula(kernel, noise):
    rng = np.random.default_rng(0)
    xc = rng.uniform(-2, 2, size=(7, 2))
    yc = rng.standard_normal(7)
    xt = rng.uniform(-2, 2, size=(5, 2))
    mean, std = synthetic.gp_posterior(
        xc, yc, xt, kernel=kernel, lengthscale=0.8, variance=1.5, noise=noise
    )
    mean_d, std_d = _direct_posterior(xc, yc, xt, kernel, 0.8, 1.5, noise)
    np.testing.assert_allclose(mean, mean_d, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std, std_d, rtol=1e-8, atol=1e-10)


def test_posterior_interpolates_noise_free_context_and_reverts_to_prior():
    xc = np.array([[0.0, 0.0], [1.0, 0.0]])
    yc = np.array([0.7, -0.4])
    mean, std = synthetic.gp_posterior(
        xc, yc, np.vstack([xc, [[50.0, 50.0]]]), kernel="matern52", lengthscale=1.0, variance=2.0
    )
    np.testing.assert_allclose(mean, [0.7, -0.4, 0.0], atol=1e-6)
    np.testing.assert_allclose(std, [0.0, 0.0, math.sqrt(2.0)], atol=1e-3)
    mean0, std0 = synthetic.gp_posterior(
        np.zeros((0, 2)), np.zeros(0), xc, kernel="rbf", lengthscale=1.0, variance=2.0, noise=0.5
    )
    np.testing.assert_allclose(mean0, 0.0)
    np.testing.assert_allclose(std0, math.sqrt(2.25))


def test_posterior_is_calibrated_on_gp_samples():
    # held-out z-scores of the exact posterior on its own GP are standard normal
    z = []
    for seed in range(40):
        x, y = synthetic.sample_gp_points(
            60, kernel="matern32", lengthscale=0.7, rng=seed, noise=0.1
        )
        mean, std = synthetic.gp_posterior(
            x[:40], y[:40], x[40:], kernel="matern32", lengthscale=0.7, noise=0.1
        )
        z.append((y[40:] - mean) / std)
    z = np.concatenate(z)  # 800 values: sd of mean(z^2) ~ 0.05
    assert abs(np.mean(z**2) - 1.0) < 0.15
    assert abs(np.mean(np.abs(z) < 1.96) - 0.95) < 0.03


def test_sample_gp_points_marginals():
    ys, xs = [], []
    for seed in range(300):
        x, y = synthetic.sample_gp_points(
            20,
            dim=2,
            kernel="rbf",
            lengthscale=1.0,
            rng=seed,
            low=-1.0,
            high=3.0,
            noise=0.5,
            variance=2.0,
        )
        xs.append(x)
        ys.append(y)
    x, y = np.concatenate(xs), np.concatenate(ys)
    assert x.shape == (6000, 2) and x.min() >= -1.0 and x.max() <= 3.0
    assert abs(x.mean() - 1.0) < 0.05
    # variance 2 + noise 0.25; 6000 correlated values, sd of the estimate ~0.1
    assert abs(y.var() - 2.25) < 0.3
    a = synthetic.sample_gp_points(5, kernel="rbf", lengthscale=1.0, rng=1)
    b = synthetic.sample_gp_points(5, kernel="rbf", lengthscale=1.0, rng=1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_random_lengthscale_is_log_uniform():
    rng = np.random.default_rng(0)
    ls = np.array([synthetic.random_lengthscale(rng, low=2.0, high=32.0) for _ in range(4000)])
    assert ls.min() >= 2.0 and ls.max() <= 32.0
    # log-uniform: median at the geometric mean 8, a quarter below 4
    assert abs(np.median(ls) - 8.0) < 0.5
    assert abs(np.mean(ls < 4.0) - 0.25) < 0.03


def test_bad_arguments():
    with pytest.raises(ConfigError, match="Unknown kernel 'matern'.*rbf, matern12, matern32"):
        synthetic.gp_grid_field((8, 8), kernel="matern", lengthscale=1.0, rng=0)
    with pytest.raises(ConfigError, match="lengthscale=-1.0 is not a positive"):
        synthetic.kernel_matrix([[0.0]], [[1.0]], kernel="rbf", lengthscale=-1.0)
    with pytest.raises(ConfigError, match="yc has 2 values but xc has 3 points"):
        synthetic.gp_posterior(
            np.zeros((3, 2)), np.zeros(2), np.zeros((1, 2)), kernel="rbf", lengthscale=1.0
        )
    with pytest.raises(ConfigError, match="low=5.0, high=1.0"):
        synthetic.random_lengthscale(0, low=5.0, high=1.0)
