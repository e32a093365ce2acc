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

``make wheels`` builds the wheels of every studio OS with the same command, once per platform, with
two environment variables (scripts/wheels/package.sh):

* ``DCC_FLOW_WHEEL_PLATFORM``: the wheel's platform tag (e.g. ``manylinux2014_x86_64``,
  ``win_amd64``, ``macosx_11_0_arm64``) instead of this machine's;
* ``DCC_FLOW_WHEEL_LIBRARY``: the cross-built library to ship (its file name must be the one the
  loader looks for on that platform: ``libdccflow.so``, ``dccflow.dll`` or ``libdccflow.dylib``);
  nothing is built then.

Either way the wheel's ``_lib/`` holds exactly one file, that library: a library of another platform
left in ``python/dcc_flow/_lib`` or in ``build/`` by an earlier build never rides along.
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
ENV_PLATFORM = "DCC_FLOW_WHEEL_PLATFORM"
ENV_LIBRARY = "DCC_FLOW_WHEEL_LIBRARY"


def library_name_for(platform_tag):
    """The file name the loader (dcc_flow._ffi._library_filename) looks for on that wheel platform."""
    if platform_tag.startswith("win"):
        return "dccflow.dll"
    if platform_tag.startswith("macosx"):
        return "libdccflow.dylib"
    return "libdccflow.so"


def shipped_library():
    """The library file this wheel carries: the cross-built one named by the environment, else the
    native one (built by build_library)."""
    explicit = os.environ.get(ENV_LIBRARY)
    platform_tag = os.environ.get(ENV_PLATFORM)
    if not explicit and not platform_tag:
        build_library()
        return os.path.join(LIB_DIR, LIB_NAME)
    if not explicit or not platform_tag:  # a native library tagged manylinux would be a lie, and vice versa
        sys.exit("dcc-flow: set both %s and %s (a cross-built library and its wheel platform), or neither"
                 % (ENV_PLATFORM, ENV_LIBRARY))
    want = library_name_for(platform_tag)
    if os.path.basename(explicit) != want:
        sys.exit("dcc-flow: %s=%s but a %s wheel must carry %s (the name its loader looks for)"
                 % (ENV_LIBRARY, explicit, platform_tag, want))
    if not os.path.isfile(explicit):
        sys.exit("dcc-flow: %s=%s does not exist; build it with `make wheels`" % (ENV_LIBRARY, explicit))
    return explicit


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
        library = shipped_library()
        # build/lib keeps the modules of earlier builds too: a module since renamed or moved (the
        # old dcc_flow/_flow_*.py, now dcc_flow/_flow/) must not ride along in this wheel.
        stale = os.path.join(self.build_lib, "dcc_flow")
        if os.path.isdir(stale):
            shutil.rmtree(stale)
        super().run()
        # package_data copies whatever python/dcc_flow/_lib holds, and build/lib keeps files of earlier
        # builds: leave exactly the one library of this wheel's platform.
        target = os.path.join(self.build_lib, "dcc_flow", "_lib")
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.makedirs(target)
        self.copy_file(library, os.path.join(target, os.path.basename(library)))


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
        return "py3", "none", os.environ.get(ENV_PLATFORM) or platform


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel, "egg_info": EggInfoInBuild},
)
