"""Remote rasters (``/vsicurl/``, ``s3://``...): tell a failed fetch from a corrupt file.

GDAL reports a refused credential, a missing object and a dropped connection with the same
"cannot open" as a damaged file; :func:`remote_failure` reads its message and names the cause,
so the user fixes the credentials or the URL rather than re-downloading a file they do not have.
"""

from __future__ import annotations

from geonp.errors import InputRasterError

__all__ = ["is_virtual", "remote_failure"]


#: GDAL/curl phrases that mean the network, not the file, failed.
_NETWORK_WORDS = ("could not resolve", "couldn't resolve", "failed to connect", "could not connect",
                  "connection refused", "timed out", "timeout", "network is unreachable",
                  "ssl", "http response code: 5", "curl error")
#: Phrases that mean the credentials were missing or refused.
_CREDENTIAL_WORDS = ("aws_secret_access_key", "credentials", "access denied", "accessdenied",
                     "invalidaccesskeyid", "signaturedoesnotmatch", "http response code: 403",
                     "http response code: 401", "expiredtoken", "google_application_credentials",
                     "azure_storage")


def remote_failure(name: str, text: str, *, role: str = "Input raster") -> InputRasterError | None:
    """Name a failure to open a remote raster (``/vsicurl/``, ``s3://``...) for what it is.

    A file that cannot be fetched is not "truncated or corrupt": say whether the network or the
    credentials failed, or the object does not exist.

    Args:
        name: The path as given.
        text: GDAL's one-line message.
        role: What the file is, for messages.

    Returns:
        The error to raise, or None when ``name`` is a local file.
    """
    if not is_virtual(name) or name.startswith(("/vsimem/", "/vsizip/", "/vsitar/", "/vsigzip/")):
        return None
    low = text.lower()
    if any(w in low for w in _CREDENTIAL_WORDS):
        return InputRasterError(
            f"{role} {name} cannot be read: the credentials were missing or refused ({text}); set "
            "them (for S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE; for a public "
            "bucket: AWS_NO_SIGN_REQUEST=YES) and run again."
        )
    if "http response code: 404" in low or "does not exist" in low or "nosuchkey" in low:
        return InputRasterError(f"{role} {name} was not found on the server ({text}); check the URL or key.")
    if any(w in low for w in _NETWORK_WORDS):
        return InputRasterError(
            f"{role} {name} cannot be fetched: a network error ({text}); check the address and "
            "your connection (or proxy), and run again."
        )
    return None


def is_virtual(path: str) -> bool:
    """Tell whether GDAL resolves ``path`` itself (``/vsi...`` paths, URLs)."""
    return path.startswith("/vsi") or "://" in path
