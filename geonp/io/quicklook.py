"""Quicklook PNGs: the input with its gaps, the filled raster, and the std, side by side."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from geonp.io.paths import check_quicklook_path

#: Colour of gaps and unfilled pixels: magenta, which no natural scene shows.
GAP_RGB = (1.0, 0.0, 1.0)
_COLOURS = ("red", "green", "blue")


def _read_small(path: str | os.PathLike[str], bands: Sequence[int], max_side: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and validity of ``bands``, decimated to at most ``max_side`` px a side.

    Validity is the rule fill and evaluate use (:func:`geonp.io.observed.read_observed`): NaN,
    Inf, the file's nodata, and its internal mask or alpha band.
    """
    import rasterio

    from geonp.io.observed import read_observed_overview

    with rasterio.open(path) as src:
        nodata = None if src.nodata is None else float(src.nodata)
        return read_observed_overview(src, bands, max_side=max_side, nodata=nodata)


def rgb_bands(bands: Sequence[int], colorinterp: Sequence[str], descriptions: Sequence[str | None]) -> list[int]:
    """Choose the bands shown as red, green and blue (or one band shown in grey).

    The colour interpretation decides when it names red, green and blue; else band descriptions
    that say so (``"B4 (red)"``); else a single band is shown in grey and three or more in
    the order given (band 1 as red).

    Args:
        bands: 1-based bands that were filled.
        colorinterp: Per-band colour interpretation names of the whole raster (``"red"``...).
        descriptions: Per-band descriptions of the whole raster.

    Returns:
        One band (grey) or three bands (red, green, blue), 1-based.
    """
    for names in (colorinterp, [(d or "").lower() for d in descriptions]):
        found = []
        for colour in _COLOURS:
            match = [b for b in bands if colour == names[b - 1] or colour in str(names[b - 1]).split("(")[-1]]
            if match:
                found.append(match[0])
        if len(found) == 3 and len(set(found)) == 3:
            return found
    return list(bands)[:3] if len(bands) >= 3 else list(bands)[:1]


def std_label(units: str | None) -> str:
    """The colour bar's label: what the std is and in which unit."""
    return f"predictive std ({units})" if units else "predictive std (the band's stored units)"


def _display(arr: np.ndarray, valid: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Stretch 1 or 3 bands (red, green, blue) to [0, 1] RGB; invalid pixels in :data:`GAP_RGB`."""
    img = (arr - lo[:, None, None]) / np.maximum(hi - lo, 1e-12)[:, None, None]
    img = np.clip(np.nan_to_num(img), 0, 1)
    rgb = np.repeat(img[:1], 3, 0) if img.shape[0] < 3 else img[:3]
    gap = ~valid.all(0)
    for i, value in enumerate(GAP_RGB):
        rgb[i][gap] = value
    return np.moveaxis(rgb, 0, -1)


def _stretch(raw: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-band 2nd and 98th percentiles of the observed pixels (0 and 1 for a band without any)."""
    lo, hi = np.zeros(raw.shape[0]), np.ones(raw.shape[0])
    for i in range(raw.shape[0]):
        seen = raw[i][valid[i] & np.isfinite(raw[i])]
        if seen.size:
            lo[i], hi[i] = np.percentile(seen, [2, 98])
    return lo, hi


def _mean_over_bands(sd: np.ndarray) -> np.ndarray:
    """Mean std over the bands where it is finite; NaN where no band has one (the collar).

    Computed by hand: ``np.nanmean`` warns "Mean of empty slice" on every all-NaN pixel.
    """
    finite = np.isfinite(sd)
    n = finite.sum(axis=0)
    total = np.where(finite, sd, 0.0).sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


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
    """Write a 3-panel PNG (input with gaps, prediction, std) of at most ``max_side`` px per panel.

    Raises:
        ConfigError: If ``png`` does not end in ``.png``.
    """
    check_quicklook_path(png)
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import rasterio

    from geonp.io.atomic_file import atomic_write_bytes

    with rasterio.open(input) as src:
        names = [ci.name for ci in src.colorinterp]
        rgb = rgb_bands(list(bands), names, src.descriptions)
        units = src.units[rgb[0] - 1] or None
    # Output and std rasters hold the filled bands in the order of ``bands``.
    position = {b: i + 1 for i, b in enumerate(bands)}
    shown = rgb
    raw, _ = _read_small(input, shown, max_side)
    # A pixel left unfilled is missing in OUTPUT by the same rule as a gap in INPUT (nodata, or
    # the mask or alpha band fill writes).
    out, out_valid = _read_small(filled, [position[b] for b in shown], max_side)
    sd, _ = _read_small(std, [position[b] for b in shown], max_side)
    # The std raster says exactly which pixels were observed (std 0), whatever made the gaps
    # (nodata, --mask, --qa, alpha): so no mask is re-read here.
    valid = np.isfinite(sd) & (sd == 0)
    lo, hi = _stretch(raw, valid)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.4), constrained_layout=True)
    axes[0].imshow(_display(raw, valid, lo, hi))
    axes[0].set_title(f"input ({100 * (1 - valid.all(0).mean()):.1f}% gaps, in magenta)")
    axes[1].imshow(_display(out, out_valid, lo, hi))
    axes[1].set_title("filled (magenta: left unfilled)")
    sd_mean = _mean_over_bands(sd)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad=(0.5, 0.5, 0.5))
    im = axes[2].imshow(np.ma.masked_invalid(sd_mean), cmap=cmap)
    axes[2].set_title("predictive std (mean over bands; grey: not filled)")
    fig.colorbar(im, ax=axes[2], shrink=0.8, label=std_label(units))
    for ax in axes:
        ax.set_axis_off()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(png, buf.getvalue())
