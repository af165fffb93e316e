"""The 2D Gaussian-process benchmark of the TNP-KR paper §4.2, with the exact GP posterior as oracle.

Per task: an RBF GP on ``[-2, 2]²`` with lengthscale ``ℓ ~ Beta(3, 7)``, unit variance and
observation noise 0.1 (std). Points: 128 uniform random plus a 16x16 grid (384 in all). Context:
12–128 of the random points. Targets: every point that is not context, as fresh noisy draws, so
the oracle's predictive density is well defined (digest §8.2, convention (b)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from geonp.data.batch import Batch
from geonp.data.synthetic import gp_posterior, kernel_matrix

NOISE = 0.1
N_RANDOM, GRID = 128, 16


@dataclass
class GPBatch:
    """A batch of GP tasks, with each task's lengthscale (for the oracle)."""

    batch: Batch
    lengthscales: np.ndarray


def sample_gp_batch(batch_size: int, rng: np.random.Generator) -> GPBatch:
    """Draw ``batch_size`` 2D GP tasks, padded into one :class:`Batch`."""
    g = np.linspace(-2, 2, GRID)
    grid = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    n_all = N_RANDOM + GRID * GRID
    xs, ys, nctx, ls = [], [], [], []
    for _ in range(batch_size):
        ell = float(rng.beta(3, 7))
        x = np.concatenate([rng.uniform(-2, 2, (N_RANDOM, 2)), grid])
        k = kernel_matrix(x, x, kernel="rbf", lengthscale=ell) + 1e-8 * np.eye(n_all)
        f = np.linalg.cholesky(k) @ rng.standard_normal(n_all)
        xs.append(x)
        ys.append(f + NOISE * rng.standard_normal(n_all))
        nctx.append(int(rng.integers(12, N_RANDOM + 1)))
        ls.append(ell)
    max_c, max_t = max(nctx), n_all - min(nctx)
    xc = np.zeros((batch_size, max_c, 2), np.float32)
    yc = np.zeros((batch_size, max_c, 1), np.float32)
    xt = np.zeros((batch_size, max_t, 2), np.float32)
    yt = np.zeros((batch_size, max_t, 1), np.float32)
    cv = np.zeros((batch_size, max_c), bool)
    tv = np.zeros((batch_size, max_t), bool)
    for i, (x, y, n) in enumerate(zip(xs, ys, nctx, strict=True)):
        m = n_all - n
        xc[i, :n], yc[i, :n, 0], cv[i, :n] = x[:n], y[:n], True
        xt[i, :m], yt[i, :m, 0], tv[i, :m] = x[n:], y[n:], True
        xc[i, n:], xt[i, m:] = x[0], x[n]
    batch = Batch(*(torch.from_numpy(a) for a in (xc, yc, xt, yt, cv, tv)))
    return GPBatch(batch, np.array(ls))


def oracle_scores(gp: GPBatch) -> dict[str, float]:
    """NLL, RMSE and 95 % coverage of the exact GP posterior with the true kernel and noise."""
    b = gp.batch
    # sample_gp_batch sets the targets and both masks
    assert b.yt is not None and b.context_valid is not None and b.target_valid is not None
    nll, se, cov, n = 0.0, 0.0, 0.0, 0
    for i in range(b.xc.shape[0]):
        cv, tv = b.context_valid[i].numpy(), b.target_valid[i].numpy()
        xc, yc = b.xc[i].numpy()[cv].astype(np.float64), b.yc[i, :, 0].numpy()[cv].astype(np.float64)
        xt, yt = b.xt[i].numpy()[tv].astype(np.float64), b.yt[i, :, 0].numpy()[tv].astype(np.float64)
        mean, std = gp_posterior(xc, yc, xt, kernel="rbf", lengthscale=float(gp.lengthscales[i]), noise=NOISE)
        z = (yt - mean) / std
        nll += float(np.sum(0.5 * np.log(2 * np.pi * std**2) + 0.5 * z**2))
        se += float(np.sum((yt - mean) ** 2))
        cov += float(np.sum(np.abs(z) <= 1.959964))
        n += yt.size
    return {"nll": nll / n, "rmse": (se / n) ** 0.5, "coverage95": cov / n, "n": n}
