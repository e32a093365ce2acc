"""Checks the layout of the wheels of `make wheels` (make test-wheels).

    python scripts/wheels/check_wheels.py DIST PLATFORM...

For each PLATFORM (a tag of the Makefile's WHEEL_PLATFORMS) exactly one wheel in DIST whose file name
ends with it; its WHEEL file is not purelib and lists the tags of its file name; ``dcc_flow/_lib/``
holds exactly one file, named as the loader looks for it on that platform (dcc_flow._ffi
._library_filename), and megabytes large; every other file of the package is byte for byte the same
in all the wheels (one pure-Python package). Prints one line per wheel; exits 1 naming each problem.
Standard library only.
"""

import glob
import hashlib
import os
import sys
import zipfile

LIB_PREFIX = "dcc_flow/_lib/"


def library_name(platform):
    if platform.startswith("win"):
        return "dccflow.dll"
    if platform.startswith("macosx"):
        return "libdccflow.dylib"
    return "libdccflow.so"


def check(dist, platforms):
    problems, packages = [], {}
    for platform in platforms:
        found = glob.glob(os.path.join(dist, "dcc_flow-*-py3-none-*%s.whl" % platform))
        if len(found) != 1:
            problems.append("%s: expected one wheel in %s, found %s" % (platform, dist, found))
            continue
        path = found[0]
        name = os.path.basename(path)
        tags = name[: -len(".whl")].split("-")[-1].split(".")
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            info = [n for n in names if n.endswith(".dist-info/WHEEL")]
            wheel_meta = zf.read(info[0]).decode() if info else ""
            libs = [n for n in names if n.startswith(LIB_PREFIX) and not n.endswith("/")]
            package = {n: hashlib.sha256(zf.read(n)).hexdigest() for n in names
                       if n.startswith("dcc_flow/") and not n.startswith(LIB_PREFIX)}
            sizes = {n: zf.getinfo(n).file_size for n in libs}
        if "Root-Is-Purelib: false" not in wheel_meta:
            problems.append("%s: WHEEL does not say Root-Is-Purelib: false" % name)
        for tag in tags:
            if "Tag: py3-none-%s" % tag not in wheel_meta:
                problems.append("%s: WHEEL lacks Tag: py3-none-%s" % (name, tag))
        want = LIB_PREFIX + library_name(platform)
        if libs != [want]:
            problems.append("%s: _lib/ holds %s, want exactly %s" % (name, libs, want))
        elif sizes[want] < 1000000:
            problems.append("%s: %s is %d bytes: not a Go library" % (name, want, sizes[want]))
        packages[name] = package
        print("check_wheels: %s: %s (%d bytes), %d package files" % (name, want, sizes.get(want, 0), len(package)))
    if packages:
        first_name, first = next(iter(packages.items()))
        for name, package in packages.items():
            if package != first:
                differ = sorted(set(package.items()) ^ set(first.items()))
                problems.append("%s and %s differ outside _lib/: %s" % (first_name, name, [n for n, _ in differ][:10]))
    for problem in problems:
        print("check_wheels: FAIL: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: check_wheels.py DIST PLATFORM...")
    sys.exit(check(sys.argv[1], sys.argv[2:]))
