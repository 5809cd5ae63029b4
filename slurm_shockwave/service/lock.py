"""One service instance at a time: an exclusive flock that dies with the process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from slurm_shockwave.model.errors import InputError


class AlreadyRunning(RuntimeError):
    """Another process holds the store's lock."""


def lock_path(store_path: str) -> Path:
    """``<store>.lock`` beside the store's real file: two paths to one store (a symlink
    to it or to its folder) share one lock, so two services cannot both write it."""
    return Path(f"{os.path.realpath(store_path)}.lock")


class ServiceLock:
    """``flock`` on ``<store>.lock``: the kernel drops it when the process dies, even on
    kill -9, so a crashed service never blocks its restart."""

    def __init__(self, store_path: str) -> None:
        self.store_path = store_path
        self.path = lock_path(store_path)
        self._fd: int | None = None

    def acquire(self) -> ServiceLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only folder, a file where the folder should be
            raise InputError(f"cannot make its lock file {self.path} "
                             f"({exc.strerror or exc})", source=self.store_path,
                             field="service.store") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(f"another shockwave service holds {self.path} "
                                 f"(pid {holder}); one instance at a time") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ServiceLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def lock_holder(store_path: str) -> int | None:
    """The pid holding the service's lock, read from /proc/locks without taking the lock
    (so asking never makes a starting service fail); None when nobody holds it."""
    try:
        inode = os.stat(lock_path(store_path)).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4]) if fields[4].isdigit() else -1
    return None
