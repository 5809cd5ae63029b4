"""Whether a program root runs is one only root can change.

The Epilog runs ``shockwave`` as root on every node after every job. ``install-scripts``
writes the path of the ``shockwave`` beside the Python it runs under: in a virtualenv a
user owns (``sudo ~/venv/bin/shockwave install-scripts``), that user could change the
script, its interpreter or the package it imports, and get root on every node (found by
a red-team of the plugin scripts). The install is refused unless every one of them, and
every folder above each, is root's and writable by nobody else.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import slurm_shockwave


def _folders_and_self(path: Path) -> Iterator[Path]:
    """``path`` and each folder above it, from the top down."""
    yield from reversed(path.parents)
    yield path


def changeable_by_others(path: str | Path) -> str | None:
    """Why someone other than root could change what ``path`` names, or None.

    Checked as named (each component, a symlink itself included) and resolved: each must
    be owned by root and writable by nobody else (a group write only for root's group);
    a sticky folder others may write (/tmp) is fine, since only its entries' owners may
    replace them, and those are checked next."""
    named = Path(os.path.abspath(path))
    for chain, look in ((named, os.lstat), (Path(os.path.realpath(named)), os.stat)):
        for p in _folders_and_self(chain):
            try:
                st = look(p)
            except OSError as exc:
                return f"{p}: {exc.strerror}"
            if st.st_uid != 0:
                return f"{p} is owned by uid {st.st_uid}"
            if stat.S_ISLNK(st.st_mode):
                continue  # a link's own mode means nothing; its folder and target do
            if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
                continue
            if st.st_mode & stat.S_IWOTH:
                return f"{p} is writable by anyone"
            if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
                return f"{p} is writable by group {st.st_gid}"
    return None


def interpreter(script: str | Path) -> str | None:
    """The program a ``#!`` line names (through ``/usr/bin/env NAME``), or None."""
    try:
        with open(script, "rb") as f:
            line = f.readline(512)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[-1])
    return words[0]


def root_only_problem(program: str) -> str | None:
    """Why root running ``program`` (a ``shockwave`` console script) could run code
    another user wrote: the script, its interpreter, or the package it imports (this
    one, every file in it). None when only root can change any of them."""
    package = Path(slurm_shockwave.__file__).parent
    targets = [Path(program), *([Path(i)] if (i := interpreter(program)) else []), package]
    targets += sorted(package.rglob("*"))  # __pycache__ too: bytecode runs as well
    for target in targets:
        problem = changeable_by_others(target)
        if problem:
            return problem
    return None
