#!/usr/bin/env bash
# Packages the cross-built libraries of build/wheels/PLATFORM/ into dist/ (make wheels): the README's
# `pip wheel . --no-build-isolation --no-deps --no-index` once per platform, with setup.py's
# DCC_FLOW_WHEEL_PLATFORM / DCC_FLOW_WHEEL_LIBRARY naming the tag and the library to ship.
# The Linux tags are written as auditwheel writes them: the PEP 600 name and the PEP 599 alias
# (manylinux_2_17_x86_64.manylinux2014_x86_64), so old and new pips both accept the wheel.
#   scripts/wheels/package.sh PLATFORM...
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEEL_PY=${WHEEL_PY:-.venv-wheels/bin/python}
mkdir -p dist
for platform in "$@"; do
  case "$platform" in
    manylinux2014_x86_64)  tag=manylinux_2_17_x86_64.manylinux2014_x86_64   lib=libdccflow.so ;;
    manylinux2014_aarch64) tag=manylinux_2_17_aarch64.manylinux2014_aarch64 lib=libdccflow.so ;;
    macosx_*)              tag=$platform lib=libdccflow.dylib ;;
    win_amd64)             tag=$platform lib=dccflow.dll ;;
    *) echo "package.sh: unknown platform $platform" >&2; exit 2 ;;
  esac
  rm -f dist/dcc_flow-*-py3-none-*"$platform".whl
  DCC_FLOW_WHEEL_PLATFORM=$tag DCC_FLOW_WHEEL_LIBRARY=$PWD/build/wheels/$platform/$lib PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$WHEEL_PY" -m pip wheel . --quiet --no-build-isolation --no-deps --no-index -w dist
done
ls -l dist/*.whl
