"""One service instance at a time: an exclusive flock that dies with the process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service.store import StoreGone


class AlreadyRunning(RuntimeError):
    """Another process holds one of the service's locks (``path``)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def lock_path(store_path: str) -> Path:
    """``<store>.lock`` beside the store's real file: two paths to one store (a symlink
    to it or to its folder) share one lock, so two services cannot both write it."""
    return Path(f"{os.path.realpath(store_path)}.lock")


def heartbeat_identity(heartbeat: str) -> Path:
    """The file a heartbeat path writes: its name in its folder's real path, not the
    file's real path, since each write replaces the file (a symlink there becomes a
    plain file)."""
    folder, name = os.path.split(os.path.abspath(heartbeat))
    return Path(os.path.realpath(folder)) / name


def heartbeat_lock_path(heartbeat: str) -> Path:
    """``<heartbeat>.lock`` beside the file that path writes (heartbeat_identity)."""
    found = heartbeat_identity(heartbeat)
    return found.with_name(f"{found.name}.lock")


class ServiceLock:
    """``flock`` on ``<store>.lock`` and, for a service that writes a heartbeat, on
    ``<heartbeat>.lock``: one service per store, and one per heartbeat (a second writer
    would keep job_submit.lua holding new jobs after the first died, and `handback` with
    another store would remove a running service's heartbeat). The kernel drops a flock
    when the process dies, even on kill -9, so a crashed service never blocks its
    restart."""

    def __init__(self, store_path: str, heartbeat: str | None = None) -> None:
        self.store_path = store_path
        self.heartbeat = heartbeat
        self.path = lock_path(store_path)
        self._held: list[tuple[int, Path]] = []
        """Each lock file held: its open descriptor and its path."""

    def acquire(self) -> ServiceLock:
        self._held.append((_take(self.path, self.store_path, "service.store",
                                 "one instance at a time"), self.path))
        if self.heartbeat:
            beat = heartbeat_lock_path(self.heartbeat)
            try:
                self._held.append((_take(beat, self.heartbeat, "service.heartbeat",
                                         "one service per heartbeat"), beat))
            except BaseException:
                self.release()
                raise
        return self

    def check(self) -> None:
        """Raise StoreGone when a lock file this process holds was deleted or replaced:
        another service could take the new one and plan the same partition beside this
        one (a red-team: two services alternated rounds over one store, and `handback`
        ran under a live service). The service stops, as for a replaced store."""
        for fd, path in self._held:
            held = os.fstat(fd)
            try:
                now = os.stat(path)
            except OSError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                raise StoreGone(f"the lock file {path} was deleted or replaced while the "
                                "service held it (another service could now run beside "
                                "it); stopping: restart it once no other runs",
                                source=str(path), field="service.store")

    def release(self) -> None:
        for fd, _path in self._held:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._held = []

    def __enter__(self) -> ServiceLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _take(path: Path, source: str, field: str, rule: str) -> int:
    """The open, exclusively locked ``path`` (the holder's pid written in it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # a read-only folder, a file where the folder should be
        raise InputError(f"cannot make its lock file {path} ({exc.strerror or exc})",
                         source=source, field=field) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyRunning(f"another shockwave service holds {path} (pid {holder}); "
                             f"{rule}", path) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def lock_holder(store_path: str) -> int | None:
    """The pid holding the service's lock, read from /proc/locks without taking the lock
    (so asking never makes a starting service fail); None when nobody holds it."""
    try:
        st = os.stat(lock_path(store_path))
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    return holder_in(lines, st.st_dev, st.st_ino)


def holder_in(lines: list[str], dev: int, inode: int) -> int | None:
    """The pid of the flock on file ``dev``/``inode`` among /proc/locks' ``lines``
    (``1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF``, the numbers of
    the device in hex): the device too, since a file of another file system (a tmpfs,
    another disk) may have the same inode number; -1 when the pid is not shown."""
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        where = fields[5].split(":")
        try:
            found = (int(where[0], 16), int(where[1], 16), int(where[2]))
        except (ValueError, IndexError):
            continue
        if found == (os.major(dev), os.minor(dev), inode):
            return int(fields[4]) if fields[4].isdigit() else -1
    return None
