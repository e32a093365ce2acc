"""Loading and calling the native library: lookup, ABI check, strings, reload, fork, threads."""

import ctypes
import importlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import dcc_flow
from conftest import PYTHON_DIR, VENDOR_INTAKE
from dcc_flow import DccFlowError, InvalidRequestError, ParseError, WorkflowSpec, _ffi


def _run_python(code, env=None, cwd=None):
    full_env = dict(os.environ)
    full_env.pop(_ffi.ENV_VAR, None)
    full_env["PYTHONPATH"] = PYTHON_DIR
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- loading ------------------------------------------------------------------------------------


def test_library_loads_and_reports_versions():
    info = dcc_flow.library_version()
    assert info["abi_version"] == _ffi.ABI_VERSION == 2
    assert info["version"]
    assert info["go_version"].startswith("go")
    assert os.path.isfile(info["path"])
    assert _ffi.abi_version() == 2
    assert isinstance(_ffi.library(), ctypes.CDLL)


def test_signature_table():
    sig = _ffi._SIGNATURES
    assert sig["dccflow_abi_version"] == ([], ctypes.c_uint32)
    assert sig["dccflow_free"] == ([ctypes.c_void_p], None)
    for name in ("dccflow_version", "dccflow_spec_parse", "dccflow_spec_validate"):
        argtypes, restype = sig[name]
        assert argtypes[0] is ctypes.c_uint64 and argtypes[1] is ctypes.c_char_p
        assert restype is ctypes.c_int32


def test_candidate_paths(monkeypatch, tmp_path):
    monkeypatch.delenv(_ffi.ENV_VAR, raising=False)
    default = _ffi.candidate_paths()
    assert len(default) == 1
    assert default[0].endswith(os.path.join("dcc_flow", "_lib", _ffi._library_filename()))
    monkeypatch.setenv(_ffi.ENV_VAR, str(tmp_path / "x.so"))
    assert _ffi.candidate_paths() == [str(tmp_path / "x.so")]


@pytest.mark.parametrize(
    "platform, name",
    [("linux", "libdccflow.so"), ("darwin", "libdccflow.dylib"), ("win32", "dccflow.dll"), ("cygwin", "dccflow.dll"),
     ("freebsd14", "libdccflow.so")],
)
def test_library_filename_by_platform(monkeypatch, platform, name):
    # The names the wheels of `make wheels` ship (scripts/wheels/check_wheels.py checks each wheel's).
    monkeypatch.delenv(_ffi.ENV_VAR, raising=False)
    monkeypatch.setattr(_ffi.sys, "platform", platform)
    assert _ffi._library_filename() == name
    assert _ffi.candidate_paths() == [os.path.join(os.path.dirname(_ffi.__file__), "_lib", name)]


def test_import_is_lazy_and_imports_no_dcc_modules():
    result = _run_python(
        """
        import sys, time
        t0 = time.perf_counter()
        import dcc_flow
        elapsed = time.perf_counter() - t0
        state = sys.modules.get("_dcc_flow_native_state")
        assert state is None or state.lib is None, "library loaded at import"
        banned = [m for m in sys.modules if m.split(".")[0] in ("maya", "hou", "PySide2", "PySide6", "PyQt5", "Qt")]
        assert not banned, banned
        dcc_flow.library_version()
        assert sys.modules["_dcc_flow_native_state"].lib is not None
        print("import %.1f ms" % (elapsed * 1000))
        """
    )
    assert result.returncode == 0, result.stderr
    assert "import" in result.stdout


def test_library_not_found_names_the_paths_tried(tmp_path):
    missing = str(tmp_path / "nowhere" / "libdccflow.so")
    result = _run_python(
        """
        import dcc_flow
        try:
            dcc_flow.WorkflowSpec.from_yaml_str("steps: []")
        except dcc_flow.LibraryNotFoundError as exc:
            assert isinstance(exc, OSError)
            print(exc)
        else:
            raise SystemExit("no error")
        """,
        env={_ffi.ENV_VAR: missing},
    )
    assert result.returncode == 0, result.stderr
    assert missing in result.stdout
    assert "make lib" in result.stdout
    assert _ffi.ENV_VAR in result.stdout


def test_library_not_found_beside_the_package(tmp_path):
    # A copy of the package without _lib/: the message names the default location.
    dest = tmp_path / "site"
    shutil.copytree(os.path.join(PYTHON_DIR, "dcc_flow"), str(dest / "dcc_flow"), ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    result = _run_python(
        """
        import dcc_flow
        try:
            dcc_flow.library_version()
        except dcc_flow.LibraryNotFoundError as exc:
            print(exc)
        """,
        env={"PYTHONPATH": str(dest)},
    )
    assert result.returncode == 0, result.stderr
    assert str(dest / "dcc_flow" / "_lib") in result.stdout
    assert "make lib" in result.stdout


def test_not_a_dcc_flow_library(tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_bytes(b"\x7fELF not really")
    result = _run_python(
        """
        import dcc_flow
        try:
            dcc_flow.library_version()
        except dcc_flow.LibraryLoadError as exc:
            print(type(exc).__name__, exc)
        """,
        env={_ffi.ENV_VAR: str(fake)},
    )
    assert result.returncode == 0, result.stderr
    assert "LibraryLoadError" in result.stdout and str(fake) in result.stdout


def test_library_from_env_var():
    path = _ffi.library_path()
    result = _run_python(
        """
        import dcc_flow
        print(dcc_flow.library_version()["path"])
        """,
        env={_ffi.ENV_VAR: path},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == path


# --- calling ------------------------------------------------------------------------------------


def test_call_round_trip():
    out = _ffi.call("dccflow_spec_parse", 0, {"text": VENDOR_INTAKE, "format": "yaml"})
    assert set(out) >= {"spec", "spec_hash", "warnings", "problems"}
    valid = _ffi.call("dccflow_spec_validate", 0, {"text": VENDOR_INTAKE})
    assert valid["valid"] is True and valid["spec_hash"] == out["spec_hash"]


def test_call_missing_field_is_invalid_request():
    with pytest.raises(InvalidRequestError):
        _ffi.call("dccflow_spec_parse", 0, {})
    with pytest.raises(InvalidRequestError):
        _ffi.call("dccflow_spec_parse", 0, {"text": "steps: []", "format": "toml"})


def test_raw_export_contract():
    """Drive the exports directly: bad JSON, NULL input, NULL-safe free."""
    state = _ffi._load()
    parse = state.funcs["dccflow_spec_parse"]
    free = state.funcs["dccflow_free"]
    out = ctypes.c_void_p()
    rc = parse(0, b"this is not json", ctypes.byref(out))
    assert rc == _ffi.RC_INVALID_REQUEST
    assert out.value
    raw = _ffi._take_string(free, out.value)
    assert b'"invalid_request"' in raw
    out = ctypes.c_void_p()
    rc = parse(0, None, ctypes.byref(out))  # NULL is treated as {}: "text" is missing
    assert rc == _ffi.RC_INVALID_REQUEST
    _ffi._take_string(free, out.value)
    free(None)  # ignored
    assert _ffi._take_string(free, None) is None


def test_nul_in_text_is_not_truncated():
    # JSON escapes NUL as \\u0000, so the C string is never cut short.
    with pytest.raises(DccFlowError) as info:
        WorkflowSpec.from_yaml_str("name: x\x00\nsteps: [")
    assert not isinstance(info.value, InvalidRequestError)


def test_unknown_and_missing_exports(monkeypatch):
    with pytest.raises(ValueError, match="unknown dcc_flow export"):
        _ffi.call("dccflow_no_such_thing")
    monkeypatch.setitem(_ffi._SIGNATURES, "dccflow_not_built_yet", _ffi._SIGNATURES["dccflow_version"])
    with pytest.raises(DccFlowError, match="does not export dccflow_not_built_yet"):
        _ffi.call("dccflow_not_built_yet")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_returned_strings_are_freed():
    big = "name: big\ndescription: \"" + "x" * 200000 + "\"\nsteps:\n  - id: a\n    tool: flow__echo\n"

    def rss_mb():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

    for _ in range(50):
        _ffi.call("dccflow_spec_validate", 0, {"text": big})
    before = rss_mb()
    for _ in range(500):  # 100 MB of returned strings if they leaked
        _ffi.call("dccflow_spec_parse", 0, {"text": big})
    assert rss_mb() - before < 60


def test_concurrent_calls_from_threads():
    errors = []
    results = []

    def work():
        try:
            for _ in range(30):
                results.append(WorkflowSpec.from_yaml_str(VENDOR_INTAKE).spec_hash)
                try:
                    WorkflowSpec.from_yaml_str("steps: [")
                except ParseError:
                    pass
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 240 and len(set(results)) == 1


# --- reload and fork ------------------------------------------------------------------------------


def test_reload_keeps_the_library():
    spec = WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    lib = _ffi.library()
    module = importlib.reload(dcc_flow)
    again = module.WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    assert again == spec
    assert _ffi.library() is lib
    reloaded_ffi = importlib.reload(_ffi)
    assert reloaded_ffi.library() is lib
    assert module.WorkflowSpec.from_yaml_str(VENDOR_INTAKE).spec_hash == spec.spec_hash


def test_purge_and_reimport_keeps_the_library():
    # DCC "reload my tools" helpers delete every dcc_flow* module and import again.
    result = _run_python(
        """
        import sys, importlib
        import dcc_flow
        h1 = dcc_flow.WorkflowSpec.from_yaml_str("steps:\\n  - id: a\\n    tool: flow__echo\\n").spec_hash
        lib1 = dcc_flow._ffi.library()
        for name in [m for m in sys.modules if m == "dcc_flow" or m.startswith("dcc_flow.")]:
            del sys.modules[name]
        import dcc_flow as again
        assert again is not dcc_flow
        h2 = again.WorkflowSpec.from_yaml_str("steps:\\n  - id: a\\n    tool: flow__echo\\n").spec_hash
        assert again._ffi.library() is lib1
        again = importlib.reload(again)
        assert again.WorkflowSpec.from_yaml_str("steps:\\n  - id: a\\n    tool: flow__echo\\n").spec_hash == h1 == h2
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="platform without fork()")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_gets_a_clear_error():
    WorkflowSpec.from_yaml_str(VENDOR_INTAKE)  # the library is loaded in the parent
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        status = 1
        try:
            os.close(read_fd)
            try:
                WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
                msg = b"no error"
            except RuntimeError as exc:
                msg = str(exc).encode()
                status = 0
            except BaseException as exc:
                msg = repr(exc).encode()
            os.write(write_fd, msg)
        finally:
            os._exit(status)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    message = b"".join(chunks).decode()
    assert os.WEXITSTATUS(status) == 0, message
    assert "spawn" in message and "fork" in message
    # The parent is unaffected.
    assert WorkflowSpec.from_yaml_str(VENDOR_INTAKE).name == "vendor_intake"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="platform without fork()")
def test_fork_before_load_is_fine():
    result = _run_python(
        """
        import os
        import dcc_flow
        pid = os.fork()
        if pid == 0:
            try:
                ok = dcc_flow.WorkflowSpec.from_yaml_str("steps:\\n  - id: a\\n    tool: flow__echo\\n").name == ""
            finally:
                pass
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.WEXITSTATUS(status))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_multiprocessing_spawn_works(tmp_path):
    script = tmp_path / "spawn_check.py"
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing as mp
            import dcc_flow

            TEXT = "steps:\\n  - id: a\\n    tool: flow__echo\\n"

            def parse(text):
                return dcc_flow.WorkflowSpec.from_yaml_str(text).spec_hash

            def first_step(spec):
                return spec.steps[0].id

            if __name__ == "__main__":
                here = parse(TEXT)
                with mp.get_context("spawn").Pool(2) as pool:
                    there = pool.map(parse, [TEXT, TEXT])
                assert there == [here, here], (there, here)
                spec = dcc_flow.WorkflowSpec.from_yaml_str(TEXT)
                with mp.get_context("spawn").Pool(1) as pool:
                    names = pool.map(first_step, [spec])  # views pickle
                assert names == ["a"], names
                print("ok", names)
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop(_ffi.ENV_VAR, None)
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True,
        text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
