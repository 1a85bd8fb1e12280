"""`trajledger.ledger.key_pkcs8`'s DER writer (moved out of ``keys`` with its test: left38);
the encryption and its KDF bounds are tested through the key store (test_keys.py)."""

from __future__ import annotations

from trajledger.ledger.key_pkcs8 import _der, _der_int


def test_der_lengths_and_integers() -> None:
    assert _der(0x04, b"x" * 127)[:2] == bytes([0x04, 127])
    assert _der(0x04, b"x" * 200)[:3] == bytes([0x04, 0x81, 200])
    assert _der(0x04, b"x" * 300)[:4] == bytes([0x04, 0x82, 0x01, 0x2C])
    assert [_der_int(v) for v in (0, 1, 127, 128, 16384)] == [
        b"\x02\x01\x00", b"\x02\x01\x01", b"\x02\x01\x7f", b"\x02\x02\x00\x80",
        b"\x02\x02\x40\x00"]
