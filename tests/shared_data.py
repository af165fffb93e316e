"""Where the tests find the development rasters that live outside the repository.

``GEONP_SHARED_DATA`` names their folder; otherwise the first ``shared/data`` folder beside the
repository or one of its parents. A test that needs a missing file skips with a reason that says
where it looked (``pytest -rs`` lists them; the default options include it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]


def _folder() -> Path | None:
    if os.environ.get("GEONP_SHARED_DATA"):
        return Path(os.environ["GEONP_SHARED_DATA"])
    for parent in _ROOT.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return None


FOLDER = _folder()


def shared_raster(name: str) -> Path:
    """The path of a development raster (it may not exist; see :func:`needs`)."""
    return (FOLDER or _ROOT / "shared-data-not-found") / name


def needs(path: Path) -> pytest.MarkDecorator:
    """Skip a test, with where the file was looked for, when ``path`` is missing."""
    return pytest.mark.skipif(not path.exists(), reason=f"{path.name} not found in {path.parent}: set GEONP_SHARED_DATA "
                                                       "to the folder of the development rasters")
