"""Packaging: the wheel carries the native library and works in a fresh venv; so does `pip install .`.

The commands are the README's ("Install"). Building needs setuptools >= 77 (pyproject.toml's
build requirement) in the interpreter running the tests, and `pip install .` in a fresh venv takes its
build requirements from $(VENV)/wheelhouse: both are prepared by `make venv`, so nothing here reaches an
index.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = os.path.join(ROOT, "tests", "py", "smoke.py")
WHEELHOUSE = os.environ.get("DCC_FLOW_WHEELHOUSE", os.path.join(ROOT, ".venv", "wheelhouse"))
LIB_NAME = {"win32": "dccflow.dll", "darwin": "libdccflow.dylib"}.get(sys.platform, "libdccflow.so")


def run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, "%s failed (%d):\n%s\n%s" % (argv, proc.returncode, proc.stdout, proc.stderr)
    return proc


def fresh_venv(path):
    """A new venv with only what `python -m venv` bundles (pip, offline through ensurepip)."""
    run([sys.executable, "-m", "venv", str(path)])
    bindir = "Scripts" if sys.platform == "win32" else "bin"
    return os.path.join(str(path), bindir)


def clean_env():
    """The environment without anything that would let the repository's python/ leak in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DCC_FLOW_LIBRARY", "VIRTUAL_ENV")}
    env["DCC_FLOW_SMOKE_INSTALLED"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def assert_installed_works(bindir, where):
    """The smoke workflow and the console script run from the venv's own copy of the package."""
    env = clean_env()
    smoke = run([os.path.join(bindir, "python"), SMOKE], cwd=where, env=env)
    assert "smoke ok" in smoke.stdout
    loaded_from = smoke.stdout.split("dcc_flow from ", 1)[1].strip()
    assert os.path.realpath(loaded_from).startswith(os.path.realpath(os.path.dirname(bindir))), smoke.stdout
    version = run([os.path.join(bindir, "dcc-flow"), "--version"], cwd=where, env=env)
    assert re.search(r"library 0\.1\.0 \(C ABI \d+", version.stdout), version.stdout
    assert os.path.realpath(os.path.dirname(bindir)) in version.stdout.replace(os.sep * 2, os.sep)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps", "--no-index",
         "-w", str(out)], cwd=ROOT, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    wheels = [name for name in os.listdir(str(out)) if name.endswith(".whl")]
    assert len(wheels) == 1, wheels
    return os.path.join(str(out), wheels[0])


def test_wheel_is_py3_none_platform_and_carries_the_library(wheel):
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert os.path.basename(wheel) == "dcc_flow-0.1.0-py3-none-%s.whl" % platform
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read("dcc_flow-0.1.0.dist-info/WHEEL").decode()
        entry_points = zf.read("dcc_flow-0.1.0.dist-info/entry_points.txt").decode()
        lib = zf.getinfo("dcc_flow/_lib/" + LIB_NAME)
    assert "Root-Is-Purelib: false" in meta
    assert "Tag: py3-none-%s" % platform in meta
    assert lib.file_size > 1000000  # the Go runtime alone is megabytes: not an empty placeholder
    assert {"dcc_flow/__init__.py", "dcc_flow/py.typed", "dcc_flow/_cli/run.py", "dcc_flow/dcc/maya.py"} <= names
    assert not any(name.endswith((".h", ".pyc")) for name in names), sorted(names)
    assert "dcc-flow = dcc_flow.__main__:main" in entry_points


def test_wheel_installs_into_a_fresh_venv_and_runs_the_smoke_workflow(wheel, tmp_path):
    bindir = fresh_venv(tmp_path / "venv")
    run([os.path.join(bindir, "python"), "-m", "pip", "install", "--no-index", "--no-deps", wheel],
        env=clean_env())
    assert_installed_works(bindir, str(tmp_path))


def test_pip_install_dot_builds_and_installs_the_same_package(tmp_path):
    if not os.path.isdir(WHEELHOUSE):
        pytest.fail("no wheelhouse at %s: run `make venv` (it downloads setuptools there once)" % WHEELHOUSE)
    bindir = fresh_venv(tmp_path / "venv")
    # Build isolation on, as a studio's `pip install .` would do; the build requirements come from the
    # wheelhouse instead of an index.
    run([os.path.join(bindir, "python"), "-m", "pip", "install", "--no-index", "--find-links", WHEELHOUSE, "."],
        cwd=ROOT, env=clean_env())
    assert_installed_works(bindir, str(tmp_path))


def readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_readme_install_commands_are_the_ones_tested():
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    text = readme()
    assert "\npip wheel . --no-build-isolation --no-deps --no-index -w dist\n" in text  # the `wheel` fixture
    if platform == "linux_x86_64":  # the README's example file name
        assert "\npip install dist/dcc_flow-0.1.0-py3-none-linux_x86_64.whl\n" in text
    assert "\npip install .  " in text  # test_pip_install_dot_...
    for dcc_python in ("mayapy", "hython"):  # test_target_install_...
        assert ("\n%s -m pip install --target /studio/pipeline/dcc-flow/site-packages dist/dcc_flow-0.1.0-py3-none-"
                % dcc_python) in text


def oldest_python():
    """The oldest CPython of the machine (pyenv), to show the wheel is not tied to the builder's."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for minor in range(7, 14):
        versions = os.path.join(root, "versions")
        for name in sorted(os.listdir(versions)) if os.path.isdir(versions) else ():
            exe = os.path.join(versions, name, "bin", "python")
            if name.startswith("3.%d." % minor) and os.access(exe, os.X_OK):
                return exe
    return sys.executable


def module_pythonpath(mod_file):
    """PYTHONPATH as Maya builds it from a module file: `+ NAME VERSION PATH` (relative to the .mod's
    folder), then `PYTHONPATH +:= REL` lines relative to that module path."""
    root, paths = None, []
    with open(mod_file, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields[:1] == ["+"]:
                root = os.path.normpath(os.path.join(os.path.dirname(mod_file), fields[-1]))
            elif line.replace(" ", "").startswith("PYTHONPATH+:="):
                paths.append(os.path.join(root, line.split(":=", 1)[1].strip()))
    return paths


def houdini_pythonpath(package_file, home):
    """PYTHONPATH as Houdini builds it from the package's env list, DCC_FLOW_HOME moved to `home`."""
    with open(package_file, encoding="utf-8") as f:
        package = json.load(f)
    env, paths = {}, []
    for entry in package["env"]:
        for key, value in entry.items():
            if key == "DCC_FLOW_HOME":
                env[key] = home
            elif key == "PYTHONPATH":
                assert value["method"] == "prepend"
                paths.append(value["value"].replace("$DCC_FLOW_HOME", env["DCC_FLOW_HOME"]))
    return paths


def test_target_install_for_dcc_pythons_with_the_maya_module_and_houdini_package(wheel, tmp_path):
    home = tmp_path / "dcc-flow"
    run([sys.executable, "-m", "pip", "install", "--no-index", "--target", str(home / "site-packages"), wheel],
        env=clean_env())
    shutil.copy(os.path.join(ROOT, "examples", "install", "dcc_flow.mod"), str(home))
    from_maya = module_pythonpath(str(home / "dcc_flow.mod"))
    from_houdini = houdini_pythonpath(os.path.join(ROOT, "examples", "install", "dcc_flow.json"), str(home))
    assert from_maya == from_houdini == [str(home / "site-packages")]
    python = oldest_python()  # a different Python than the one that built and installed the wheel
    env = dict(clean_env(), PYTHONPATH=os.pathsep.join(from_maya))
    smoke = run([python, SMOKE], cwd=str(tmp_path), env=env)
    assert "smoke ok" in smoke.stdout and str(home / "site-packages") in smoke.stdout, smoke.stdout
