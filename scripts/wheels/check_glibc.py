"""Fails when an ELF library needs a glibc symbol version newer than a limit (make test-wheels).

    python scripts/wheels/check_glibc.py LIBRARY MAX      e.g. ... libdccflow.so 2.17

Reads the version needs (``readelf -V``, GNU binutils) and prints the GLIBC_* versions found; exits 1
naming every version above MAX, or when none was found at all (a library linked against glibc always
needs some, so none means the output was not understood). Standard library only.
"""

import re
import subprocess
import sys


def glibc_versions(library):
    out = subprocess.run(["readelf", "-V", "--wide", library], check=True, capture_output=True, text=True).stdout
    return sorted({tuple(int(p) for p in v.split(".")) for v in re.findall(r"\bName: GLIBC_([0-9.]+)\b", out)})


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: check_glibc.py LIBRARY MAX")
    library, limit = argv[1], tuple(int(p) for p in argv[2].split("."))
    found = glibc_versions(library)
    names = ", ".join("GLIBC_" + ".".join(map(str, v)) for v in found)
    if not found:
        print("check_glibc: %s: no GLIBC_* version needs found in readelf -V" % library)
        return 1
    newer = [v for v in found if v > limit]
    if newer:
        print("check_glibc: %s needs %s, newer than GLIBC_%s (found: %s)"
              % (library, ", ".join("GLIBC_" + ".".join(map(str, v)) for v in newer), argv[2], names))
        return 1
    newest = ".".join(map(str, found[-1]))
    print("check_glibc: %s: newest GLIBC_%s <= %s (found: %s)" % (library, newest, argv[2], names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
