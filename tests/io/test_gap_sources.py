"""GapSources: option checks, masks combined, the footprint's choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rasterio.windows import Window

from geonp.errors import ConfigError
from geonp.io.gap_sources import Gaps, build_gap_sources
from geonp.io.raster import open_raster
from tests.conftest import write_raster


def _sources(tmp_path: Path, fill_outside: bool = False, **kw):
    arr = np.full((1, 32, 32), 500, "uint16")
    arr[0, :, 20:] = 0  # a collar on the right, 12 px deep
    path = write_raster(tmp_path / "in.tif", arr)
    with open_raster(path) as src:
        return build_gap_sources(src, Gaps(**kw), bands=[1], nodata=0, fill_outside=fill_outside)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mask_values": "1", "mask_bits": "2"}, "give one of them"),
        ({"mask_values": "1"}, "give the mask too"),
        ({"qa": "x.tif"}, "--qa needs --qa-kind"),
        ({"qa_kind": "fmask"}, "give the QA band too"),
        ({"footprint": "f.tif", "fill_outside": True}, "contradict each other"),
    ],
)
def test_option_conflicts(tmp_path, kw, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _sources(tmp_path, **kw)


def test_masks_combine_and_footprint_excludes_the_collar(tmp_path) -> None:
    mask = np.zeros((32, 32), "uint8")
    mask[1, 1] = 8
    qa = np.full((32, 32), 21824, "uint16")
    qa[2, 2] = 22280  # cloud
    write_raster(tmp_path / "m.tif", mask)
    write_raster(tmp_path / "qa.tif", qa)
    src = _sources(tmp_path, mask=tmp_path / "m.tif", mask_values="8", qa=tmp_path / "qa.tif",
                   qa_kind="landsat-c2")
    gaps = src.extra_gaps(Window(0, 0, 32, 32))
    assert np.flatnonzero(gaps).tolist() == [33, 66]
    inside = src.fillable(Window(0, 0, 32, 32))
    assert inside[:, :20].all() and not inside[:, 20:].any()
    everywhere = _sources(tmp_path, fill_outside=True)
    assert everywhere.fillable(Window(0, 0, 32, 32)).all()
    assert everywhere.extra_gaps(Window(0, 0, 32, 32)) is None
    assert src.inputs == [str(tmp_path / "m.tif"), str(tmp_path / "qa.tif")]


def test_the_collar_is_found_by_its_straight_edge_and_a_qa_fill_class_alone_is_not_outside(tmp_path) -> None:
    by_shape = _sources(tmp_path)  # a straight edge 32 px long with data right along it
    inside = by_shape.fillable(Window(0, 0, 32, 32))
    assert inside[:, :20].all() and not inside[:, 20:].any()
    assert by_shape.outside_evidence == "beyond a straight collar edge"
    # Landsat 7 stripes are the QA band's fill class too: fill between data pixels is inside
    qa = np.full((32, 32), 21824, "uint16")
    qa[:, 8:10] = 1  # a stripe of fill, with data on both sides
    write_raster(tmp_path / "qa.tif", qa)
    striped = _sources(tmp_path, qa=tmp_path / "qa.tif", qa_kind="landsat-c2")
    assert striped.fillable(Window(0, 0, 32, 32))[:, :20].all()
