"""Remote storage locations (``s3://bucket/prefix`` and other ``pyarrow.fs`` URIs).

Scope: open the filesystem of a store or bundle URI, with S3 settings from the usual AWS
variables (credentials from the AWS SDK's default chain: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, profiles, instance roles; endpoint from
``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; region from ``AWS_REGION`` or
``AWS_DEFAULT_REGION``); check that a store location is reachable; copy whole files (evidence
bundles) to and from such a location. pyarrow is imported only here and only when called.

Non-scope: content addressing and digest checks (``ledger.store``), the log (always a local
POSIX directory with one writer; docs/SCALE.md).

Limits of S3-compatible servers (docs/SCALE.md): pyarrow's AWS SDK sends ``aws-chunked``
uploads with a CRC64-NVME trailer by default, which some servers refuse; set
``AWS_REQUEST_CHECKSUM_CALCULATION=when_required`` and
``AWS_RESPONSE_CHECKSUM_VALIDATION=when_required`` for those.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trajledger.verify.errors import FormatError

from .errors import StoreError

__all__ = [
    "CleartextEndpointWarning",
    "download",
    "is_uri",
    "open_filesystem",
    "require_reachable",
    "upload",
]


class CleartextEndpointWarning(UserWarning):
    """An S3 endpoint on another host over plain ``http://``: integrity holds (every blob is
    re-hashed, SigV4 never sends the secret), but what travels can be read on the way, a
    session token included. The command line prints it as one ``WARNING:`` line."""

_COPY_CHUNK = 8 << 20
_HINT = (
    "check the bucket name and the AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
    "AWS_ENDPOINT_URL, AWS_REGION); an S3-compatible server that refuses checksum trailers "
    "needs AWS_REQUEST_CHECKSUM_CALCULATION=when_required and "
    "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required"
)


def is_uri(location: str) -> bool:
    """True for a remote location (``scheme://...``, except ``file://``)."""
    return "://" in location and not location.startswith("file://")


def _loopback(host: str) -> bool:
    """``localhost`` or a loopback address (a local test server)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _s3(uri: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    parts = urlsplit(uri)
    bucket = parts.netloc
    if not bucket:
        raise StoreError(f"store {uri}: no bucket, want s3://BUCKET[/PREFIX]")
    if ":" in bucket or parts.query or parts.fragment:
        raise StoreError(f"store {uri}: want s3://BUCKET[/PREFIX], no port, query or fragment "
                         "(the endpoint and settings come from the AWS variables)")
    prefix = parts.path.strip("/")
    options: dict[str, Any] = {
        # One PutObject per small object instead of a three-request multipart upload.
        "allow_delayed_open": True,
    }
    variable = next((v for v in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if os.environ.get(v)),
                    "AWS_ENDPOINT_URL")
    endpoint = os.environ.get(variable)
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if not ep.netloc or ep.scheme not in ("http", "https"):
            raise StoreError(f"{variable} {endpoint!r}: not a URL, want http(s)://HOST:PORT")
        if ep.scheme == "http" and not _loopback(ep.hostname or ""):
            warnings.warn(CleartextEndpointWarning(
                f"{variable} http://{ep.hostname}: plain http to another host: the "
                "objects and the session token travel readable (each blob is still re-hashed); "
                "use https:// unless the network between is yours"), stacklevel=2)
        options["endpoint_override"] = ep.netloc + ep.path.rstrip("/")
        options["scheme"] = ep.scheme
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    try:
        fs = pafs.S3FileSystem(**options)
    except (OSError, ValueError) as e:
        raise StoreError(f"store {uri}: cannot open: {e}; {_HINT}") from e
    return fs, f"{bucket}/{prefix}".rstrip("/")


def open_filesystem(uri: str) -> tuple[Any, str]:
    """The ``pyarrow.fs`` filesystem and path of a remote location.

    ``s3://`` gets an ``S3FileSystem`` configured from the AWS variables; any other scheme
    goes to ``pyarrow.fs.FileSystem.from_uri``.

    Raises:
        StoreError: an unknown scheme or a location pyarrow cannot open; credentials in the
            location (``scheme://USER:SECRET@…``: refused without echoing them); an ``s3://``
            location with a port, query or fragment.
    """
    parts = urlsplit(uri)
    if "@" in parts.netloc:  # never echoed: it may hold a secret
        shown = f"{parts.scheme}://…@{parts.netloc.rsplit('@', 1)[1]}{parts.path}"
        raise StoreError(f"store {shown}: credentials in a location are refused (the location "
                         "is kept in ledger.toml and shown in messages); for S3 give them in "
                         "the AWS variables or a profile")
    if parts.scheme == "s3":
        return _s3(uri)
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as e:
        raise StoreError(f"store {uri}: cannot open: {e}") from e
    return fs, str(path).rstrip("/")


def needs_directories(fs: Any) -> bool:
    """False for object stores, where directories are implicit (no marker objects needed)."""
    return str(getattr(fs, "type_name", "")) not in ("s3", "gcs")


def require_reachable(uri: str) -> None:
    """Check that a store location can be listed (at ``init``, before anything is written).

    Raises:
        StoreError: the bucket does not exist or the credentials cannot read it.
    """
    import pyarrow.fs as pafs

    fs, path = open_filesystem(uri)
    bucket = path.split("/", 1)[0]
    try:
        info = fs.get_file_info(bucket)
    except OSError as e:
        raise StoreError(f"store {uri}: cannot reach it: {_one_line(e)}; {_HINT}") from e
    if info.type != pafs.FileType.Directory:
        raise StoreError(f"store {uri}: bucket {bucket!r} does not exist; create it first")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def upload(src: Path, uri: str) -> None:
    """Copy a local file to a remote location (an object appears only once complete), byte for
    byte: pyarrow would compress by the name's extension (``.zst``), making the object a
    second compression of the bundle; `download` likewise decompresses nothing.

    Raises:
        StoreError: the location cannot be written.
    """
    fs, path = open_filesystem(uri)
    try:
        with open(src, "rb") as f, fs.open_output_stream(path, compression=None) as out:
            while chunk := f.read(_COPY_CHUNK):
                out.write(chunk)
    except OSError as e:
        raise StoreError(f"{uri}: cannot write: {_one_line(e)}") from e


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def _local_copy(workdir: Path, path: str) -> tuple[int, Path]:
    """A new file (0600) in ``workdir`` for the object at ``path``: under the object's own name
    when that is a plain file name not taken there, so that what is said about the copy names
    what the user gave (``bundle ds.tar.zst``, not a temporary name); else ``download-*``."""
    base = path.rsplit("/", 1)[-1]
    if _PLAIN_NAME.fullmatch(base):
        dest = workdir / base
        try:
            return os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), dest
        except FileExistsError:
            pass
    fd, name = tempfile.mkstemp(dir=workdir, prefix="download-")
    return fd, Path(name)


def download(uri: str, workdir: Path, *, limit: int) -> Path:
    """Copy a remote file into ``workdir``; returns the local copy. An object listed larger
    than ``limit``, or larger than the free space of ``workdir``, is refused before a byte is
    read; one that sends more than it listed is refused as soon as it does. Nothing is left
    behind on any error or interruption (Ctrl-C).

    Raises:
        FormatError: the object is larger than ``limit`` (listed, or as it comes).
        StoreError: the location cannot be read or does not exist; no room for it.
    """
    import pyarrow.fs as pafs

    fs, path = open_filesystem(uri)
    try:
        info = fs.get_file_info(path)
    except OSError as e:
        raise StoreError(f"{uri}: cannot read: {_one_line(e)}") from e
    if info.type != pafs.FileType.File:
        raise StoreError(f"{uri}: no such object")
    listed = int(info.size)
    if listed > limit:
        raise FormatError(f"{uri}: {listed} bytes, more than a bundle may hold ({limit}); "
                          "nothing downloaded")
    free = shutil.disk_usage(workdir).free
    if listed > free:
        raise StoreError(f"{uri}: {listed} bytes, only {free} free in {workdir}; "
                         "nothing downloaded")
    fd, dest = _local_copy(workdir, path)
    try:
        with os.fdopen(fd, "wb") as out, fs.open_input_stream(path, compression=None) as f:
            done = 0
            while chunk := f.read(min(_COPY_CHUNK, listed + 1 - done)):
                done += len(chunk)
                if done > listed:
                    raise FormatError(f"{uri}: more bytes than the {listed} it lists; "
                                      "nothing kept")
                out.write(chunk)
    except FileNotFoundError as e:
        dest.unlink(missing_ok=True)
        raise StoreError(f"{uri}: no such object") from e
    except OSError as e:
        dest.unlink(missing_ok=True)
        raise StoreError(f"{uri}: cannot read: {_one_line(e)}") from e
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return dest
