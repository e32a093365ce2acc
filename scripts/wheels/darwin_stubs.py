"""Write the link stubs (.tbd) of the macOS system libraries Go's runtime needs, for cross-linking.

Zig (``python -m ziglang cc -target aarch64-macos.11.0``) ships the headers and the libSystem stub of
macOS, but not the frameworks: linking the Go c-shared library for macOS from Linux stops with::

    error: unable to find dynamic system library 'resolv' using strategy 'paths_first'. searched paths: none

(then the same for the frameworks CoreFoundation and Security), because Go's standard library links
them on macOS (``-lresolv`` from net, ``-framework CoreFoundation -framework Security`` from
crypto/x509). A text-based stub (.tbd) names a library's install path and the symbols it exports; that
is all a linker needs to record a dependency. The symbols are the ones Go itself declares with
``//go:cgo_import_dynamic LOCAL REMOTE "INSTALL_PATH"`` in its sources (GOROOT/src), so the stubs
follow the Go version in use; a symbol they miss fails the link ("undefined symbol"), never the load.

On the Mac, the dylib's dependencies then resolve to the real system files (same install paths).

Usage: ``python scripts/wheels/darwin_stubs.py GOROOT OUTDIR``; pass ``-L OUTDIR -F OUTDIR`` to the
linker. Standard library only.
"""

import os
import re
import sys

IMPORT = re.compile(r'^//go:cgo_import_dynamic\s+\S+\s+(\S+)\s+"([^"]+)"', re.M)

#: install path -> where the stub goes under OUTDIR (what `-lNAME` / `-framework NAME` looks for).
STUBS = {
    "/usr/lib/libresolv.9.dylib": "libresolv.tbd",
    "/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation":
        "CoreFoundation.framework/CoreFoundation.tbd",
    "/System/Library/Frameworks/Security.framework/Versions/A/Security": "Security.framework/Security.tbd",
}
TARGETS = "[ x86_64-macos, arm64-macos ]"


def imported_symbols(goroot):
    """install path -> sorted symbol names that Go's sources import from it (only STUBS' paths)."""
    found = {path: set() for path in STUBS}
    src = os.path.join(goroot, "src")
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in ("testdata", "cmd")]
        for name in filenames:
            if not name.endswith(".go") or name.endswith("_test.go"):
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
            if "cgo_import_dynamic" not in text:
                continue
            for symbol, path in IMPORT.findall(text):
                if path in found:
                    found[path].add(symbol)
    return {path: sorted(symbols) for path, symbols in found.items()}


def tbd(install_path, symbols):
    names = ", ".join("_" + s for s in symbols)
    return (
        "--- !tapi-tbd\n"
        "tbd-version:     4\n"
        "targets:         %s\n"
        "install-name:    '%s'\n"
        "current-version: 1\n"
        "exports:\n"
        "  - targets:         %s\n"
        "    symbols:         [ %s ]\n"
        "...\n" % (TARGETS, install_path, TARGETS, names)
    )


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: darwin_stubs.py GOROOT OUTDIR")
    goroot, out = argv[1], argv[2]
    symbols = imported_symbols(goroot)
    for path, rel in STUBS.items():
        if not symbols[path]:
            sys.exit("darwin_stubs: no //go:cgo_import_dynamic of %s under %s/src: has Go moved it? "
                     "(the macOS link would then miss its symbols)" % (path, goroot))
        dest = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w", encoding="utf-8") as f:
            f.write(tbd(path, symbols[path]))
        print("darwin_stubs: %s: %d symbols of %s" % (rel, len(symbols[path]), path))


if __name__ == "__main__":
    main(sys.argv)
