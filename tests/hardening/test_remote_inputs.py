"""Remote inputs that cannot be fetched are named as network or credential errors (offline tests)."""

from __future__ import annotations

import pytest

from geonp.io.raster import remote_failure
from tests.hardening._helpers import assert_refused, invoke


@pytest.fixture
def no_cloud_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_NO_SIGN_REQUEST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("CPL_AWS_AUTODETECT_EC2", "NO")  # never ask a metadata server
    monkeypatch.setenv("GDAL_HTTP_TIMEOUT", "3")


def test_unreachable_vsicurl_is_a_network_error(tmp_path, tiny_model, no_cloud_credentials) -> None:
    res = invoke(["fill", "/vsicurl/http://127.0.0.1:1/scene.tif", tmp_path / "o.tif", "--model", tiny_model])
    line = assert_refused(res, ["network error", "127.0.0.1", "check the address"])
    assert "truncated or corrupt" not in line
    assert not (tmp_path / "o.tif").exists()


def test_s3_without_credentials_is_a_credentials_error(tmp_path, tiny_model, no_cloud_credentials) -> None:
    res = invoke(["fill", "s3://no-such-bucket-geonp/scene.tif", tmp_path / "o.tif", "--model", tiny_model])
    line = assert_refused(res, ["credentials were missing or refused", "AWS_NO_SIGN_REQUEST=YES"])
    assert "truncated or corrupt" not in line


def test_remote_failure_classes() -> None:
    assert "not found on the server" in str(remote_failure("/vsicurl/https://x/a.tif", "HTTP response code: 404"))
    assert "credentials" in str(remote_failure("/vsis3/b/a.tif", "HTTP response code: 403 AccessDenied"))
    assert remote_failure("/data/a.tif", "Could not resolve host") is None
