#!/usr/bin/env bash
# make test-wheels: checks every wheel `make wheels` wrote to dist/ (docs/operations/wheels.md lists what each
# check proves). Stops at the first failure, naming the wheel, the check and what it saw.
#   scripts/wheels/test.sh PLATFORM...
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
WHEEL_PY=${WHEEL_PY:-.venv-wheels/bin/python}
BIN=$(cd "$(dirname "$WHEEL_PY")" && pwd)
PYENV_VERSIONS=${PYENV_ROOT:-$HOME/.pyenv}/versions
# The Pythons the x86_64 wheel is installed into: the oldest and the newest supported.
INSTALL_PYTHONS=${INSTALL_PYTHONS:-"3.7 3.13"}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dccflow-test-wheels.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

fail() { echo "test-wheels: FAIL: $*" >&2; exit 1; }
ok() { echo "test-wheels: ok: $*"; }
zigcc() { "$BIN/python" -m ziglang cc "$@"; }

# The exports the C header declares: every wheel's library must export all of them.
mapfile -t HEADER_SYMBOLS < <(grep -oE '\bdccflow_[a-z0-9_]+[[:space:]]*\(' capi/dccflow.h | tr -d '( ' | sort -u)
[ ${#HEADER_SYMBOLS[@]} -ge 30 ] || fail "read only ${#HEADER_SYMBOLS[@]} dccflow_* declarations from capi/dccflow.h"

wheel_of() {
  local found=(dist/dcc_flow-*-py3-none-*"$1".whl)
  [ ${#found[@]} -eq 1 ] && [ -f "${found[0]}" ] || fail "$1: expected one dist/dcc_flow-*-py3-none-*$1.whl, found: ${found[*]}"
  echo "${found[0]}"
}

# extract WHEEL -> the directory holding its dcc_flow/_lib/<library>
extract() {
  local dir=$TMP/unpacked/$(basename "$1" .whl)
  mkdir -p "$dir"
  "$WHEEL_PY" -m zipfile -e "$1" "$dir"
  echo "$dir/dcc_flow/_lib"
}

# exports_all PLATFORM NAMES_FILE: every header symbol is among the exported names.
exports_all() {
  local missing
  missing=$(printf '%s\n' "${HEADER_SYMBOLS[@]}" | sort -u | comm -23 - <(sort -u "$2"))
  [ -z "$missing" ] || fail "$1: does not export: $missing"
  ok "$1: exports all ${#HEADER_SYMBOLS[@]} dccflow_* functions of capi/dccflow.h"
}

# lipo_archs LIB: the architectures of a Mach-O file (Debian installs llvm-lipo with a version suffix).
lipo_archs() {
  local lipo
  lipo=$(command -v llvm-lipo || ls /usr/bin/llvm-lipo-* /usr/lib/llvm-*/bin/llvm-lipo 2>/dev/null | sort -V | tail -1)
  "$lipo" -archs "$1" | tr -s " " "\n" | grep . | sort | tr "\n" " " | sed "s/ $//"
}

# check_macho_slice PLATFORM LIB ARCH MINOS: one architecture of a macOS library, read with Debian's llvm.
check_macho_slice() {
  local platform=$1 lib=$2 arch=$3 minos=$4 what="$1 ($3)" desc id headers got used dep
  if [ "$platform" != macosx_10_15_universal2 ]; then
    desc=$(file -b "$lib")
    echo "$desc" | grep -qF "Mach-O 64-bit $arch dynamically linked shared library" || fail "$what: file says $desc"
    # NOUNDEFS|TWOLEVEL: every symbol is bound to the library that provides it.
    echo "$desc" | grep -q 'NOUNDEFS' && echo "$desc" | grep -q 'TWOLEVEL' || fail "$what: flags: $desc"
    ok "$what: $desc"
  else
    desc=$(llvm-objdump --macho --arch="$arch" --private-header "$lib")
    echo "$desc" | grep -q 'NOUNDEFS' && echo "$desc" | grep -q 'TWOLEVEL' || fail "$what: flags: $desc"
    ok "$what: slice flags NOUNDEFS TWOLEVEL"
  fi
  id=$(llvm-objdump --macho --arch="$arch" --dylib-id "$lib" | tail -1)
  [ "$id" = "@loader_path/libdccflow.dylib" ] || fail "$what: install name is $id, want @loader_path/libdccflow.dylib"
  ok "$what: install name $id"
  headers=$(llvm-objdump --macho --arch="$arch" --private-headers "$lib")
  got=$(echo "$headers" | grep -A4 'cmd LC_BUILD_VERSION' | awk '$1 == "minos" {print $2}')
  [ "$got" = "$minos" ] || fail "$what: LC_BUILD_VERSION minos is '$got', want $minos"
  ok "$what: minimum macOS $got"
  if [ "$arch" = arm64 ]; then  # Apple Silicon refuses to map unsigned code
    echo "$headers" | grep -q 'cmd LC_CODE_SIGNATURE' || fail "$what: no LC_CODE_SIGNATURE (ad-hoc signature)"
    ok "$what: ad-hoc code signature present"
  fi
  # The first entry of --dylibs-used is the library's own id (LC_ID_DYLIB).
  used=$(llvm-objdump --macho --arch="$arch" --dylibs-used "$lib" | tail -n +2 | awk '{print $1}' | grep -vxF "$id")
  for dep in $used; do
    case "$dep" in
      /usr/lib/*|/System/Library/Frameworks/*) ;;
      *) fail "$what: links $dep, which is not part of macOS" ;;
    esac
  done
  ok "$what: links only macOS system libraries: $(echo $used)"
  llvm-nm --arch="$arch" --extern-only --defined-only "$lib" | awk '{print $NF}' | sed 's/^_//' > "$TMP/$platform-$arch-exports"
  exports_all "$what" "$TMP/$platform-$arch-exports"
}

echo "== layout: one library per wheel, the right name for its tag, the same Python package in all"
"$WHEEL_PY" scripts/wheels/check_wheels.py dist "$@" || fail "wheel layout (above)"

# GLIBC versions: the checker must see the versions at all (a parse that finds nothing would pass
# anything), so it first has to refuse the x86_64 library against glibc 2.2.
glibc_check() { "$WHEEL_PY" scripts/wheels/check_glibc.py "$@"; }

for platform in "$@"; do
  wheel=$(wheel_of "$platform")
  echo "== $platform: $(basename "$wheel") ($(stat -c %s "$wheel") bytes)"
  case "$platform" in
  manylinux2014_*)
    arch=${platform#manylinux2014_}
    lib=$(extract "$wheel")/libdccflow.so
    case "$arch" in x86_64) want="ELF 64-bit LSB shared object, x86-64" ;; aarch64) want="ELF 64-bit LSB shared object, ARM aarch64" ;; esac
    file -b "$lib" | grep -qF "$want" || fail "$platform: file says $(file -b "$lib"), want $want"
    ok "$platform: $want"
    if glibc_check "$lib" 2.2 >/dev/null; then fail "check_glibc.py accepted $lib against glibc 2.2: it does not read the versions"; fi
    glibc_check "$lib" 2.17 || fail "$platform: a symbol newer than GLIBC_2.17 (above)"
    shown=$("$BIN/auditwheel" show "$wheel" 2>&1) || fail "$platform: auditwheel show: $shown"
    tag=$(echo "$shown" | tr -d '\n' | grep -oE '"manylinux_2_[0-9]+_[a-z0-9_]+"' | tr -d '"') || true
    minor=$(echo "$tag" | sed -nE "s/^manylinux_2_([0-9]+)_${arch}\$/\1/p")
    # auditwheel names the oldest policy the wheel satisfies; manylinux2014 is manylinux_2_17.
    [ -n "$minor" ] && [ "$minor" -le 17 ] || fail "$platform: auditwheel show: $shown"
    echo "$shown" | grep -q "requires no external shared libraries" || fail "$platform: auditwheel show: $shown"
    ok "$platform: auditwheel show: consistent with $tag (so with manylinux2014 = manylinux_2_17), no external libraries"
    probe=$TMP/probe-$arch
    zigcc -target "$arch-linux-gnu.2.17" -std=c99 -O2 -o "$probe" scripts/wheels/probe.c -ldl
    if [ "$arch" = aarch64 ]; then
      runner=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
    else
      runner=()
    fi
    out=$("${runner[@]}" "$probe" "$lib" "$TMP/probe-$arch.db") || fail "$platform: probe: $out"
    ok "$platform: ${runner[*]:-natively} $out"
    if [ "$arch" = x86_64 ]; then
      for minor in $INSTALL_PYTHONS; do
        py=$(ls -d "$PYENV_VERSIONS/$minor".*/bin/python 2>/dev/null | sort -V | tail -1)
        [ -x "$py" ] || fail "$platform: no Python $minor under $PYENV_VERSIONS (pyenv install $minor)"
        venv=$TMP/venv-$minor
        "$py" -m venv "$venv"
        env -u PYTHONPATH -u DCC_FLOW_LIBRARY PIP_DISABLE_PIP_VERSION_CHECK=1 \
          "$venv/bin/python" -m pip install --quiet --no-index --no-deps "$wheel" || fail "$platform: pip install into Python $minor"
        work=$TMP/work-$minor; mkdir -p "$work"
        smoke=$(cd "$work" && env -u PYTHONPATH -u DCC_FLOW_LIBRARY DCC_FLOW_SMOKE_INSTALLED=1 "$venv/bin/python" "$ROOT/tests/py/smoke.py") \
          || fail "$platform: smoke under Python $minor: $smoke"
        echo "$smoke" | grep -q "dcc_flow from $venv/" || fail "$platform: smoke did not use the installed package: $smoke"
        # The README's tour, from the installed wheel, in a folder outside the checkout.
        run=$(cd "$work" && env -u PYTHONPATH -u DCC_FLOW_LIBRARY "$venv/bin/python" -m dcc_flow run "$ROOT/examples/vendor_intake.yaml" \
              --tools "$ROOT/examples/vendor_intake_tools.py" --input date=2026-11-22 --approve-all --db "$work/flow.db" 2>&1) \
          || fail "$platform: python -m dcc_flow run under Python $minor: $run"
        # Not on a terminal, `run` prints JSON lines; the last is the result.
        result=$(echo "$run" | tail -1 | "$venv/bin/python" -c 'import json, sys; r = json.load(sys.stdin)
assert r["type"] == "result" and r["status"] == "completed" and len(r["outputs"]["per_file"]) == 3, r
print("run %s completed, %d FBX exports" % (r["run_id"], len(r["outputs"]["per_file"])))') \
          || fail "$platform: run under Python $minor did not complete: $run"
        ls "$work"/.dcc-flow/vendor_intake/fbx/*.fbx >/dev/null 2>&1 || fail "$platform: the run wrote no FBX under $work/.dcc-flow/vendor_intake/fbx"
        ok "$platform: Python $minor: pip install, $(echo "$smoke" | head -1), python -m dcc_flow run: $result"
      done
    fi
    ;;
  win_amd64)
    lib=$(extract "$wheel")/dccflow.dll
    file -b "$lib" | grep -qE '^PE32\+ executable \(DLL\).*x86-64' || fail "$platform: file says $(file -b "$lib")"
    ok "$platform: $(file -b "$lib")"
    dump=$(x86_64-w64-mingw32-objdump -p "$lib")
    dlls=$(echo "$dump" | sed -nE 's/^\s*DLL Name: (.*)$/\1/p' | sort -u | tr '\n' ' ')
    # Only DLLs every Windows has: a MinGW runtime DLL (libwinpthread-1, libgcc_s_seh-1, ...) would not be found.
    for dll in $dlls; do
      case "${dll,,}" in
        kernel32.dll|msvcrt.dll|ws2_32.dll|advapi32.dll|ntdll.dll|winmm.dll|userenv.dll|bcrypt.dll|crypt32.dll|secur32.dll|iphlpapi.dll|dnsapi.dll|powrprof.dll|shell32.dll|ole32.dll) ;;
        *) fail "$platform: dccflow.dll imports $dll, which Windows does not ship (imports: $dlls)" ;;
      esac
    done
    ok "$platform: imports only system DLLs: $dlls"
    echo "$dump" | sed -n '/^\[Ordinal\/Name Pointer\] Table/,/^$/p' | grep -oE 'dccflow_[a-z0-9_]+' > "$TMP/win-exports"
    exports_all "$platform" "$TMP/win-exports"
    if [ -x scripts/test_windows.sh ]; then
      scripts/test_windows.sh "$wheel" || fail "$platform: scripts/test_windows.sh (Wine)"
    else
      echo "test-wheels: note: $platform is not run here: scripts/test_windows.sh (the Wine runs) does not exist yet"
    fi
    ;;
  macosx_*)
    lib=$(extract "$wheel")/libdccflow.dylib
    case "$platform" in
      macosx_11_0_arm64)       slices="arm64:11.0" ;;
      macosx_10_15_x86_64)     slices="x86_64:10.15" ;;
      macosx_10_15_universal2) slices="arm64:11.0 x86_64:10.15" ;;  # Apple Silicon starts at macOS 11
      *) fail "$platform: no expectations written for this macOS platform" ;;
    esac
    desc=$(file -b "$lib")
    if [ "$platform" = macosx_10_15_universal2 ]; then
      echo "$desc" | grep -q '^Mach-O universal binary with 2 architectures' || fail "$platform: file says $desc"
      archs=$(lipo_archs "$lib")
      [ "$archs" = "arm64 x86_64" ] || fail "$platform: architectures '$archs', want arm64 and x86_64"
      ok "$platform: universal binary of $archs"
    fi
    for slice in $slices; do
      arch=${slice%%:*} minos=${slice#*:}
      check_macho_slice "$platform" "$lib" "$arch" "$minos"
    done
    ;;
  *) fail "no checks written for $platform" ;;
  esac
done
# README: one Linux machine fills the share's folder of every OS (pip --platform only unpacks).
echo "== the share's per-OS folders of examples/install, filled from here with pip --platform"
share=$TMP/share
for entry in linux:manylinux2014_x86_64:libdccflow.so win64:win_amd64:dccflow.dll mac:macosx_10_15_universal2:libdccflow.dylib; do
  IFS=: read -r folder platform lib <<<"$entry"
  case " $* " in *" $platform "*) ;; *) continue ;; esac
  wheel=$(wheel_of "$platform")
  "$WHEEL_PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --only-binary=:all: \
    --platform "$(basename "$wheel" .whl | sed -E 's/.*-py3-none-//; s/.*\.//')" --target "$share/$folder/site-packages" "$wheel" \
    || fail "$platform: pip install --platform --target $share/$folder/site-packages"
  got=$(ls "$share/$folder/site-packages/dcc_flow/_lib")
  [ "$got" = "$lib" ] || fail "$platform: $folder/site-packages/dcc_flow/_lib holds '$got', want $lib"
  grep -q "PYTHONPATH +:= $folder/site-packages" examples/install/dcc_flow.mod || fail "examples/install/dcc_flow.mod names no $folder/site-packages"
  ok "$platform: pip install --platform into $folder/site-packages (the folder dcc_flow.mod gives PLATFORM:$folder)"
done
echo "test-wheels: all $# wheels passed"
