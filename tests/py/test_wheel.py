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


def load_check_wheels():
    """scripts/wheels/check_wheels.py, which make test-wheels runs on the wheels of every platform."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_wheels", os.path.join(ROOT, "scripts", "wheels", "check_wheels.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cross_wheel(tmp_path, platform, library_file):
    """`pip wheel .` as scripts/wheels/package.sh runs it for a cross-built library (make wheels)."""
    out = tmp_path / "dist"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", DCC_FLOW_WHEEL_PLATFORM=platform,
               DCC_FLOW_WHEEL_LIBRARY=str(library_file))
    return subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps", "--no-index",
                           "-w", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600), out


@pytest.mark.parametrize("platform, name", [
    ("win_amd64", "dccflow.dll"),
    ("macosx_11_0_arm64", "libdccflow.dylib"),
    ("manylinux_2_17_aarch64.manylinux2014_aarch64", "libdccflow.so"),
])
def test_cross_wheel_carries_only_the_named_library_under_its_tag(tmp_path, platform, name):
    # A stand-in for the cross-built library: what matters is that this file, and only it, is shipped
    # under the loader's name for that platform, whatever the native build left in python/ or build/.
    (tmp_path / "lib").mkdir()
    library = tmp_path / "lib" / name
    library.write_bytes(b"cross-built " + platform.encode() + b"\0" * 1000000)
    proc, out = cross_wheel(tmp_path, platform, library)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = os.listdir(str(out))
    assert wheels == ["dcc_flow-0.1.0-py3-none-%s.whl" % platform]
    with zipfile.ZipFile(str(out / wheels[0])) as zf:
        libs = [n for n in zf.namelist() if n.startswith("dcc_flow/_lib/")]
        assert libs == ["dcc_flow/_lib/" + name]
        assert zf.read(libs[0]) == library.read_bytes()
        meta = zf.read("dcc_flow-0.1.0.dist-info/WHEEL").decode()
    for tag in platform.split("."):
        assert "Tag: py3-none-%s\n" % tag in meta
    assert load_check_wheels().library_name(platform.split(".")[-1]) == name


@pytest.mark.parametrize("env_platform, file_name, message", [
    ("win_amd64", "libdccflow.so", "a win_amd64 wheel must carry dccflow.dll"),
    ("macosx_10_15_x86_64", "missing/libdccflow.dylib", "does not exist; build it with `make wheels`"),
    ("manylinux2014_x86_64", None, "set both DCC_FLOW_WHEEL_PLATFORM and DCC_FLOW_WHEEL_LIBRARY"),
])
def test_cross_wheel_refuses_a_wrong_or_missing_library(tmp_path, env_platform, file_name, message):
    library = ""
    if file_name:
        library = tmp_path / file_name
        if not file_name.startswith("missing/"):
            library.write_bytes(b"x")
    proc, out = cross_wheel(tmp_path, env_platform, library)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not out.exists() or not os.listdir(str(out))


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
    # Every module of the source tree, subpackages (dcc_flow/_flow/, _cli/, dcc/) included.
    source = set()
    for folder, dirs, files in os.walk(os.path.join(ROOT, "python", "dcc_flow")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, os.path.join(ROOT, "python")).replace(os.sep, "/")
        source.update(rel + "/" + f for f in files if f.endswith(".py"))
    assert "dcc_flow/_flow/_workflow.py" in source
    modules = {n for n in names if n.endswith(".py")}
    assert source == modules, "missing: %s; not in the source tree: %s" % (sorted(source - modules),
                                                                        sorted(modules - source))
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
    for dcc_python in ("mayapy", "hython"):  # test_target_install_...: the Linux folder of the module/package files
        assert ("\n%s -m pip install --target /studio/pipeline/dcc-flow/linux/site-packages dist/dcc_flow-0.1.0-py3-none-"
                "manylinux_2_17_x86_64.manylinux2014_x86_64.whl\n" % dcc_python) in text
    # The Windows and macOS lines name the folders the module and package files give those OSes.
    assert "--target S:\\pipeline\\dcc-flow\\win64\\site-packages dist\\dcc_flow-0.1.0-py3-none-win_amd64.whl\n" in text
    assert ("--target /Volumes/studio/pipeline/dcc-flow/mac/site-packages "
            "dist/dcc_flow-0.1.0-py3-none-macosx_10_15_universal2.whl\n") in text
    for houdini_os, maya_platform in MAYA_PLATFORM.items():
        assert houdini_pythonpath(os.path.join(ROOT, "examples", "install", "dcc_flow.json"), houdini_os) == [
            "%s/%s/site-packages" % (SHARE[houdini_os], maya_platform)]


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


def module_pythonpath(mod_file, platform):
    """PYTHONPATH as Maya on `platform` (linux, win64, mac) builds it from a module file: the sections
    `+ [PLATFORM:p] NAME VERSION PATH` (PATH relative to the .mod's folder) whose condition holds,
    then their `PYTHONPATH +:= REL` lines, relative to that module path."""
    root, paths = None, []
    with open(mod_file, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields[:1] == ["+"]:
                conditions = [c.split(":", 1) for c in fields[1:-3]]
                assert all(key == "PLATFORM" for key, _ in conditions), line
                active = all(value == platform for _, value in conditions)
                root = os.path.normpath(os.path.join(os.path.dirname(mod_file), fields[-1])) if active else None
            elif line.replace(" ", "").startswith("PYTHONPATH+:=") and root is not None:
                paths.append(os.path.normpath(os.path.join(root, line.split(":=", 1)[1].strip())))
    return paths


def houdini_value(value, houdini_os):
    """A package value: a string, or a list of {"houdini_os == 'x'": string} of which the first true one counts."""
    if isinstance(value, str):
        return value
    for choice in value:
        ((condition, chosen),) = choice.items()
        match = re.fullmatch(r"houdini_os == '(windows|macos|linux)'", condition)
        assert match, condition
        if match.group(1) == houdini_os:
            return chosen
    return None


def houdini_pythonpath(package_file, houdini_os):
    """PYTHONPATH as Houdini on `houdini_os` builds it from the package's env list."""
    with open(package_file, encoding="utf-8") as f:
        package = json.load(f)
    env, paths = {}, []
    for entry in package["env"]:
        for key, value in entry.items():
            if key == "DCC_FLOW_HOME":
                env[key] = houdini_value(value, houdini_os)
            elif key == "PYTHONPATH":
                assert value["method"] == "prepend"
                paths.append(houdini_value(value["value"], houdini_os).replace("$DCC_FLOW_HOME", env["DCC_FLOW_HOME"]))
    return paths


# The share as each OS mounts it, and its folder per OS (one wheel each: the native library differs).
SHARE = {"linux": "/studio/pipeline/dcc-flow", "windows": "S:/pipeline/dcc-flow", "macos": "/Volumes/studio/pipeline/dcc-flow"}
MAYA_PLATFORM = {"linux": "linux", "windows": "win64", "macos": "mac"}


def test_maya_module_and_houdini_package_name_one_folder_per_os(tmp_path):
    shutil.copy(os.path.join(ROOT, "examples", "install", "dcc_flow.mod"), str(tmp_path))
    package = os.path.join(ROOT, "examples", "install", "dcc_flow.json")
    for houdini_os, maya_platform in MAYA_PLATFORM.items():
        want = "%s/%s/site-packages" % (SHARE[houdini_os], maya_platform)
        assert houdini_pythonpath(package, houdini_os) == [want]
        # The module file sits in the share's root on every OS; its paths are relative to it.
        assert module_pythonpath(str(tmp_path / "dcc_flow.mod"), maya_platform) == [
            os.path.normpath(str(tmp_path / maya_platform / "site-packages"))]
    assert module_pythonpath(str(tmp_path / "dcc_flow.mod"), "irix") == []


def test_target_install_for_dcc_pythons_with_the_maya_module_and_houdini_package(wheel, tmp_path):
    home = tmp_path / "dcc-flow"
    site = home / "linux" / "site-packages"
    run([sys.executable, "-m", "pip", "install", "--no-index", "--target", str(site), wheel], env=clean_env())
    shutil.copy(os.path.join(ROOT, "examples", "install", "dcc_flow.mod"), str(home))
    from_maya = module_pythonpath(str(home / "dcc_flow.mod"), "linux")
    from_houdini = [p.replace(SHARE["linux"], str(home))
                    for p in houdini_pythonpath(os.path.join(ROOT, "examples", "install", "dcc_flow.json"), "linux")]
    assert from_maya == from_houdini == [str(site)]
    python = oldest_python()  # a different Python than the one that built and installed the wheel
    env = dict(clean_env(), PYTHONPATH=os.pathsep.join(from_maya))
    smoke = run([python, SMOKE], cwd=str(tmp_path), env=env)
    assert "smoke ok" in smoke.stdout and str(site) in smoke.stdout, smoke.stdout
