"""Build hooks for the dcc-flow wheel; the metadata lives in pyproject.toml.

The package is pure Python except for one file: the engine, a Go library built with
``-buildmode=c-shared`` into ``python/dcc_flow/_lib``. Two things follow:

* ``build_py`` makes sure that library exists before the package is copied: it runs ``make lib`` where
  make is available (which rebuilds only when a Go source changed), else ``go build`` when the library
  is missing. Without Go and without a library it stops with one line saying what to do.
* ``bdist_wheel`` tags the wheel ``py3-none-<platform>``: one wheel serves every CPython 3.7-3.13 (the
  library is loaded through ctypes, not linked against libpython), but only on the platform it was
  built for.

Build it the way CI does, offline and against the setuptools already installed::

    pip wheel . --no-build-isolation --no-deps --no-index -w dist
"""

import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1 (pyproject asks for >= 77)
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB_DIR = os.path.join(ROOT, "python", "dcc_flow", "_lib")
LIB_NAMES = {"win32": "dccflow.dll", "darwin": "libdccflow.dylib"}
LIB_NAME = LIB_NAMES.get(sys.platform, "libdccflow.so")


def build_library():
    """Build (or refresh) the native library in python/dcc_flow/_lib."""
    lib = os.path.join(LIB_DIR, LIB_NAME)
    if shutil.which("make") and shutil.which("go") and os.path.exists(os.path.join(ROOT, "Makefile")):
        subprocess.check_call(["make", "--no-print-directory", "lib"], cwd=ROOT)
    elif not os.path.exists(lib):
        go = shutil.which("go")
        if go is None:
            sys.exit("dcc-flow: the native library %s is missing and Go is not on PATH; "
                     "install Go 1.26 (with cgo) or copy a built library there first" % lib)
        os.makedirs(LIB_DIR, exist_ok=True)
        subprocess.check_call([go, "build", "-trimpath", "-ldflags=-s -w", "-buildmode=c-shared",
                               "-o", lib, "./capi"], cwd=ROOT)
        header = os.path.splitext(lib)[0] + ".h"
        if os.path.exists(header):
            os.remove(header)
    if not os.path.exists(lib):
        sys.exit("dcc-flow: building the native library did not produce %s" % lib)


class BuildPyWithLibrary(build_py):
    def run(self):
        build_library()
        super().run()


class EggInfoInBuild(egg_info):
    """Keep the egg-info out of python/: there it would be found on sys.path by the tests (which run
    the package from the source tree) as an installed dcc-flow, with a second pytest plugin entry."""

    def initialize_options(self):
        super().initialize_options()
        self.egg_base = os.path.relpath(os.path.join(ROOT, "build"))
        os.makedirs(self.egg_base, exist_ok=True)


class BinaryDistribution(Distribution):
    """The package carries a native library: install it as platlib and never call the wheel pure."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()  # e.g. linux_x86_64, macosx_11_0_arm64, win_amd64
        return "py3", "none", platform


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel, "egg_info": EggInfoInBuild},
)
