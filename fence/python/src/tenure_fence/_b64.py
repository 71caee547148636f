"""Base64url without padding (RFC 4648 section 5), strictly.

Python's :mod:`base64` is lenient where the proof format is not: it needs
the padding back, it silently drops characters outside the alphabet (so a
``+`` or ``/`` would slip through the URL-safe decoder) and it ignores the
unused low bits of the last character. This module accepts exactly the text
:func:`encode` produces for some bytes, and nothing else, which is what the
Rust reference (the ``base64`` crate's ``URL_SAFE_NO_PAD``) accepts.
"""

from __future__ import annotations

import base64
import binascii
import re

#: The whole text must be made of these (no ``=``, no ``+`` or ``/``).
_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")


def encode(data: bytes) -> str:
    """The base64url text of `data`, without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def decode(text: str) -> bytes:
    """The bytes of a base64url text without padding.

    Raises:
        ValueError: a character outside the URL-safe alphabet (padding
            included), an impossible length, or non-zero unused bits in the
            last character (a second spelling of the same bytes).
    """
    if _ALPHABET.fullmatch(text) is None:
        raise ValueError("not base64url without padding")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error:
        raise ValueError("not base64url without padding") from None
    if encode(raw) != text:
        raise ValueError("not base64url without padding (non-canonical last character)")
    return raw
