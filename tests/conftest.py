import os

import matplotlib
import pytest

matplotlib.use("agg")


@pytest.fixture(autouse=True)
def _seed_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    # two pytest-xdist workers share the two cores: a thread each (spinning OpenMP threads of two
    # processes on two cores burn the time of the other's work)
    torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


#: Parametrise a test over every device present: ``@pytest.mark.parametrize("device", DEVICES)``.
#: CUDA cases carry the ``gpu`` mark (deselected by default; ``-m gpu`` selects them).
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not _cuda_available(),
                                                                                 reason="needs CUDA")]),
]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A small untrained TNP-KR model directory (mechanics tests do not need a trained model)."""
    import torch

    from geonp.config import ModelConfig
    from geonp.model_files.card import ModelCard
    from geonp.model_files.checkpoint import save_model
    from geonp.models import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32)
    return save_model(tmp_path_factory.mktemp("models") / "tiny", build_model(cfg), cfg, card=ModelCard(name="tiny"))


def write_raster(path, arr, *, nodata=None, dtype=None, crs="EPSG:32621", descriptions=None, tags=None):
    """Write ``arr [bands, h, w]`` as a GeoTIFF with a UTM grid."""
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    arr = np.asarray(arr)
    if arr.ndim == 2:
        arr = arr[None]
    profile = {"driver": "GTiff", "width": arr.shape[2], "height": arr.shape[1], "count": arr.shape[0],
                   "dtype": dtype or arr.dtype, "crs": crs, "transform": from_origin(500000, 7000000, 30, 30),
                   "nodata": nodata}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr.astype(profile["dtype"]))
        if descriptions:
            for i, d in enumerate(descriptions, 1):
                dst.set_band_description(i, d)
        if tags:
            dst.update_tags(**tags)
    return path


def smooth_field(shape, seed=0, scale=1000.0, offset=5000.0):
    """A smooth positive field ``[h, w]`` (sum of sinusoids), like a reflectance band."""
    import numpy as np

    rng = np.random.default_rng(seed)
    h, w = shape
    r, c = np.mgrid[0:h, 0:w]
    field = np.zeros(shape)
    for _ in range(4):
        fr, fc, ph = rng.uniform(0.02, 0.12), rng.uniform(0.02, 0.12), rng.uniform(0, 6.28)
        field += np.sin(fr * r + fc * c + ph)
    return offset + scale * field


@pytest.fixture(scope="module")
def cluster():
    """A real Dask LocalCluster: 2 worker processes, 1 thread each (one per test module)."""
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        yield lc



def gdal_cache_max_mib() -> float | None:
    """GDAL's block cache limit in this process (MiB; None where its library is not found)."""
    from geonp.io.raster import gdal_cache_bytes

    state = gdal_cache_bytes()
    return None if state is None else state[1] / 2**20


def fresh_python(code: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> str:
    """The stdout of ``code`` in a new Python process at the repository root, without the caller's
    GDAL_CACHEMAX (nor the ``unset`` variables)."""
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k != "GDAL_CACHEMAX" and k not in unset}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **(env or {})}, capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(os.path.dirname(__file__))).stdout
