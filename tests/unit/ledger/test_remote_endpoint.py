"""An S3 endpoint over plain http to another host is named in one WARNING line (rev10's left
item): integrity does not depend on it (every blob is re-hashed, SigV4 never sends the secret),
but the objects and a session token travel readable. A local test server (loopback) is not
warned about; an endpoint of another scheme is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trajledger.ledger.errors import StoreError
from trajledger.ledger.remote import CleartextEndpointWarning, open_filesystem


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize(("variable", "endpoint", "warned"), [
    ("AWS_ENDPOINT_URL", "http://10.0.0.5:9000", True),
    ("AWS_ENDPOINT_URL_S3", "http://minio.internal:9000", True),
    ("AWS_ENDPOINT_URL", "https://s3.example.com", False),
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000", False),
    ("AWS_ENDPOINT_URL", "http://localhost:9000", False),
    ("AWS_ENDPOINT_URL", "http://[::1]:9000", False),
    ("AWS_ENDPOINT_URL", "minio.internal:9000", False),  # no scheme: https
])
def test_plain_http_to_another_host_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, variable: str, endpoint: str, warned: bool
) -> None:
    monkeypatch.setenv(variable, endpoint)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        open_filesystem("s3://bucket/prefix")
    ours = [w for w in seen if issubclass(w.category, CleartextEndpointWarning)]
    assert len(ours) == int(warned), [str(w.message) for w in seen]
    if warned:
        assert str(ours[0].message).startswith(f"{variable} http://")
        assert "travel readable" in str(ours[0].message)


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize("endpoint", ["ftp://s3.example.com", "file:///tmp/x"])
def test_an_endpoint_of_another_scheme_is_refused(
    monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(StoreError, match="not a URL, want http"):
        open_filesystem("s3://bucket/prefix")


@pytest.mark.usefixtures("aws")
def test_the_command_line_prints_one_warning_line(tmp_path: Path) -> None:
    """As a user runs it: the WARNING line first, then the command's own failure (the host
    does not resolve: RFC 6761's .invalid)."""
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://s3.invalid:9000"}
    done = subprocess.run(
        [sys.executable, "-m", "trajledger", "--ledger", str(tmp_path / "l"), "init",
         "--store", "s3://bucket/x"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "WARNING: AWS_ENDPOINT_URL http://s3.invalid: plain http to another host: the objects "
        "and the session token travel readable (each blob is still re-hashed); use https:// "
        "unless the network between is yours"), lines
    assert sum(line.startswith("WARNING:") for line in lines) == 1
    assert lines[1].startswith("FAIL: store s3://bucket/x: cannot reach it")
    assert "Traceback" not in done.stderr
