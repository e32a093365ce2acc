"""Importing a real DCC module (bpy, PySide6) for the real-host tests.

Where the Makefile's venv recipe finds no wheel for this Python and platform, the tests that need
the module skip with a reason naming the package. Where a wheel exists (and so `make venv`
installed it), a missing module fails the test instead: CI cannot skip the real-host tests
silently.
"""
import importlib
import platform
import sys

import pytest


def _glibc_at_least(version):
    lib, found = platform.libc_ver()
    if lib != "glibc" or not found:
        return False
    return tuple(int(p) for p in found.split(".")[:2]) >= version


#: module -> (pip requirement, does a wheel exist for this Python and platform?)
WHEELS = {
    "bpy": ("bpy==5.0.1", sys.version_info[:2] == (3, 11) and sys.platform.startswith("linux")
            and platform.machine() == "x86_64" and _glibc_at_least((2, 28))),
    "pxr": ("usd-core==26.11", (3, 9) <= sys.version_info[:2] < (3, 14) and sys.platform.startswith("linux")
            and platform.machine() == "x86_64" and _glibc_at_least((2, 17))),
    "PySide6": ("PySide6-Essentials==6.11.3", (3, 10) <= sys.version_info[:2] < (3, 15)
                and sys.platform.startswith("linux") and platform.machine() == "x86_64"
                and _glibc_at_least((2, 34))),
}


def real_module(name):
    """Import ``name`` (a key of WHEELS): skip naming its package when no wheel exists here, fail
    when one does and it is not installed (run `make venv`)."""
    requirement, wheel_exists = WHEELS[name]
    if not wheel_exists:
        return pytest.importorskip(name, reason="%s: no wheel for Python %s on %s %s (pip install %s)" % (
            name, platform.python_version(), sys.platform, platform.machine(), requirement))
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.fail("%s is not installed though a wheel exists for this Python and platform: `make venv` "
                    "installs %s (%s)" % (name, requirement, e))
