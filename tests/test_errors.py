"""``one_line``: the one rule for one-line messages (CLI, batch reports, raster errors)."""

from __future__ import annotations

from geonp.errors import one_line


def test_text_is_folded_to_one_line():
    assert one_line("a\n  b\tc ") == "a b c"
    assert one_line("") == ""


def test_an_exception_without_text_is_named_by_its_type():
    assert one_line(ValueError("x\n y")) == "x y"
    assert one_line(KeyError()) == "KeyError"


def test_causes_are_appended_without_repeats_or_gdal_placeholders():
    try:
        try:
            try:
                raise OSError("disk\nfull")
            except OSError as low:
                raise RuntimeError("See previous exception") from low
        except RuntimeError as mid:
            raise ValueError("write failed") from mid
    except ValueError as err:
        top = err
    assert one_line(top) == "write failed"
    assert one_line(top, causes=True) == "write failed: disk full"
    repeated = ValueError("same")
    repeated.__cause__ = ValueError("same")
    assert one_line(repeated, causes=True) == "same"
