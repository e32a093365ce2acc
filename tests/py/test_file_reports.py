"""Files a tool call read and wrote, and the environment it ran in (issue #36, item 1, the tool's
side): ``current_call().reads``/``.writes``, the ``reads=``/``writes=`` arguments of
``@engine.tool`` and ``@task``, ``dcc_flow.set_environment`` and ``Engine(environment=)``.

They travel with the call's answer: the ``files`` and ``env`` members of an in-process tool's
``calls_complete`` request, and ``_meta["dcc-flow/files"]``/``["dcc-flow/env"]`` of a pool
worker's tools/call result. The Go side (capi/files_test.go, engine/internal/remote/files_test.go,
engine/remotes_files_internal_test.go) takes them from there into the call's ToolResult; these
tests check what leaves Python, and that the engine accepts it.
"""

import io
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus, _ffi, _tools
from dcc_flow._tools import ToolEntry, execute, file_args
from dcc_flow._worker import ENV_META_KEY, FILES_META_KEY, Worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")


@pytest.fixture(autouse=True)
def no_environment():
    """Each test starts and ends without a process environment (set_environment is process-wide)."""
    dcc_flow.set_environment()
    yield
    dcc_flow.set_environment()


def answer(fn, args=None, reads=None, writes=None, env=None, call_id=7):
    """The calls_complete request an in-process call of ``fn`` is answered with, decoded."""
    entry = ToolEntry("t", fn, "main", None, "", None, file_args(fn, reads, writes, "tool 't'"))
    return json.loads(execute(entry, {"call_id": call_id, "tool": "t", "args": args or {}}, lambda _id: False,
                              env=env) + "}")


def files_of(doc):
    return [(f["path"], f["role"]) for f in doc.get("files", [])]


# --- current_call().reads / .writes ------------------------------------------------------------


def test_reads_and_writes_go_with_the_result_in_order_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def export():
        call = dcc_flow.current_call()
        call.reads("scenes/a.ma", pathlib.Path("/shows/abc/tex.exr"))
        call.writes(pathlib.PurePosixPath("out") / "a.fbx")
        call.reads("scenes/./../scenes/a.ma")  # said again: kept again, normalised
        call.reads()  # nothing: a no-op
        return {"fbx": "out/a.fbx"}

    doc = answer(export)
    assert doc["output"] == {"fbx": "out/a.fbx"} and doc["call_id"] == 7
    here = str(tmp_path)
    assert files_of(doc) == [(os.path.join(here, "scenes", "a.ma"), "read"),
                             (os.path.abspath("/shows/abc/tex.exr"), "read"),
                             (os.path.join(here, "out", "a.fbx"), "write"),
                             (os.path.join(here, "scenes", "a.ma"), "read")]
    assert "env" not in doc


def test_a_relative_path_is_made_absolute_when_it_is_reported(tmp_path, monkeypatch):
    """Against the working directory at the report: a tool that changes directory afterwards
    does not change what it reported."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()

    def tool():
        dcc_flow.current_call().reads("a.ma")
        os.chdir("sub")
        dcc_flow.current_call().writes("b.fbx")

    doc = answer(tool)
    assert files_of(doc) == [(str(tmp_path / "a.ma"), "read"), (str(tmp_path / "sub" / "b.fbx"), "write")]


def test_a_call_that_reports_no_files_sends_no_files_member():
    assert answer(lambda: 1) == {"call_id": 7, "output": 1}


class BytesPath:
    def __fspath__(self):
        return b"/a/b"


@pytest.mark.parametrize("bad, error, words", [
    (3, TypeError, "current_call().reads() argument 2 must be a str or an os.PathLike, not int"),
    (None, TypeError, "argument 2 must be a str or an os.PathLike, not NoneType"),
    (b"/a/b", TypeError, "not bytes (b'/a/b'); decode it with os.fsdecode"),
    (BytesPath(), TypeError, "not an os.PathLike of bytes"),
    (["/a", "/b"], TypeError, "not list; pass several paths as separate arguments: reads(*paths)"),
    ("", ValueError, "argument 2 is an empty path"),
    ("/a/\x00b", ValueError, "argument 2 holds a NUL character"),
    ("/a/caf\udce9.ma", ValueError, "argument 2 is not valid Unicode"),
    ("/" + "a" * 40000, ValueError, "argument 2 is 40001 characters long; a path is at most 32767"),
])
def test_a_bad_path_raises_in_the_tool_naming_the_argument_and_keeps_none_of_them(bad, error, words):
    seen = []

    def tool():
        call = dcc_flow.current_call()
        try:
            call.reads("/ok/first.ma", bad, "/ok/third.ma")
        except error as exc:
            seen.append(str(exc))
        call.writes("/ok/out.fbx")

    doc = answer(tool)
    assert words in seen[0], seen
    assert files_of(doc) == [(os.path.abspath("/ok/out.fbx"), "write")]  # nothing of the refused call


def test_writes_names_itself_in_its_errors():
    def tool():
        dcc_flow.current_call().writes(7)

    err = answer(tool)["error"]
    assert err["kind"] == "invalid_input"
    assert "current_call().writes() argument 1 must be a str or an os.PathLike, not int" in err["message"]


def test_a_failed_call_sends_its_files_with_its_error():
    def tool():
        dcc_flow.current_call().reads("/shows/a.ma")
        dcc_flow.current_call().writes("/out/a.fbx")
        raise dcc_flow.Transient("license server busy")

    doc = answer(tool)
    assert doc["error"]["kind"] == "transient" and "output" not in doc
    assert files_of(doc) == [(os.path.abspath("/shows/a.ma"), "read"), (os.path.abspath("/out/a.fbx"), "write")]


def test_an_output_that_cannot_be_encoded_still_sends_the_files():
    def tool():
        dcc_flow.current_call().writes("/out/a.fbx")
        return {1, 2}

    doc = answer(tool)
    assert doc["error"]["kind"] == "invalid_output"
    assert files_of(doc) == [(os.path.abspath("/out/a.fbx"), "write")]


def test_threads_of_a_tool_may_share_its_context():
    import threading

    def tool():
        call = dcc_flow.current_call()

        def report(i):
            for j in range(500):
                call.reads("/f/%d_%d" % (i, j))

        threads = [threading.Thread(target=report, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    assert len(answer(tool)["files"]) == 2000


# --- the bound on files per call ---------------------------------------------------------------


def test_past_the_bound_the_call_fails_with_limit_exceeded_and_keeps_the_first(monkeypatch):
    monkeypatch.setattr(_tools, "MAX_FILES_PER_CALL", 5)

    def tool():
        call = dcc_flow.current_call()
        for i in range(7):
            call.reads("/in/%d.exr" % i)
        call.writes("/out/late.fbx")  # past the bound too
        return "done"

    doc = answer(tool)
    assert doc["error"]["kind"] == "limit_exceeded" and "output" not in doc
    msg = doc["error"]["message"]
    assert "tool 't' reported 8 files (reads and writes)" in msg and "at most 5 files and 16 MiB of paths" in msg
    assert "the first 5 were kept" in msg and "Split the work over more steps" in msg
    assert files_of(doc) == [(os.path.abspath("/in/%d.exr" % i), "read") for i in range(5)]


def test_the_bound_counts_bytes_of_paths_too(monkeypatch):
    monkeypatch.setattr(_tools, "MAX_FILES_BYTES", 20)

    def tool():
        dcc_flow.current_call().reads("/0123456789", "/abcdefghij", "/x")  # 11 + 11 bytes: the second is over

    doc = answer(tool)
    assert doc["error"]["kind"] == "limit_exceeded"
    assert files_of(doc) == [(os.path.abspath("/0123456789"), "read")]


def test_a_tool_that_failed_keeps_its_own_error_past_the_bound(monkeypatch):
    monkeypatch.setattr(_tools, "MAX_FILES_PER_CALL", 1)

    def tool():
        dcc_flow.current_call().reads("/a", "/b")
        raise dcc_flow.Fatal("corrupt scene")

    doc = answer(tool)
    assert doc["error"]["kind"] == "fatal" and len(doc["files"]) == 1


def test_100000_files_fit_in_one_call_and_one_more_does_not():
    def tool(n):
        call = dcc_flow.current_call()
        for i in range(n):
            call.writes("/render/sh010/beauty.%06d.exr" % i)

    doc = answer(tool, {"n": 100000})
    assert doc["output"] is None and len(doc["files"]) == 100000
    doc = answer(tool, {"n": 100001})
    assert doc["error"]["kind"] == "limit_exceeded" and len(doc["files"]) == 100000


# --- @engine.tool(reads=, writes=) ---------------------------------------------------------------


def test_file_arguments_are_reported_before_the_tool_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def export(scene, fbx_path="out/default.fbx", textures=None, log=None):
        os.chdir("/")  # after the reports: they were made against the starting directory
        dcc_flow.current_call().writes("/extra/report.txt")
        return "ok"

    doc = answer(export, {"scene": "a.ma", "textures": ["t1.exr", pathlib.Path("/lib/t2.exr")]},
                 reads=["scene", "textures"], writes=["fbx_path", "log"])
    assert doc["output"] == "ok"
    assert files_of(doc) == [(str(tmp_path / "a.ma"), "read"), (str(tmp_path / "t1.exr"), "read"),
                             (os.path.abspath("/lib/t2.exr"), "read"),
                             (str(tmp_path / "out" / "default.fbx"), "write"),  # the default: what the tool used
                             (os.path.abspath("/extra/report.txt"), "write")]  # log=None: none


def test_a_file_argument_of_another_type_fails_the_call_before_the_tool_runs():
    ran = []

    def export(scene, out=None):
        ran.append(1)

    for args, words in [
        ({"scene": 3}, "tool 't': argument 'scene' (named in reads=) must be a path (a str or an os.PathLike) "
                       "or a list of them; got int"),
        ({"scene": ["a.ma", {"x": 1}]}, "argument 'scene' (named in reads=) must be a path (a str or an os.PathLike) "
                                        "or a list of them; got dict at [1]"),
        ({"scene": "a.ma", "out": ""}, "tool 't': argument 'out' (named in writes=) is an empty path"),
    ]:
        err = answer(export, args, reads="scene", writes="out")["error"]
        assert err["kind"] == "invalid_input" and words in err["message"], err
        assert "trace" not in err  # the tool did not run: no traceback of dcc_flow's own frames
    assert ran == []


def test_file_argument_names_are_checked_when_the_tool_is_registered():
    def export(scene, *, fbx_path, **_rest):
        pass

    def strict(scene, *frames):
        pass

    assert file_args(export, "scene", ["fbx_path", "anything"], "x") == (
        ("scene", "read", _tools._NO_DEFAULT), ("fbx_path", "write", _tools._NO_DEFAULT),
        ("anything", "write", _tools._NO_DEFAULT))  # **_rest takes any name
    with dcc_flow.Engine() as engine:
        with pytest.raises(ValueError, match=r"^tool 'strict': reads=\['scen'\] names no argument of strict \(its "
                                             r"arguments: scene\)$"):
            engine.register_tool(strict, reads=["scen"])
        with pytest.raises(ValueError) as info:
            engine.register_tool(strict, writes="frames")
        assert str(info.value) == "tool 'strict': writes=['frames'] names no argument of strict (its arguments: scene)"
        with pytest.raises(TypeError, match=r"tool 'strict': reads= must name arguments of the function: a str or a "
                                            r"list of str, not 3"):
            engine.register_tool(strict, reads=3)
        assert "strict" not in engine.tools


# --- set_environment and Engine(environment=) ---------------------------------------------------


def test_set_environment_goes_with_every_answer_and_replaces_the_whole():
    dcc_flow.set_environment(dcc="maya", version="2025.3", plugins={"mtoa": "5.4.1", "yeti": None}, ocio="aces_1.2")
    env = {"dcc": "maya", "version": "2025.3", "plugins": {"mtoa": "5.4.1", "yeti": None}, "ocio": "aces_1.2"}
    assert answer(lambda: 1)["env"] == env
    assert answer(lambda: 1 / 0)["env"] == env  # a failed call's too
    assert _tools.environment() == env and _tools.environment() is not _tools.environment()
    dcc_flow.set_environment(dcc="houdini")
    assert answer(lambda: 1)["env"] == {"dcc": "houdini"}
    dcc_flow.set_environment()
    assert "env" not in answer(lambda: 1) and _tools.environment() is None


@pytest.mark.parametrize("kwargs, error, words", [
    ({"dcc": 2025}, TypeError, "set_environment(): dcc must be a str, not int"),
    ({"version": 2025.3}, TypeError, "set_environment(): version must be a str, not float"),
    ({"plugins": ["mtoa"]}, TypeError, "plugins must be a mapping of plugin names to versions, not list"),
    ({"plugins": {1: "x"}}, TypeError, "plugins has a key that is not a str: 1"),
    ({"host": {"a", "b"}}, TypeError, "set_environment(): host is not a JSON value"),
    ({"gamma": float("nan")}, TypeError, "set_environment(): gamma is not a JSON value"),
    ({"blob": "x" * (64 << 10)}, ValueError, "the environment is 65547 bytes of JSON; at most 65536 (64 KiB)"),
    ({"name": "caf\udce9"}, ValueError, "holds text that is not valid Unicode"),
])
def test_set_environment_refuses_what_is_not_json_and_changes_nothing(kwargs, error, words):
    dcc_flow.set_environment(dcc="maya")
    with pytest.raises(error) as info:
        dcc_flow.set_environment(**kwargs)
    assert words in str(info.value)
    assert _tools.environment() == {"dcc": "maya"}


def test_an_engines_environment_updates_the_processes_in_its_answers():
    dcc_flow.set_environment(dcc="maya", version="2025.3")
    doc = answer(lambda: 1, env={"version": "2025.3.1", "host": "ws042"})
    assert doc["env"] == {"dcc": "maya", "version": "2025.3.1", "host": "ws042"}
    dcc_flow.set_environment()
    assert answer(lambda: 1, env={"host": "ws042"})["env"] == {"host": "ws042"}
    # Together over 64 KiB: every call says so (each alone was accepted).
    dcc_flow.set_environment(a="x" * 40000)
    doc = answer(lambda: 1, env={"b": "y" * 40000})
    assert doc["error"]["kind"] == "invalid_output" and "64 KiB) together" in doc["error"]["message"]
    assert "env" not in doc


def test_engine_environment_is_checked_before_the_engine_opens():
    for bad, error, words in [(["maya"], TypeError, "Engine(environment=...) must be a mapping"),
                              ({1: 2}, TypeError, "has a key that is not a str: 1"),
                              ({"x": object()}, TypeError, "is not JSON-serialisable"),
                              ({"x": "y" * (64 << 10)}, ValueError, "bytes of JSON; at most 65536")]:
        with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            dcc_flow.Engine(environment=bad)


# --- through the engine: what crosses, and that it is accepted ------------------------------------


@pytest.fixture()
def completions(monkeypatch):
    """The calls_complete requests this process sends (decoded), with the engine's replies."""
    sent = []
    real = _ffi.call_encoded

    def spy(name, handle, data, source=None):
        out = real(name, handle, data, source)
        if name == "dccflow_calls_complete":
            sent.append((json.loads(data.decode("utf-8")), out))
        return out

    monkeypatch.setattr(_ffi, "call_encoded", spy)
    return sent


def test_an_in_process_tools_files_and_env_cross_in_its_one_answer_and_are_accepted(tmp_path, completions):
    dcc_flow.set_environment(dcc="maya", version="2025.3")
    scene = tmp_path / 'sh010 "hero" ü\\.ma'  # quotes, a backslash, non-ASCII: carried as written
    with dcc_flow.Engine(environment={"host": "ws042"}) as engine:
        @engine.tool(reads="scene", writes="out")
        def export(scene, out):
            dcc_flow.current_call().reads(str(tmp_path / "tex.exr"))
            return {"fbx": out}

        @engine.tool(writes="out")
        def broken(out):
            raise dcc_flow.Fatal("no camera")

        result = engine.run({"steps": [
            {"id": "e", "tool": "export", "args": {"scene": str(scene), "out": str(tmp_path / "a.fbx")}},
            {"id": "b", "tool": "broken", "args": {"out": str(tmp_path / "b.fbx")}, "depends_on": ["e"]},
        ]})
    assert result.status is WorkflowStatus.FAILED and result.step("b").error["kind"] == "fatal"
    assert result.outputs["e"] == {"fbx": str(tmp_path / "a.fbx")}
    assert len(completions) == 2 and all(out.get("accepted") is True for _, out in completions)
    (ok, _), (failed, _) = completions
    assert files_of(ok) == [(str(scene), "read"), (str(tmp_path / "a.fbx"), "write"), (str(tmp_path / "tex.exr"), "read")]
    assert ok["env"] == {"dcc": "maya", "version": "2025.3", "host": "ws042"}
    assert files_of(failed) == [(str(tmp_path / "b.fbx"), "write")] and failed["error"]["kind"] == "fatal"
    assert failed["env"] == ok["env"]


def test_a_tasks_file_arguments_are_reported(tmp_path, completions):
    @dcc_flow.task(reads="scene", writes=["fbx"])
    def export_fbx(scene: str, fbx: str = "") -> str:
        return fbx

    @dcc_flow.workflow
    def flow(scene: str, fbx: str):
        export_fbx(scene, fbx=fbx)

    with dcc_flow.Engine() as engine:
        result = engine.run(flow, {"scene": str(tmp_path / "a.ma"), "fbx": str(tmp_path / "a.ma.fbx")})
        assert result.status is WorkflowStatus.COMPLETED, result.error
        # with_options changes them: the tool is registered again with the new ones.
        copy = export_fbx.with_options(reads=[], writes="scene")
        assert copy.reads == () and copy.writes == ("scene",) and export_fbx.reads == ("scene",)

        @dcc_flow.workflow
        def flow2(scene: str):
            copy(scene, fbx="x")

        assert engine.run(flow2, {"scene": str(tmp_path / "b.ma")}).status is WorkflowStatus.COMPLETED
    assert files_of(completions[0][0]) == [(str(tmp_path / "a.ma"), "read"), (str(tmp_path / "a.ma.fbx"), "write")]
    assert files_of(completions[1][0]) == [(str(tmp_path / "b.ma"), "write")]


def test_a_task_names_only_its_arguments():
    with pytest.raises(ValueError, match=r"@task on export: reads=\['scen'\] names no argument of export "
                                         r"\(its arguments: scene, fbx\)"):
        @dcc_flow.task(reads=["scen"])
        def export(scene, fbx=""):
            pass
    with pytest.raises(TypeError, match="@task on export: writes= must name arguments"):
        @dcc_flow.task(writes={"fbx": 1})
        def export(scene, fbx=""):  # noqa: F811
            pass


# --- on a pool worker ------------------------------------------------------------------------------


def test_a_worker_sends_files_and_env_in_the_results_meta():
    dcc_flow.set_environment(dcc="hython", version="20.5")

    def export(scene, out):
        dcc_flow.current_call().reads("/lib/tex.exr")
        return out

    def fail(out):
        raise dcc_flow.Transient("no licence")

    tools = {"export": ToolEntry("export", export, "main", None, "", None, file_args(export, "scene", "out", "x")),
             "fail": ToolEntry("fail", fail, "main", None, "", None, file_args(fail, None, "out", "x")),
             "plain": ToolEntry("plain", lambda: 1, "main", None, "")}
    reqs = [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "export", "arguments": {"scene": "/shows/a.hip", "out": "/out/a.bgeo"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fail", "arguments": {"out": "/o/b"}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "plain"}}]
    out = io.BytesIO()
    worker = Worker(tools, io.BytesIO("".join(json.dumps(r) + "\n" for r in reqs).encode()), out)
    assert worker.serve() == 3
    replies = {m["id"]: m["result"] for m in map(json.loads, out.getvalue().decode().splitlines())}
    env = {"dcc": "hython", "version": "20.5"}
    assert json.loads(replies[1]["content"][0]["text"]) == "/out/a.bgeo"
    assert replies[1]["_meta"] == {FILES_META_KEY: [
        {"path": os.path.abspath("/shows/a.hip"), "role": "read"}, {"path": os.path.abspath("/out/a.bgeo"), "role": "write"},
        {"path": os.path.abspath("/lib/tex.exr"), "role": "read"}], ENV_META_KEY: env}
    assert replies[2]["isError"] is True and replies[2]["structuredContent"]["kind"] == "transient"
    assert replies[2]["_meta"] == {FILES_META_KEY: [{"path": os.path.abspath("/o/b"), "role": "write"}],
                                   ENV_META_KEY: env}
    dcc_flow.set_environment()
    assert replies[3].get("_meta") == {ENV_META_KEY: env}  # no files: no key


WORKER_TOOLS = textwrap.dedent('''
    import dcc_flow

    def setup():
        dcc_flow.set_environment(dcc="mayapy", version="2025.3", plugins={"mtoa": "5.4.1"})

    @dcc_flow.task(name="wk__export", reads="scene", writes="fbx")
    def export(scene: str, fbx: str) -> str:
        dcc_flow.current_call().reads("textures/wood.exr")
        return fbx
''')


def _worker_tools(tmp_path):
    path = tmp_path / "wk_files.py"
    path.write_text(WORKER_TOOLS)
    return path


def test_a_worker_process_reports_its_tasks_files_and_its_init_environment(tmp_path):
    path = _worker_tools(tmp_path)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "wk__export", "arguments": {"scene": "shots/a.ma", "fbx": "/out/a.fbx"}}}]
    proc = subprocess.run([sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path), "--init",
                           "%s:setup" % path], input="".join(json.dumps(m) + "\n" for m in msgs).encode(),
                          capture_output=True, env=env, cwd=str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    replies = {r["id"]: r for r in map(json.loads, proc.stdout.decode().splitlines())}
    meta = replies[2]["result"]["_meta"]
    assert meta[FILES_META_KEY] == [{"path": str(tmp_path / "shots" / "a.ma"), "role": "read"},
                                    {"path": os.path.abspath("/out/a.fbx"), "role": "write"},
                                    {"path": str(tmp_path / "textures" / "wood.exr"), "role": "read"}]
    assert meta[ENV_META_KEY] == {"dcc": "mayapy", "version": "2025.3", "plugins": {"mtoa": "5.4.1"}}


def test_a_pool_workers_files_and_env_are_accepted_by_the_engine(tmp_path):
    """Through a real pool: the engine takes the worker's _meta (a shape it refused would fail
    the step with kind invalid_output, engine/internal/remote/files_test.go)."""
    path = _worker_tools(tmp_path)
    remote = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path), "--init", "%s:setup" % path],
              "env": {"PYTHONPATH": PYTHON_DIR}, "dir": str(tmp_path), "workers": 1}
    with dcc_flow.Engine(config={"remotes": {"maya": remote}}) as engine:
        result = engine.run({"steps": [{"id": "e", "dcc": "maya", "tool": "wk__export",
                                        "args": {"scene": "shots/a.ma", "fbx": str(tmp_path / "a.fbx")}}]})
    assert result.status is WorkflowStatus.COMPLETED, result.error
    assert result.outputs["e"] == str(tmp_path / "a.fbx")
