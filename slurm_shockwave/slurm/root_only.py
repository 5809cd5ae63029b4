"""Whether a program root runs is one only root can change.

The Epilog runs ``shockwave`` as root on every node after every job. ``install-scripts``
writes the path of the ``shockwave`` beside the Python it runs under: in a virtualenv a
user owns (``sudo ~/venv/bin/shockwave install-scripts``), that user could change the
script, its interpreter or what it imports, and get root on every node (found by a
red-team of the plugin scripts). The install is refused, and doctor fails, unless the
script, its Python, every folder that Python imports from (its ``sys.path``, what
``.pth`` files add, the ``slurm_shockwave`` package) with everything in them, and every
folder above each, are root's and writable by nobody else: no group but root's, no
other, no POSIX ACL entry that grants a write. Above them, a sticky folder others may
write (/tmp) is fine, since only its entries' owners may replace them.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
import struct
import subprocess
from pathlib import Path

_ACL = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP, _ACL_MASK = 0x02, 0x08, 0x10
_WRITE = 0x02
# what the Python the Epilog runs imports from, asked of it as the Epilog runs it (no
# environment), first without site (which runs code of the site folders, not checked
# yet): its sys.path, its site folders (a venv's own: under -S, sys.prefix is the base's)
# and the folders their .pth files add
_PATHS = """
import json, os, site, sys
prefix = os.path.dirname(os.path.dirname(sys.executable))
venv = [prefix] if os.path.exists(os.path.join(prefix, "pyvenv.cfg")) else []
sites = site.getsitepackages(venv) + site.getsitepackages()
added = []
for d in sites:
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".pth"))
    except OSError:
        continue
    for n in names:
        with open(os.path.join(d, n), errors="replace") as f:
            added += [os.path.join(d, line.strip()) for line in f
                      if line.strip() and not line.startswith(("#", "import"))]
print(json.dumps(sys.path + sites + added))
"""
_PACKAGE = ("import importlib.util, json; s = importlib.util.find_spec('slurm_shockwave'); "
            "print(json.dumps(list(s.submodule_search_locations or []) if s else []))")
_MAX_ENTRIES = 500_000
"""Files and folders walked at most: a larger tree is refused, not walked for minutes."""


def _acl_write(path: Path) -> bool:
    """Whether a POSIX ACL entry of ``path`` lets a named user or group other than root
    write it (the mode bits show only the mask)."""
    try:
        raw = os.getxattr(path, _ACL, follow_symlinks=False)
    except OSError:
        return False  # none, or a file system without ACLs
    entries = [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), _WRITE)
    return bool(mask & _WRITE) and any(tag in (_ACL_USER, _ACL_GROUP) and perm & _WRITE
                                       and ident != 0 for tag, perm, ident in entries)


ROOT = frozenset({0})


def _writable_by_others(p: Path, st: os.stat_result, *, sticky_ok: bool,
                        owners: frozenset[int] = ROOT) -> str | None:
    if st.st_uid not in owners:
        return f"{p} is owned by uid {st.st_uid}"
    if stat.S_ISLNK(st.st_mode):
        return None  # a link's own mode means nothing; its folder and target do
    if sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & stat.S_IWOTH:
        return f"{p} is writable by anyone"
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"{p} is writable by group {st.st_gid}"
    if _acl_write(p):
        return f"{p} has an ACL entry that lets another user or group write it"
    return None


def changeable_by_others(path: str | Path, owners: frozenset[int] = ROOT) -> str | None:
    """Why someone other than root (or ``owners``: SlurmUser for job_submit.lua, which it
    runs) could change what ``path`` names, or None: checked as named (each component, a
    symlink itself included) and resolved. Writable by a group other than root's, or by
    anyone, is never fine, whoever owns it."""
    named = Path(os.path.abspath(path))
    for chain, look in ((named, os.lstat), (Path(os.path.realpath(named)), os.stat)):
        for p in (*reversed(chain.parents), chain):
            try:
                st = look(p)
            except OSError as exc:
                return f"{p}: {exc.strerror}"
            problem = _writable_by_others(p, st, sticky_ok=p != chain, owners=owners)
            if problem:
                return problem
    return None


def _tree_problem(top: Path, budget: list[int]) -> str | None:
    """``top`` and the folders above it (``changeable_by_others``), then everything in
    it, links' targets included."""
    problem = changeable_by_others(top)
    if problem or not top.is_dir():
        return problem
    for here, dirs, names in os.walk(top, onerror=None):
        for name in (*dirs, *names):
            budget[0] -= 1
            if budget[0] < 0:
                return f"over {_MAX_ENTRIES:,} files to check under {top}"
            p = Path(here, name)
            try:
                st = os.lstat(p)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue
                return f"{p}: {exc.strerror}"
            problem = (changeable_by_others(p) if stat.S_ISLNK(st.st_mode)
                       else _writable_by_others(p, st, sticky_ok=False))
            if problem:
                return problem
    return None


def interpreter(script: str | Path) -> str | None:
    """The Python a console script runs: its ``#!`` line (``/usr/bin/env NAME`` looked up
    on the Epilog's own PATH), or the ``exec`` line of pip's ``#!/bin/sh`` header for
    long paths; None when it names none."""
    try:
        with open(script, "rb") as f:
            head = f.read(4096).decode(errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words and os.path.basename(words[0]) == "sh" and len(head) > 1 \
            and head[1].startswith("'''exec' "):
        try:  # the words before "$0": the program, and env's name for it
            words = shlex.split(head[1].removeprefix("'''exec' "))
        except ValueError:
            return None
        words = words[:words.index("$0")] if "$0" in words else words[:1]
    if words and os.path.basename(words[0]) == "env":
        name = next((w for w in words[1:] if not w.startswith("-")), None)
        for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
            if name and os.access(os.path.join(folder, name), os.X_OK):
                return os.path.join(folder, name)
        return None
    return words[0] if words else None


def _ask(python: str, code: str, *, site: bool) -> list[str] | None:
    """A list of paths ``python`` prints, run as the Epilog runs it (isolated, no
    environment); None when it says none."""
    try:
        done = subprocess.run([python, "-I", *([] if site else ["-S"]), "-c", code], env={},
                              capture_output=True, text=True, timeout=60, check=False)
        found = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else None


def root_only_problem(program: str) -> str | None:
    """Why root running ``program`` (a ``shockwave`` console script) could run code
    another user can change; None when only root can change any of it."""
    python = interpreter(program)
    if python is None:
        return f"{program} names no Python to run (no #! line)"
    for path in (program, python):
        problem = changeable_by_others(path)
        if problem:
            return problem
    roots = _ask(python, _PATHS, site=False)
    if roots is None:
        return f"{python} did not say where it imports from"
    budget = [_MAX_ENTRIES]
    walked: list[Path] = []
    for root in dict.fromkeys(os.path.realpath(p) for p in roots if p):
        folder = Path(root)
        if not folder.exists() or any(folder.is_relative_to(w) for w in walked):
            continue
        problem = _tree_problem(folder, budget)
        if problem:
            return problem
        walked.append(folder)
    # the site folders are safe to run now: where the package is, .pth files included
    package = _ask(python, _PACKAGE, site=True)
    if not package:
        return f"{python} does not import slurm_shockwave"
    for location in map(os.path.realpath, package):
        if not any(Path(location).is_relative_to(w) for w in walked):
            problem = _tree_problem(Path(location), budget)
            if problem:
                return problem
    return None
