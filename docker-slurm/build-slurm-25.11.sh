#!/usr/bin/env bash
# Build Slurm 25.11 from source into its own prefix and pyslurm 25.11 against it into a
# separate directory, so the pyslurm backend can run for real: PyPI's pyslurm exists only
# for Slurm 25.11, and Debian ships 22.05 (bookworm), 24.11 (trixie) and 26.05, never
# 25.11. The machine's own Slurm (Debian's 22.05, the main test bed) is left untouched.
#
#   bash docker-slurm/build-slurm-25.11.sh [--tarball PATH] [--prefix /opt/slurm-25.11]
#   eval "$(bash docker-slurm/build-slurm-25.11.sh ...)"   # then start.sh runs 25.11
#
# The Slurm source cannot be downloaded here (no internet beyond PyPI and Debian's apt,
# and neither has 25.11's source), so the tarball is an input: --tarball, else
# $SHOCKWAVE_SLURM_TARBALL, else ../shared/vendor/slurm-25.11.7.tar.bz2 beside the
# checkout. Without it the script prints one line saying so and exits 3 (nothing built).
# Idempotent: each step leaves a stamp in the prefix and is skipped when its stamp
# matches the tarball's sha256 (Slurm about 5 minutes on 2 cores, pyslurm about 4).
# Prints, last, the export line for PATH, LD_LIBRARY_PATH and PYTHONPATH (pyslurm), and
# SHOCKWAVE_SLURM_25_11 (the prefix; tests/test_backend_choice.py reads it).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
TARBALL="${SHOCKWAVE_SLURM_TARBALL:-$REPO/../shared/vendor/slurm-25.11.7.tar.bz2}"
PREFIX=/opt/slurm-25.11
PYSLURM_SPEC="pyslurm>=25.11,<25.12"

die() { echo "build-slurm-25.11.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --tarball) TARBALL="$2"; shift 2 ;;
    --prefix) PREFIX="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$PREFIX" = /* ]] || die "--prefix must be an absolute path"
if [ ! -f "$TARBALL" ]; then
  echo "build-slurm-25.11.sh: no Slurm 25.11 source at $TARBALL (pass --tarball or set SHOCKWAVE_SLURM_TARBALL; it cannot be downloaded here); nothing built" >&2
  exit 3
fi
SUM="$(sha256sum "$TARBALL" | cut -d' ' -f1)"
SITE="$PREFIX/pyslurm-site"
LOG="$PREFIX/build.log"
exports() {
  echo "export SHOCKWAVE_SLURM_25_11=$PREFIX PATH=$PREFIX/sbin:$PREFIX/bin:\$PATH LD_LIBRARY_PATH=$PREFIX/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} PYTHONPATH=\${PYTHONPATH:+\$PYTHONPATH:}$SITE"
}
stamped() { [ "$(cat "$PREFIX/.stamp-$1" 2>/dev/null)" = "$SUM" ]; }

if stamped slurm && stamped pyslurm; then
  echo "build-slurm-25.11.sh: Slurm and pyslurm already built in $PREFIX (stamps match $TARBALL)" >&2
  exports; exit 0
fi
[ "$(id -u)" = 0 ] || die "must run as root (installs build dependencies with apt-get)"
mkdir -p "$PREFIX"
# one build of a prefix at a time (two checkouts testing at once share it); the one that
# waited finds the other's stamps
exec 9>"$PREFIX/.build.lock"
flock 9
if stamped slurm && stamped pyslurm; then exports; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
deps=(libmunge-dev liblua5.1-0-dev libjson-c-dev libhttp-parser-dev libyaml-dev pkg-config
      build-essential munge lua5.1 bzip2 python3-dev python3-pip)
missing=()
for p in "${deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "build-slurm-25.11.sh: apt-get install ${missing[*]}" >&2
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! stamped slurm; then
  echo "build-slurm-25.11.sh: building Slurm from $TARBALL into $PREFIX (log: $LOG)" >&2
  SRC="$(mktemp -d /tmp/slurm-25.11-src.XXXXXX)"
  trap 'rm -rf "$SRC"' EXIT
  tar xjf "$TARBALL" -C "$SRC" --strip-components=1
  (cd "$SRC" \
    && ./configure --prefix="$PREFIX" --sysconfdir="$PREFIX/etc" --disable-debug \
    && make -j"$(nproc)" && make install) >"$LOG" 2>&1 \
    || { tail -20 "$LOG" >&2; die "Slurm build failed (full log: $LOG)"; }
  # The job_submit plugin the project's cluster uses must exist, or start.sh's cluster
  # would run without its submit hook (configure drops it silently without Lua headers).
  [ -e "$PREFIX/lib/slurm/job_submit_lua.so" ] || die "Slurm built without job_submit/lua (liblua5.1-0-dev missing?)"
  echo "$SUM" >"$PREFIX/.stamp-slurm"
  rm -f "$PREFIX/.stamp-pyslurm"
fi

if ! stamped pyslurm; then
  echo "build-slurm-25.11.sh: building $PYSLURM_SPEC against $PREFIX into $SITE" >&2
  rm -rf "$SITE"
  SLURM_INCLUDE_DIR="$PREFIX/include" SLURM_LIB_DIR="$PREFIX/lib" \
    python3 -m pip install -q --disable-pip-version-check --no-binary pyslurm \
      --target "$SITE" "$PYSLURM_SPEC" >>"$LOG" 2>&1 \
    || { tail -20 "$LOG" >&2; die "pyslurm build failed (full log: $LOG)"; }
  echo "$SUM" >"$PREFIX/.stamp-pyslurm"
fi
echo "build-slurm-25.11.sh: done; $(LD_LIBRARY_PATH=$PREFIX/lib "$PREFIX/sbin/slurmd" -V) in $PREFIX" >&2
exports
