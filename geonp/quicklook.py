"""Quicklook PNGs: the input with its gaps, the filled raster, and the std, side by side."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np


def _read_small(path: str | os.PathLike[str], bands: Sequence[int], max_side: int) -> tuple[np.ndarray, float | None]:
    import rasterio

    with rasterio.open(path) as src:
        scale = max(1, int(np.ceil(max(src.width, src.height) / max_side)))
        shape = (len(bands), max(1, src.height // scale), max(1, src.width // scale))
        arr = src.read(list(bands), out_shape=shape, resampling=rasterio.enums.Resampling.nearest)
        return arr.astype(np.float64), src.nodata


def _display(arr: np.ndarray, valid: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Stretch 1 or 3 bands to [0, 1] RGB(A); invalid pixels transparent."""
    img = (arr - lo[:, None, None]) / np.maximum(hi - lo, 1e-12)[:, None, None]
    img = np.clip(img, 0, 1)
    rgb = np.repeat(img[:1], 3, 0) if img.shape[0] < 3 else img[:3][::-1]  # B2,B3,B4 -> R,G,B
    alpha = valid.all(0)[None].astype(float)
    return np.moveaxis(np.concatenate([rgb, alpha]), 0, -1)


def write_quicklook(
    png: str | os.PathLike[str],
    input: str | os.PathLike[str],
    filled: str | os.PathLike[str],
    std: str | os.PathLike[str],
    *,
    bands: Sequence[int],
    nodata: float | None,
    mask: str | os.PathLike[str] | None = None,
    max_side: int = 600,
) -> None:
    """Write a 3-panel PNG (input with gaps, prediction, std) of at most ``max_side`` px per panel."""
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    from geonp.io.output import atomic_write_bytes

    shown = list(bands)[:3]
    raw, _ = _read_small(input, shown, max_side)
    out, out_nodata = _read_small(filled, shown, max_side)
    sd, _ = _read_small(std, shown, max_side)
    valid = np.isfinite(raw) & ((raw != nodata) if nodata is not None else True)
    if mask is not None:
        gap, _ = _read_small(mask, [1], max_side)
        valid &= gap[0] == 0
    lo = np.array([np.nanpercentile(np.where(valid[i], raw[i], np.nan), 2) for i in range(len(shown))])
    hi = np.array([np.nanpercentile(np.where(valid[i], raw[i], np.nan), 98) for i in range(len(shown))])
    out_valid = np.isfinite(out) & ((out != out_nodata) if out_nodata is not None else True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.4), constrained_layout=True)
    axes[0].imshow(_display(raw, valid, lo, hi))
    axes[0].set_title(f"input ({100 * (1 - valid.all(0).mean()):.1f}% gaps)")
    axes[1].imshow(_display(out, out_valid, lo, hi))
    axes[1].set_title("filled")
    sd_mean = np.nanmean(np.where(np.isfinite(sd), sd, np.nan), axis=0)
    im = axes[2].imshow(sd_mean, cmap="magma")
    axes[2].set_title("predictive std (mean over bands)")
    fig.colorbar(im, ax=axes[2], shrink=0.8)
    for ax in axes:
        ax.set_axis_off()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(png, buf.getvalue())
