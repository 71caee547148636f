"""The Ed25519 point checks that make verification strict.

:mod:`cryptography` verifies with OpenSSL, which rejects a non-canonical
``S`` and compares ``R`` byte for byte, but accepts a small-order public key
or ``R``: with the identity as public key, the signature ``R = identity,
S = 0`` verifies for *every* message. The Rust reference verifies with
ed25519-dalek's ``verify_strict``, which refuses both. This module decodes a
point as dalek does and says whether it has small order, so the Python
verifier refuses exactly what the reference refuses.

Plain integer arithmetic: it runs on public data only (keys and signature
bytes), so it needs no constant-time care.
"""

from __future__ import annotations

#: The field prime 2^255 - 19.
_P = 2**255 - 19
#: The curve constant d = -121665/121666.
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
#: A square root of -1 in the field.
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)

#: A point in extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z.
Point = tuple[int, int, int, int]


def decompress(encoded: bytes) -> Point | None:
    """The point a 32-byte encoding names, or None when it names none.

    As ed25519-dalek decodes: the y coordinate is taken modulo p (a
    non-canonical y is accepted) and the sign bit of a zero x is ignored.
    """
    if len(encoded) != 32:
        return None
    value = int.from_bytes(encoded, "little")
    sign = value >> 255
    y = (value & ((1 << 255) - 1)) % _P
    # x^2 = (y^2 - 1) / (d y^2 + 1)
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = (u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P)) % _P
    check = (v * x * x) % _P
    if check == (-u) % _P:
        x = (x * _SQRT_M1) % _P
    elif check != u:
        return None
    if x & 1 != sign:
        x = (-x) % _P
    return (x, y, 1, (x * y) % _P)


def _double(point: Point) -> Point:
    """2P (the doubling of Hisil-Wong-Carter-Dawson 2008 for a = -1; it has
    no exceptional case on this curve)."""
    x1, y1, z1, _ = point
    a = x1 * x1 % _P
    b = y1 * y1 % _P
    c = 2 * z1 * z1 % _P
    d = -a % _P
    e = ((x1 + y1) * (x1 + y1) - a - b) % _P
    g = (d + b) % _P
    f = (g - c) % _P
    h = (d - b) % _P
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def is_small_order(point: Point) -> bool:
    """Whether 8P is the identity: P is one of the 8 points of order 1, 2,
    4 or 8, which a strict verifier refuses as a public key or as ``R``."""
    for _ in range(3):
        point = _double(point)
    x, y, z, _ = point
    return x == 0 and y == z
