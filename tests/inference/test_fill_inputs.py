"""The typed inputs of a fill (``geonp.Gaps``, ``geonp.Outputs``, ``geonp.Reference``) and of a
batch (``geonp.Files``, ``geonp.Cluster``, ``geonp.Neighbours``): their invariants, and that each
shape a reference may take fills the same."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import rasterio

import geonp
from geonp.errors import ConfigError
from geonp.filling.inputs import as_references
from tests.conftest import smooth_field, write_raster

LSTS = Path(__file__).resolve().parents[1] / "data" / "lsts"


def test_outputs_of_a_path_and_of_itself():
    assert geonp.Outputs.of("a.tif") == geonp.Outputs("a.tif")
    outs = geonp.Outputs("a.tif", uncertainty="s.tif", dry_run=True)
    assert geonp.Outputs.of(outs) is outs
    with pytest.raises(ConfigError, match="the output must be a path or a geonp.Outputs, got int"):
        geonp.Outputs.of(3)


def test_gaps_list_the_files_they_read():
    assert geonp.Gaps().files() == []
    assert geonp.Gaps(mask="m.tif", qa="q.tif", qa_kind="fmask", footprint="f.geojson").files() == [
        "m.tif", "q.tif", "f.geojson"]


def test_every_reference_shape_becomes_one_reference():
    values, valid = np.ones((2, 4, 4)), np.ones((4, 4), bool)
    refs = as_references(["a.tif", Path("b.tif"), (values, valid, -16), (values, 8.0),
                          geonp.Reference("c.tif", date="2012-05-08", qa="c_qa.tif")])
    assert [r.is_file for r in refs] == [True, True, False, False, True]
    assert refs[2].days == -16 and refs[2].valid is valid and refs[3].days == 8.0 and refs[3].valid is None
    assert refs[4].date == "2012-05-08" and refs[4].qa == "c_qa.tif"
    assert as_references("a.tif") == (geonp.Reference("a.tif"),)  # one path is one reference
    assert pickle.loads(pickle.dumps(refs[4])) == refs[4]  # batch tasks carry them to Dask workers


@pytest.mark.parametrize(("item", "message"), [
    (geonp.Reference("a.tif", days=3), r"reference 1 \(a.tif\): a file's date offset comes from its date"),
    (geonp.Reference("a.tif", valid=np.ones(3)), r"reference 1 \(a.tif\): a file's gaps come from its nodata"),
    (geonp.Reference(np.ones(3), days=1, date="2012-01-01"), "reference 1: date and qa describe a file"),
    (geonp.Reference(np.ones(3)), "reference 1 has days=None; give its date offset"),
    (geonp.Reference(np.ones(3), days=float("nan")), "reference 1 has days=nan"),
    (geonp.Reference(np.ones(3), days=True), "reference 1 has days=True"),
    ((1, 2, 3, 4), "reference 1 must be a geonp.Reference, a path, a .values, valid, days. triple"),
])
def test_a_reference_that_does_not_fit_its_kind_is_refused(item, message):
    with pytest.raises(ConfigError, match=message):
        as_references([item])


def test_reference_options_must_pair_up():
    refs = geonp.Reference.from_options(["a.tif", "b.tif"], ["2012-05-08", None], None)
    assert refs == (geonp.Reference("a.tif", date="2012-05-08"), geonp.Reference("b.tif"))
    assert geonp.Reference.from_options((), None, None) == ()
    with pytest.raises(ConfigError, match="1 --reference-qa given for 2 --reference"):
        geonp.Reference.from_options(["a.tif", "b.tif"], None, ["qa.tif"])
    with pytest.raises(ConfigError, match="2 --reference-date given for 1 --reference"):
        geonp.Reference.from_options(["a.tif"], ["2012-05-08", "2012-05-24"], None)
    with pytest.raises(ConfigError, match="--reference-date/--reference-qa describe references"):
        geonp.Reference.from_options((), ["2012-05-08"], None)


def test_in_memory_fills_refuse_file_references_and_files_refuse_arrays(tmp_path, tiny_model):
    values = smooth_field((24, 24), seed=1)[None]
    with pytest.raises(ConfigError, match="reference 1: fill_array takes arrays on the array's grid"):
        geonp.fill_array(values, np.isfinite(values), model=tiny_model, references=["a.tif"])
    src = write_raster(tmp_path / "in.tif", values.astype("float32"))
    with pytest.raises(ConfigError, match="reference 1: fill_raster reads references from files"):
        geonp.fill_raster(src, tmp_path / "o.tif", model=tiny_model, references=[(values, None, -16)])
    assert not (tmp_path / "o.tif").exists()


def test_a_reference_as_a_triple_or_a_reference_fills_the_same(tmp_path):
    """fill_array with references=[(values, valid, days)] equals references=[Reference(values, days=, valid=)]."""
    with rasterio.open(LSTS / "LE70350322012145EDC00.tif") as f, rasterio.open(LSTS / "LE70350322012129EDC00.tif") as r:
        target, before = f.read().astype(np.float64), r.read().astype(np.float64)
    target[:, 20:34, 20:34] = np.nan
    kw = {"model": "multidate", "device": "cpu", "workers": 1}
    a = geonp.fill_array(target, np.isfinite(target), references=[(before, before != -9999, -16)], **kw)
    b = geonp.fill_array(target, np.isfinite(target), **kw,
                         references=[geonp.Reference(before, days=-16, valid=before != -9999)])
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert np.isfinite(a[0][:, 20:34, 20:34]).all()


def test_a_fill_with_typed_gaps_and_outputs_writes_where_told(tmp_path, tiny_model):
    values = (1000 + 100 * smooth_field((32, 32), seed=2)).astype("uint16")[None]
    src = write_raster(tmp_path / "in.tif", values)
    gap = np.zeros((32, 32), "uint8")
    gap[10:16, 12:20] = 9
    mask = write_raster(tmp_path / "clouds.tif", gap[None])
    outs = geonp.Outputs(tmp_path / "filled.tif", uncertainty=tmp_path / "sigma.tif")
    report = geonp.fill_raster(src, outs, model=tiny_model, gaps=geonp.Gaps(mask=mask, mask_values="9"),
                               fill_outside=True)
    assert report.gap_pixels == 48 and report.filled_pixels == 48
    assert report.output == tmp_path / "filled.tif" and report.uncertainty == tmp_path / "sigma.tif"
    with rasterio.open(tmp_path / "sigma.tif") as s:
        std = s.read(1)
    assert (std[gap == 9] > 0).all() and (std[gap == 0] == 0).all()
    plan = geonp.fill_raster(src, geonp.Outputs(tmp_path / "dry.tif", dry_run=True), model=tiny_model,
                             gaps=geonp.Gaps(mask=mask, mask_values="9"), fill_outside=True)
    assert plan.dry_run and plan.gap_pixels == 48 and not (tmp_path / "dry.tif").exists()


def test_batch_options_refuse_bad_values():
    assert geonp.Neighbours().count == 2 and geonp.Files().pattern == "*.tif"
    assert geonp.Cluster().scheduler is None and geonp.Cluster().dashboard_address == ":8787"
    with pytest.raises(ConfigError, match="--neighbours 0 must be an integer >= 1"):
        geonp.Neighbours(0)
    with pytest.raises(ConfigError, match="--max-days -1 must be a number of days >= 0"):
        geonp.Neighbours(2, max_days=-1)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: geonp.fill_raster("in.tif", "out.tif", mask="m.tif"),
     r"fill_raster\(\) takes mask= inside a geonp.Gaps now: give geonp.Gaps\(mask=...\)"),
    (lambda: geonp.fill_raster("in.tif", "out.tif", uncertainty="s.tif"),
     r"takes uncertainty= inside a geonp.Outputs now"),
    (lambda: geonp.fill_raster("in.tif", "out.tif", reference_qa=["q.tif"]),
     r"takes reference_qa= inside a geonp.Reference now"),
    (lambda: geonp.fill_raster("in.tif", "out.tif", gaps={"mask": "m.tif"}),
     r"gaps= must be a geonp.Gaps, got dict; e.g. gaps=geonp.Gaps\(mask=...\)"),
    (lambda: geonp.fill_many("in", "out", pattern="*.jp2"), r"fill_many\(\) takes pattern= inside a geonp.Files now"),
    (lambda: geonp.fill_many("in", "out", on_cluster=print),
     r"takes on_cluster= inside a geonp.Cluster now: give geonp.Cluster\(on_ready=...\)"),
    (lambda: geonp.fill_many("in", "out", neighbours=2),
     r"fill_many's neighbours= must be a geonp.Neighbours, got int; e.g. neighbours=geonp.Neighbours\(...\)"),
])
def test_keywords_that_moved_into_a_type_say_where(call, message):
    """Calls written for the flat keywords fail at once with a one-line error naming the type."""
    with pytest.raises(ConfigError, match=message):
        call()
