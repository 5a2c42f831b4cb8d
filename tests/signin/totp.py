"""RFC 6238 codes computed by the tests themselves, as an authenticator app would from the enrolment secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time


def totp(secret: str, *, at: float | None = None, step: int = 30, digits: int = 6) -> str:
    counter = int((time.time() if at is None else at) // step)
    digest = hmac.new(base64.b32decode(secret, casefold=True), struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    value = (struct.unpack(">I", digest[offset:offset + 4])[0] & 0x7FFFFFFF) % 10**digits
    return f"{value:0{digits}d}"
