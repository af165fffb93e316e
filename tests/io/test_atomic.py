"""Atomic writers: a finished file or none, never a partial one."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors

from geonp.errors import OutputError
from geonp.io.atomic import AtomicRasterWriter
from geonp.io.atomic_file import atomic_write_bytes, atomic_write_file, atomic_write_text
from geonp.io.profiles import output_profile
from tests.io.output_helpers import listing, small_profile, src_profile

# --------------------------------------------------------------------------- AtomicRasterWriter

def test_atomic_writer_success_leaves_only_final(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    data = np.arange(200, dtype="float32").reshape(1, 10, 20)
    with AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
        writer = dst
        assert dst.name != str(out)
        temp_name = Path(dst.name).name
        assert temp_name.startswith(".out.tif.geonp-partial-") and temp_name.endswith(".tif")
        assert not out.exists()
        dst.write(data)
    assert writer.closed
    assert listing(tmp_path) == ["out.tif"]
    with rasterio.open(out) as src:
        np.testing.assert_array_equal(src.read(), data)
        assert src.nodata == -9999.0


def test_atomic_writer_exception_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    with pytest.raises(RuntimeError, match="model crashed"), AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
        dst.write(np.ones((1, 10, 20), dtype="float32"))
        raise RuntimeError("model crashed")
    assert listing(tmp_path) == []


def test_atomic_writer_keyboard_interrupt_keeps_old_file(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"previous result")
    with pytest.raises(KeyboardInterrupt), AtomicRasterWriter(out, small_profile(), overwrite=True) as dst:
        dst.write(np.ones((1, 10, 20), dtype="float32"))
        raise KeyboardInterrupt
    assert listing(tmp_path) == ["out.tif"]
    assert out.read_bytes() == b"previous result"


def test_atomic_writer_refuses_existing_without_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"keep me")
    with pytest.raises(OutputError, match="already exists; pass --overwrite to replace it"), AtomicRasterWriter(out, small_profile(), overwrite=False):
        pytest.fail("must not enter")
    assert out.read_bytes() == b"keep me"
    assert listing(tmp_path) == ["out.tif"]


def test_atomic_writer_refuses_file_appearing_during_write(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    with pytest.raises(OutputError, match="appeared while geonp was writing"), AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
        dst.write(np.ones((1, 10, 20), dtype="float32"))
        out.write_bytes(b"someone else")
    assert out.read_bytes() == b"someone else"
    assert listing(tmp_path) == ["out.tif"]


def test_atomic_writer_overwrite_replaces_and_drops_stale_aux(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"old")
    (tmp_path / "out.tif.aux.xml").write_text("<PAMDataset/>")
    with AtomicRasterWriter(out, small_profile(), overwrite=True) as dst:
        dst.write(np.full((1, 10, 20), 3.0, dtype="float32"))
    assert listing(tmp_path) == ["out.tif"]
    with rasterio.open(out) as src:
        assert float(src.read(1)[0, 0]) == 3.0


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        rasterio.errors.RasterioIOError("out.tif: Free disk space available is 0 bytes"),
    ],
)
def test_atomic_writer_disk_full(tmp_path: Path, error: Exception) -> None:
    out = tmp_path / "out.tif"
    with pytest.raises(OutputError) as info, AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
        dst.write(np.ones((1, 10, 20), dtype="float32"))
        raise error
    assert str(info.value) == (
        f"No space left on device while writing {out}; free space or write elsewhere. "
        "No file was written."
    )
    assert info.value.__cause__ is error
    assert listing(tmp_path) == []


def test_atomic_writer_cog(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    data = np.random.default_rng(0).random((2, 600, 700)).astype("float32")
    prof = output_profile(src_profile(700, 600), count=2, dtype="float32", nodata=None,
                          creation_options={}, cog=True)
    with AtomicRasterWriter(out, prof, overwrite=False, cog=True,
                            creation_options={"COMPRESS": "ZSTD", "BLOCKXSIZE": "256"}) as dst:
        dst.write(data)
    assert listing(tmp_path) == ["out.tif"]
    with rasterio.open(out) as src:
        assert src.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
        assert src.compression.name == "zstd"
        assert src.block_shapes[0] == (256, 256)
        assert src.overviews(1)  # COG adds overviews for rasters over 512 px
        np.testing.assert_array_equal(src.read(), data)

# ------------------------------------------------------------------------------- atomic bytes


def test_atomic_write_text_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    atomic_write_text(path, '{"a": 1}')
    assert path.read_text() == '{"a": 1}'
    atomic_write_bytes(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert listing(tmp_path) == ["manifest.json"]


def test_atomic_write_bytes_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("geonp.io.atomic_file.os.fsync", full)
    with pytest.raises(OutputError, match="No space left on device while writing .*report.json"):
        atomic_write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert listing(tmp_path) == ["report.json"]


def test_atomic_write_file_goes_through_a_writer_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        tmp.write_bytes(b"weights")

    atomic_write_file(path, write)
    assert path.read_bytes() == b"weights"
    assert seen[0].parent == tmp_path and seen[0].name.startswith(".model.safetensors.geonp-partial-")
    assert listing(tmp_path) == ["model.safetensors"]

    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        atomic_write_file(path, broken)
    assert path.read_bytes() == b"weights"
    assert listing(tmp_path) == ["model.safetensors"]


def test_a_group_commits_its_rasters_together_or_not_at_all(tmp_path: Path) -> None:
    from geonp.io.atomic import AtomicGroup

    a, b = tmp_path / "filled.tif", tmp_path / "filled_std.tif"
    with pytest.raises(RuntimeError), AtomicGroup() as group:
        with group.writer(b, small_profile(), overwrite=False) as dst:
            dst.write(np.ones((1, 8, 8), "uint8"))
        assert not b.exists()  # finished, but waiting for the group
        with group.writer(a, small_profile(), overwrite=False) as dst:
            raise RuntimeError("the fill failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither appeared, no partial left
    with AtomicGroup() as group, group.writer(a, small_profile(), overwrite=False) as dst, \
            group.writer(b, small_profile(), overwrite=False) as dstd:
        dst.write(np.full((1, 8, 8), 3, "uint8"))
        dstd.write(np.full((1, 8, 8), 4, "uint8"))
        assert not a.exists() and not b.exists()
    with rasterio.open(a) as src_a, rasterio.open(b) as src_b:
        assert src_a.read(1)[0, 0] == 3 and src_b.read(1)[0, 0] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["filled.tif", "filled_std.tif"]


def test_a_group_moves_its_primary_file_last(tmp_path: Path, monkeypatch) -> None:
    from geonp.io import atomic
    from geonp.io.atomic import AtomicGroup

    moved: list[str] = []
    move = atomic.AtomicRasterWriter._move_into_place

    def recorded(self):
        moved.append(self.path.name)
        move(self)

    monkeypatch.setattr(atomic.AtomicRasterWriter, "_move_into_place", recorded)
    a, b, c = tmp_path / "filled.tif", tmp_path / "filled_std.tif", tmp_path / "extra.tif"
    group = AtomicGroup()
    with group, group.writer(a, small_profile(), overwrite=False, primary=True) as dst:
        dst.write(np.ones((1, 10, 20), "float32"))
        with group.writer(b, small_profile(), overwrite=False) as dstd:
            dstd.write(np.ones((1, 10, 20), "float32"))
        with group.writer(c, small_profile(), overwrite=False) as dste:
            dste.write(np.ones((1, 10, 20), "float32"))
    assert moved == ["filled_std.tif", "extra.tif", "filled.tif"]  # finish order, the primary last
    with pytest.raises(ValueError, match="already the group's primary file"):
        two = AtomicGroup()
        two.writer(a, small_profile(), overwrite=True, primary=True)
        two.writer(b, small_profile(), overwrite=True, primary=True)


def test_nested_plain_writers_commit_on_their_own(tmp_path: Path) -> None:
    """No hidden state: a writer outside a group commits when its own block ends."""
    a, b = tmp_path / "a.tif", tmp_path / "b.tif"
    with AtomicRasterWriter(a, small_profile(), overwrite=False) as dst:
        dst.write(np.ones((1, 8, 8), "uint8"))
        with AtomicRasterWriter(b, small_profile(), overwrite=False) as inner:
            inner.write(np.ones((1, 8, 8), "uint8"))
        assert b.exists() and not a.exists()
    assert a.exists()
