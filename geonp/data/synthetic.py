"""Seeded Gaussian-process data: fields on pixel grids and values at scattered points.

GP fields have a known best answer (the exact GP posterior), so they serve three purposes:
optional pre-training (`geonp train` on simulated fields), the 2-D GP benchmark that compares the
model against the exact posterior, and tests with a known answer.

Kernels (``r = distance / lengthscale``, all scaled by ``variance``):

- ``"rbf"``: ``exp(-r^2 / 2)``
- ``"matern12"``: ``exp(-r)``
- ``"matern32"``: ``(1 + sqrt(3) r) exp(-sqrt(3) r)``
- ``"matern52"``: ``(1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``

Grid distances are in pixels (between pixel centres); point distances are in the units of ``x``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import fft as sfft
from scipy import linalg

from geonp.data.gap_args import as_rng
from geonp.errors import ConfigError

KernelName = Literal["rbf", "matern12", "matern32", "matern52"]
KERNELS: tuple[str, ...] = ("rbf", "matern12", "matern32", "matern52")
"""Kernel names accepted by every function here."""


def _check_kernel(kernel: str, lengthscale: float, variance: float) -> None:
    if kernel not in KERNELS:
        raise ConfigError(
            f"Unknown kernel {kernel!r}; geonp implements only these. "
            f"Use one of: {', '.join(KERNELS)}."
        )
    if not (np.isfinite(lengthscale) and lengthscale > 0):
        raise ConfigError(
            f"lengthscale={lengthscale!r} is not a positive number; it sets how "
            "far correlation reaches. Pass e.g. lengthscale=8.0."
        )
    if not (np.isfinite(variance) and variance > 0):
        raise ConfigError(
            f"variance={variance!r} is not a positive number; it is the marginal "
            "variance of the field. Pass e.g. variance=1.0."
        )


def _kernel_of_distance(
    dist: np.ndarray, kernel: str, lengthscale: float, variance: float
) -> np.ndarray:
    r = np.asarray(dist, dtype=np.float64) / lengthscale
    if kernel == "rbf":
        k = np.exp(-0.5 * r * r)
    elif kernel == "matern12":
        k = np.exp(-r)
    elif kernel == "matern32":
        s = math.sqrt(3.0) * r
        k = (1.0 + s) * np.exp(-s)
    else:  # matern52
        s = math.sqrt(5.0) * r
        k = (1.0 + s + s * s / 3.0) * np.exp(-s)
    return variance * k


def _as_rng(rng: np.random.Generator | int) -> np.random.Generator:
    return as_rng(rng, what="synthetic data")


# --------------------------------------------------------------------------------------------
# grids: circulant embedding
# --------------------------------------------------------------------------------------------


def _embedding_size(n: int, lengthscale: float) -> int:
    """Torus side: >= 2n (so lags inside the patch are not wrapped) and >= n + 8 lengthscales.

    The second bound lets the kernel decay before half the torus (RBF at 4.5 lengthscales is
    4e-5 of the variance), which keeps the negative eigenvalues tiny.
    """
    return int(sfft.next_fast_len(max(2 * n, n + math.ceil(8.0 * lengthscale))))


def _embedding_eigenvalues(
    shape: tuple[int, int], kernel: str, lengthscale: float, variance: float
) -> np.ndarray:
    """Eigenvalues of the block-circulant covariance on the padded torus (may be < 0)."""
    m0, m1 = (_embedding_size(n, lengthscale) for n in shape)
    # lag on the torus: min(k, M - k); the covariance row c(k0, k1) = K(|lag|)
    l0 = np.minimum(np.arange(m0), m0 - np.arange(m0)).astype(np.float64)
    l1 = np.minimum(np.arange(m1), m1 - np.arange(m1)).astype(np.float64)
    dist = np.sqrt(l0[:, None] ** 2 + l1[None, :] ** 2)
    cov_row = _kernel_of_distance(dist, kernel, lengthscale, variance)
    # c is real and even, so its DFT is real: the eigenvalues
    return sfft.fft2(cov_row).real


def gp_grid_field(
    shape: Sequence[int],
    *,
    kernel: KernelName,
    lengthscale: float,
    rng: np.random.Generator | int,
    variance: float = 1.0,
) -> np.ndarray:
    """Sample a stationary zero-mean GP on a pixel grid (exact, by circulant embedding).

    The covariance is embedded on a torus of at least ``2 * shape`` and ``shape + 8 *
    lengthscale`` pixels, so the sample is not periodic across the patch and its covariance is
    the kernel itself; the rare tiny negative eigenvalues (smooth kernels) are clipped to 0.
    Cost is one FFT of the torus: O(M log M).

    Args:
        shape: ``(h, w)`` in pixels.
        kernel: ``"rbf"``, ``"matern12"``, ``"matern32"`` or ``"matern52"``.
        lengthscale: in pixels.
        rng: generator or integer seed.
        variance: marginal variance of the field.

    Returns:
        float64 ``[h, w]`` field.

    Raises:
        ConfigError: unknown kernel, non-positive lengthscale/variance or bad shape.
    """
    try:
        h, w = (int(s) for s in shape)
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"shape={shape!r} is not (height, width); pass two positive ints."
        ) from err
    if h < 1 or w < 1:
        raise ConfigError(f"shape={(h, w)} has a side < 1 px; pass two positive ints.")
    _check_kernel(kernel, lengthscale, variance)
    gen = _as_rng(rng)
    lam = np.clip(
        _embedding_eigenvalues((h, w), kernel, float(lengthscale), float(variance)), 0.0, None
    )
    m0, m1 = lam.shape
    # y = FFT(sqrt(lam / M) * (z1 + i z2)): Re(y) has covariance = the circulant covariance c
    z = gen.standard_normal((m0, m1)) + 1j * gen.standard_normal((m0, m1))
    y = sfft.fft2(np.sqrt(lam / (m0 * m1)) * z)
    return np.ascontiguousarray(y.real[:h, :w])


# --------------------------------------------------------------------------------------------
# scattered points: exact kernels, posterior and samples
# --------------------------------------------------------------------------------------------


def _as_points(x: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ConfigError(
            f"{name} has shape {a.shape}; points must be [n, dim]. Reshape to two dimensions."
        )
    return a


def kernel_matrix(
    x1: np.ndarray,
    x2: np.ndarray,
    *,
    kernel: KernelName,
    lengthscale: float,
    variance: float = 1.0,
) -> np.ndarray:
    """Evaluate the kernel between two point sets.

    Args:
        x1: ``[n, dim]`` points (``[n]`` is read as ``[n, 1]``).
        x2: ``[m, dim]`` points, same ``dim``.
        kernel: kernel name (see the module docstring).
        lengthscale: in the units of ``x``.
        variance: kernel variance.

    Returns:
        float64 ``[n, m]`` matrix ``K(x1_i, x2_j)``.
    """
    _check_kernel(kernel, lengthscale, variance)
    a, b = _as_points(x1, "x1"), _as_points(x2, "x2")
    if a.shape[1] != b.shape[1]:
        raise ConfigError(
            f"x1 has dim {a.shape[1]} but x2 has dim {b.shape[1]}; kernel inputs "
            "must live in the same space. Pass points of equal dimension."
        )
    # squared distances, clipped at 0 against round-off
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return _kernel_of_distance(np.sqrt(np.clip(d2, 0.0, None)), kernel, lengthscale, variance)


def _cholesky(k: np.ndarray, jitter: float) -> np.ndarray:
    """Lower Cholesky factor of ``k + jitter I``; jitter grows 10x (up to 1e4x) if needed."""
    eye = np.eye(k.shape[0])
    for factor in (1.0, 1e1, 1e2, 1e3, 1e4):
        try:
            return linalg.cholesky(k + jitter * factor * eye, lower=True)
        except linalg.LinAlgError:
            continue
    raise ConfigError(
        f"the {k.shape[0]}x{k.shape[0]} kernel matrix is not positive definite even with jitter "
        f"{jitter * 1e4:.1e}; points are (nearly) duplicated. Add noise=... or remove duplicates."
    )


def gp_posterior(
    xc: np.ndarray,
    yc: np.ndarray,
    xt: np.ndarray,
    *,
    kernel: KernelName,
    lengthscale: float,
    variance: float = 1.0,
    noise: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact GP posterior predictive at target points (zero prior mean).

    This is the best any model can do on data drawn from the same GP, the yardstick of the
    GP benchmark. Solved by Cholesky of ``K_cc + (noise^2 + 1e-8 variance) I``.

    Args:
        xc: ``[nc, dim]`` context points.
        yc: ``[nc]`` context values.
        xt: ``[nt, dim]`` target points.
        kernel: kernel name.
        lengthscale: in the units of ``x``.
        variance: kernel variance.
        noise: observation noise std; the returned std is of noisy targets,
            ``sqrt(var_f + noise^2)``, when ``noise > 0``.

    Returns:
        ``(mean, std)``, each float64 ``[nt]``.
    """
    _check_kernel(kernel, lengthscale, variance)
    if not (np.isfinite(noise) and noise >= 0):
        raise ConfigError(
            f"noise={noise!r} is not a non-negative number; it is the observation "
            "noise std. Pass e.g. noise=0.0."
        )
    xc_, xt_ = _as_points(xc, "xc"), _as_points(xt, "xt")
    y = np.asarray(yc, dtype=np.float64).reshape(-1)
    if y.shape[0] != xc_.shape[0]:
        raise ConfigError(
            f"yc has {y.shape[0]} values but xc has {xc_.shape[0]} points; each "
            "context point needs one value. Pass matching arrays."
        )
    if xc_.shape[0] == 0:  # no context: the prior
        std0 = math.sqrt(variance + noise * noise)
        return np.zeros(xt_.shape[0]), np.full(xt_.shape[0], std0)
    k_cc = kernel_matrix(xc_, xc_, kernel=kernel, lengthscale=lengthscale, variance=variance)
    chol = _cholesky(k_cc + noise * noise * np.eye(xc_.shape[0]), 1e-8 * variance)
    k_ct = kernel_matrix(
        xc_, xt_, kernel=kernel, lengthscale=lengthscale, variance=variance
    )  # [nc, nt]
    alpha = linalg.cho_solve((chol, True), y)
    mean = k_ct.T @ alpha
    v = linalg.solve_triangular(chol, k_ct, lower=True)  # [nc, nt]
    var_f = np.clip(variance - (v * v).sum(0), 0.0, None)
    return mean, np.sqrt(var_f + noise * noise)


def sample_gp_points(
    n: int,
    *,
    dim: int = 2,
    kernel: KernelName,
    lengthscale: float,
    rng: np.random.Generator | int,
    low: float = -2.0,
    high: float = 2.0,
    noise: float = 0.0,
    variance: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample a GP at ``n`` uniform random points in the box ``[low, high]^dim``.

    Args:
        n: number of points.
        dim: input dimension.
        kernel: kernel name.
        lengthscale: in the units of ``x``.
        rng: generator or integer seed.
        low: lower corner of the box.
        high: upper corner of the box.
        noise: std of i.i.d. Gaussian noise added to the values.
        variance: kernel variance.

    Returns:
        ``(x, y)``: float64 ``[n, dim]`` points and ``[n]`` values.
    """
    _check_kernel(kernel, lengthscale, variance)
    if int(n) < 0 or int(dim) < 1 or not high > low or not noise >= 0:
        raise ConfigError(
            f"n={n}, dim={dim}, low={low}, high={high}, noise={noise}: need n >= 0, "
            "dim >= 1, high > low and noise >= 0. Fix the offending value."
        )
    gen = _as_rng(rng)
    x = gen.uniform(low, high, size=(int(n), int(dim)))
    if n == 0:
        return x, np.zeros(0)
    k = kernel_matrix(x, x, kernel=kernel, lengthscale=lengthscale, variance=variance)
    f = _cholesky(k, 1e-8 * variance) @ gen.standard_normal(int(n))
    return x, f + noise * gen.standard_normal(int(n))


def random_lengthscale(rng: np.random.Generator | int, *, low: float, high: float) -> float:
    """Draw a lengthscale log-uniformly from ``[low, high]`` (equal weight per octave).

    Args:
        rng: generator or integer seed.
        low: smallest lengthscale, > 0.
        high: largest lengthscale, >= low.

    Returns:
        The lengthscale (same units as ``low``/``high``).
    """
    if not (0 < low <= high and np.isfinite(high)):
        raise ConfigError(
            f"low={low!r}, high={high!r}: need 0 < low <= high for a log-uniform "
            "lengthscale. Pass e.g. low=2.0, high=16.0."
        )
    return float(math.exp(_as_rng(rng).uniform(math.log(low), math.log(high))))
