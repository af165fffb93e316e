"""check_output_path: never the input, never a directory, never a silent overwrite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from geonp.errors import OutputError
from geonp.io.paths import RUN_ID_TAG, check_output_path, unpaired_output

# ------------------------------------------------------------------------------ check_output_path


def test_output_equal_to_input_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "in.tif"
    src.write_bytes(b"x")
    for spelling in (src, tmp_path / "sub" / ".." / "in.tif"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(OutputError, match="is the input") as info:
            check_output_path(spelling, inputs=[tmp_path / "other.tif", src], overwrite=True)
        assert "write to another path (geonp never modifies its input)" in str(info.value)
    link = tmp_path / "link.tif"
    os.link(src, link)
    with pytest.raises(OutputError, match="is the input"):
        check_output_path(link, inputs=[src], overwrite=True)
    assert src.read_bytes() == b"x"


def test_output_parent_missing(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "out.tif"
    with pytest.raises(OutputError, match="does not exist; create it first") as info:
        check_output_path(out, inputs=[], overwrite=False)
    assert str(tmp_path / "no" / "such") in str(info.value)


def test_output_exists_needs_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"old")
    with pytest.raises(OutputError) as info:
        check_output_path(out, inputs=[tmp_path / "in.tif"], overwrite=False)
    assert str(info.value) == f"{out} already exists; pass --overwrite to replace it."
    assert check_output_path(out, inputs=[tmp_path / "in.tif"], overwrite=True) == out
    assert out.read_bytes() == b"old"


def test_output_is_directory(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="is a directory; give a file path"):
        check_output_path(tmp_path, inputs=[], overwrite=True)


def test_output_new_file_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_output_path("new.tif", inputs=["in.tif"], overwrite=False) == tmp_path / "new.tif"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write anywhere")
def test_output_parent_not_writable(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="is not writable"):
            check_output_path(locked / "out.tif", inputs=[], overwrite=False)
    finally:
        locked.chmod(0o700)


def test_output_parent_not_writable_via_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("geonp.io.paths.os.access", lambda path, mode: False)
    with pytest.raises(OutputError, match=r"is not writable; choose another directory"):
        check_output_path(tmp_path / "out.tif", inputs=[], overwrite=False)


# ------------------------------------------------------------------------------ unpaired_output


def test_unpaired_output_names_a_std_raster_left_by_an_interrupted_run(tmp_path: Path) -> None:
    import numpy as np
    import rasterio

    from tests.io.output_helpers import small_profile

    def write(path: Path, run_id: str | None) -> None:
        with rasterio.open(path, "w", **small_profile()) as dst:
            dst.write(np.zeros((1, 10, 20), "float32"))
            if run_id is not None:
                dst.update_tags(**{RUN_ID_TAG: run_id})

    out, std = tmp_path / "filled.tif", tmp_path / "filled_std.tif"
    assert unpaired_output(out, std) is None  # nothing written yet
    write(out, "aaa")
    assert unpaired_output(out, std) is None  # no std raster: nothing left over
    write(std, "aaa")
    assert unpaired_output(out, std) is None  # one run's pair
    out.unlink()
    assert unpaired_output(out, std) == "filled.tif is missing"
    write(out, "bbb")
    assert unpaired_output(out, std) == f"its {RUN_ID_TAG} aaa is not filled.tif's bbb"
    write(out, None)  # an older geonp (or other software) wrote it: not judged
    assert unpaired_output(out, std) is None
