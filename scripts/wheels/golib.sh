#!/usr/bin/env bash
# Cross-builds the native library for one wheel platform (make wheels):
#   scripts/wheels/golib.sh PLATFORM   ->   build/wheels/PLATFORM/<library file>
# PLATFORM is a wheel platform tag of the table below. The C toolchain of cgo is Zig from PyPI's
# `ziglang` (in $WHEEL_PY's venv, pinned in the Makefile) for Linux and macOS, and Debian's
# gcc-mingw-w64 (win32 threads: no libwinpthread-1.dll to ship) for Windows.
#   - Linux: `-target <arch>-linux-gnu.2.17` links against glibc 2.17's symbol versions (manylinux2014).
#   - macOS: `-target <arch>-macos.<min>` plus link stubs of the system libraries Go links
#     (scripts/wheels/darwin_stubs.py); install name @loader_path/libdccflow.dylib.
set -euo pipefail
cd "$(dirname "$0")/../.."
platform=${1:?usage: golib.sh PLATFORM}
WHEEL_PY=${WHEEL_PY:-.venv-wheels/bin/python}
GO=${GO:-go}
out=build/wheels/$platform
mkdir -p "$out"

if [ "$platform" = macosx_10_15_universal2 ]; then
  # One dylib for both Mac processors (a share's mac/ folder then serves Intel and Apple Silicon):
  # the two thin builds joined by lipo (LLVM's, from Debian's llvm); each slice keeps its own
  # load commands and the arm64 one its code signature.
  lipo=$(command -v llvm-lipo || ls /usr/bin/llvm-lipo-* /usr/lib/llvm-*/bin/llvm-lipo 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$lipo" ] || { echo "golib.sh: llvm-lipo not found: apt-get install llvm" >&2; exit 1; }
  "$lipo" -create build/wheels/macosx_11_0_arm64/libdccflow.dylib build/wheels/macosx_10_15_x86_64/libdccflow.dylib \
    -output "$out/libdccflow.dylib"
  echo "golib.sh: $out/libdccflow.dylib ($(( $(stat -c %s "$out/libdccflow.dylib") / 1024 )) KiB, lipo of arm64 + x86_64)"
  exit 0
fi

ldflags=()
cflags=()
case "$platform" in
  manylinux2014_x86_64)  goos=linux   goarch=amd64 zig=x86_64-linux-gnu.2.17  lib=libdccflow.so ;;
  manylinux2014_aarch64) goos=linux   goarch=arm64 zig=aarch64-linux-gnu.2.17 lib=libdccflow.so ;;
  macosx_10_15_x86_64)   goos=darwin  goarch=amd64 zig=x86_64-macos.10.15     lib=libdccflow.dylib ;;
  macosx_11_0_arm64)     goos=darwin  goarch=arm64 zig=aarch64-macos.11.0     lib=libdccflow.dylib ;;
  win_amd64)             goos=windows goarch=amd64 zig=""                     lib=dccflow.dll ;;
  *) echo "golib.sh: unknown platform $platform (known: manylinux2014_x86_64 manylinux2014_aarch64" \
          "macosx_10_15_x86_64 macosx_11_0_arm64 macosx_10_15_universal2 win_amd64)" >&2; exit 2 ;;
esac

if [ -n "$zig" ]; then
  # cgo wants CC to be one command: a two-line wrapper around `python -m ziglang cc -target ...`.
  cc=$PWD/$out/zigcc
  printf '#!/bin/sh\nexec "%s" -m ziglang cc -target %s "$@"\n' "$(cd "$(dirname "$WHEEL_PY")" && pwd)/$(basename "$WHEEL_PY")" "$zig" > "$cc"
  chmod +x "$cc"
else
  cc=$(command -v x86_64-w64-mingw32-gcc-win32 || true)
  [ -n "$cc" ] || { echo "golib.sh: x86_64-w64-mingw32-gcc-win32 not found: apt-get install gcc-mingw-w64-x86-64-win32" >&2; exit 1; }
fi
case "$goos" in
  linux)  ldflags+=(-Wl,--strip-all) ;;
  darwin)
    "$WHEEL_PY" scripts/wheels/darwin_stubs.py "$($GO env GOROOT)" "$out/stubs" >/dev/null
    ldflags+=(-L"$PWD/$out/stubs" -F"$PWD/$out/stubs" -Wl,-install_name,@loader_path/libdccflow.dylib)
    # The one system header Zig's macOS set lacks (<mach/mach_vm.h>, for Prometheus' Go client):
    # scripts/wheels/darwin-include/mach/mach_vm.h says why and what it declares.
    cflags+=(-I"$PWD/scripts/wheels/darwin-include") ;;
  windows) ldflags+=(-Wl,--strip-all) ;;
esac

rm -f "$out/$lib"
start=$(date +%s)
# Zig's cache lives under build/ so a CI runner's home stays clean and `make clean` removes it.
ZIG_GLOBAL_CACHE_DIR=$PWD/build/wheels/zig-cache ZIG_LOCAL_CACHE_DIR=$PWD/build/wheels/zig-cache \
GOOS=$goos GOARCH=$goarch CGO_ENABLED=1 CC=$cc CGO_CFLAGS="-O2 -g ${cflags[*]}" CGO_LDFLAGS="${ldflags[*]}" \
  "$GO" build -trimpath -ldflags="-s -w" -buildmode=c-shared -o "$out/$lib" ./capi
rm -f "$out/${lib%.*}.h"
# Zig leaves an empty `-.o` in the working directory when the go command probes its flags (input `-`).
[ -f ./-.o ] && [ ! -s ./-.o ] && rm -f ./-.o
echo "golib.sh: $out/$lib ($(( $(stat -c %s "$out/$lib") / 1024 )) KiB, $(( $(date +%s) - start )) s)"
