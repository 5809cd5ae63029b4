"""MUNGE credentials: who sent a request, decoded by the local munged.

``decode`` asks munged (through libmunge.so.2 with ctypes: no fork per request; else the
``unmunge`` command) for the uid, gid and payload of a credential. munged itself refuses a
credential decoded before (``EMUNGE_CRED_REPLAYED``), an expired one, one from another key
or a forged one: each raises :class:`MungeError` with munged's own words. ``encode`` makes
a credential as the calling process's uid (the answers' credential, tests, benchmarks).
libmunge is loaded and called through the job-side client's stdlib functions
(``reporter.munge_library``, ``lib_encode``, ``lib_decode``): one copy of the ctypes
prototypes and of the memory each call hands back."""

from __future__ import annotations

import subprocess
from typing import Any, NamedTuple

from slurm_shockwave.client import reporter

EMUNGE_SNAFU = 1
EMUNGE_CRED_EXPIRED = 15
EMUNGE_CRED_REWOUND = 16
EMUNGE_CRED_REPLAYED = 17

MAX_CRED_CHARS = 8192


class MungeError(RuntimeError):
    """A credential munged would not vouch for (or munged could not be asked)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def unavailable(self) -> bool:
        """munged (or its command) could not be asked: an internal error, no memory, its
        socket, a timeout (munge.h's 1, 5, 6, 7). Not the credential's fault."""
        return self.code in (EMUNGE_SNAFU, 5, 6, 7)


class Decoded(NamedTuple):
    uid: int
    gid: int
    payload: bytes


def _libmunge() -> Any:
    """``(libmunge, libc)``, or None: the client's loader (``reporter.munge_library``)."""
    return reporter.munge_library()


def backend() -> str:
    """``libmunge`` or ``unmunge``: how credentials are decoded here."""
    return "libmunge" if _libmunge() is not None else "unmunge"


def _strerror(lib: Any, code: int) -> str:
    text = lib[0].munge_strerror(code)
    return text.decode(errors="replace") if text else f"munge error {code}"


def encode(payload: bytes = b"") -> str:
    """A fresh credential for ``payload`` as this process's uid."""
    lib = _libmunge()
    if lib is None:
        return _encode_cmd(payload)
    code, cred = reporter.lib_encode(lib, payload)
    if code != 0 or cred is None:
        raise MungeError(f"munge_encode: {_strerror(lib, code)}", code)
    return cred


def decode(cred: str) -> Decoded:
    """uid, gid and payload of ``cred``; MungeError if munged refuses it (bad, expired,
    replayed, rewound, unauthorized) or cannot be reached."""
    if not cred or len(cred) > MAX_CRED_CHARS or not cred.isascii() or "\n" in cred:
        raise MungeError("not a MUNGE credential")
    lib = _libmunge()
    if lib is None:
        return _decode_cmd(cred)
    code, uid, gid, payload = reporter.lib_decode(lib, cred)
    if code != 0:
        raise MungeError(_strerror(lib, code), code)
    return Decoded(uid, gid, payload)


def _encode_cmd(payload: bytes) -> str:
    try:
        out = subprocess.run(["munge"], input=payload, capture_output=True, timeout=5,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MungeError(f"munge: {exc}") from None
    if out.returncode != 0:
        raise MungeError(f"munge: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout.decode("ascii").strip()


def _decode_cmd(cred: str) -> Decoded:
    """``unmunge`` (metadata keys uid, gid; payload after the blank line; its exit status
    is munged's error code)."""
    try:
        out = subprocess.run(["unmunge", "--keys=UID,GID", "--numeric"],
                             input=cred.encode("ascii"), capture_output=True, timeout=5,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MungeError(f"unmunge: {exc}", EMUNGE_SNAFU) from None
    head, _, payload = out.stdout.partition(b"\n\n")
    meta = dict(line.split(":", 1) for line in head.decode(errors="replace").splitlines()
                if ":" in line)
    if out.returncode != 0:
        text = out.stderr.decode(errors="replace").strip().removeprefix("unmunge: Error: ")
        raise MungeError(text or f"unmunge exited {out.returncode}", out.returncode)
    try:
        return Decoded(int(meta["UID"].strip()), int(meta["GID"].strip()), payload)
    except (KeyError, ValueError):
        raise MungeError("unmunge: unexpected output") from None
