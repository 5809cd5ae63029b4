"""Result files written whole where that is safe.

A run's CSV, JSON, trace or plot goes to a new temporary file beside its target and is
renamed onto it once complete, so a full disk or a failed write leaves the previous
file as it was, not a truncated one (a crash of the machine itself may still: nothing
is fsynced). The rename is used only where it changes nothing else about the target:
a new file, or a regular file of ours with one link, which keeps its mode. Anything
else is written in place, as before: a symlink, a device (``/dev/stdout``) or a FIFO, a
hard-linked file, another user's file, a folder where no temporary file can be made
(read-only, or a name too long for the prefix), and a target the rename cannot replace
(a single-file bind mount).

Inside ``as_set()`` the renames wait for the block's end: where any write of the set
fails, none of its files is replaced (compare's results.json, per-job CSVs and plots).
The renames then run one by one, the first file written last, so a rename that fails
(rare: the folder changed under the run) or an interrupt among them can leave the later
files new and the first one old: a new first file (compare's results.json) means every
file of the set is new. Targets written in place are written at once, set or not.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

PLOTS = ("jct_cdf.png", "rho_cdf.png", "gpus_busy.png")
"""The files ``report.plots.write_plots`` writes (here, so a caller can check them without
importing matplotlib)."""

_IN_PLACE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG}
"""Errors making the temporary file that mean: write the target in place instead."""
_NO_RENAME = {errno.EBUSY, errno.EXDEV}
"""Errors renaming onto the target that mean: copy over it instead."""


_NEW = -1
"""``_kept_mode`` of a target that does not exist yet."""


def _kept_mode(path: Path) -> int | None:
    """The mode a temporary renamed onto ``path`` must have (``_NEW``: a new file's), or
    None where ``path`` is written in place (module docstring). One ``lstat``."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return _NEW
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
        return None  # a symlink (lstat), a device or FIFO, a hard link, another's file
    return stat.S_IMODE(st.st_mode)


def _new_temporary(path: Path, mode: int) -> Path | None:
    """A new file beside ``path`` with ``mode`` (``_NEW``: 0666 less the umask, as
    ``open`` gives); None where none can be made there."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        if exc.errno in _IN_PLACE:
            return None
        raise
    try:
        if mode != _NEW:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return tmp


class _Set:
    """An open ``as_set()``: the temporaries waiting for their renames, by target, and
    whether a write inside failed (then none is renamed)."""

    def __init__(self) -> None:
        self.pending: dict[Path, Path] = {}
        self.failed = False

    def discard(self) -> None:
        for tmp in self.pending.values():
            tmp.unlink(missing_ok=True)
        self.pending.clear()

    def commit(self) -> None:
        """Rename every temporary onto its target, the first written last."""
        try:
            for path, tmp in list(self.pending.items())[::-1]:
                del self.pending[path]
                _rename(tmp, path)
        finally:
            self.discard()


_SET: ContextVar[_Set | None] = ContextVar("_SET", default=None)
"""The open ``as_set()``, if any."""


@contextmanager
def as_set() -> Iterator[None]:
    """Every ``replacing`` inside renames its temporary when this block ends, and none
    does if the block raises or a write inside it failed, even one caught inside (module
    docstring). A nested block joins the outer."""
    if _SET.get() is not None:
        yield
        return
    group = _Set()
    token = _SET.set(group)
    try:
        yield
    except BaseException:
        group.discard()
        raise
    finally:
        _SET.reset(token)
    if group.failed:
        group.discard()
    else:
        group.commit()


def _start(path: Path) -> Path | None:
    """The temporary to write ``path``'s content to, or None: write it in place."""
    try:
        mode = _kept_mode(path)
        return None if mode is None else _new_temporary(path, mode)
    except OSError as exc:  # a missing folder, say: the target's error, not the temporary's
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _rename(tmp: Path, path: Path) -> None:
    """``tmp`` onto ``path`` (copied where a rename cannot replace it); ``tmp`` is gone
    after, whether or not that worked."""
    try:
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if exc.errno not in _NO_RENAME:
                raise
            shutil.copyfile(tmp, path)
    except OSError as exc:
        raise _named(exc, tmp, path) from None
    finally:
        tmp.unlink(missing_ok=True)


def _named(exc: BaseException, tmp: Path, path: Path) -> BaseException:
    """``exc`` naming ``path`` where it named the temporary ``tmp``."""
    if isinstance(exc, OSError) and exc.filename is not None and Path(exc.filename) == tmp:
        return OSError(exc.errno, exc.strerror, str(path))
    return exc


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """The path to write ``path``'s new content to: a temporary file renamed onto it when
    the block ends (removed if the block raises), or ``path`` itself (module docstring);
    inside ``as_set()``, renamed when that ends (a path written twice in a set keeps its
    last content). An error names ``path``, never the temporary file."""
    tmp = _start(path)
    if tmp is None:
        yield path
        return
    group = _SET.get()
    try:
        yield tmp
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if group is not None:
            group.failed = True
        named = _named(exc, tmp, path)
        if named is exc:
            raise
        raise named from None
    if group is not None:
        earlier = group.pending.pop(path, None)
        if earlier is not None:
            earlier.unlink(missing_ok=True)
        group.pending[path] = tmp
        return
    _rename(tmp, path)


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
