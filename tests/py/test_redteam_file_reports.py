"""Hostile file reports (issue #36): a tool that reports far too many files or far too long paths
costs bounded memory and fails with ``limit_exceeded``; Windows drive letters and UNC shares are
reported as Windows writes them; an answer whose files or env the engine would refuse never
leaves Python (the Go side's refusals: capi/files_test.go, engine/internal/remote/files_test.go)."""

import json
import ntpath

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus, _tools
from dcc_flow._tools import ToolEntry, execute


@pytest.fixture(autouse=True)
def no_environment():
    dcc_flow.set_environment()
    yield
    dcc_flow.set_environment()


def run_tool(fn, args=None):
    text = execute(ToolEntry("t", fn, "main", None, ""), {"call_id": 1, "tool": "t", "args": args or {}},
                   lambda _id: False)
    return text, json.loads(text + "}")


def test_redteam_300000_reports_keep_100000_and_fail_the_call():
    def flood():
        call = dcc_flow.current_call()
        for i in range(300000):
            call.writes("/render/beauty.%07d.exr" % i)
        return "done"

    text, doc = run_tool(flood)
    assert doc["error"]["kind"] == "limit_exceeded" and "reported 300000 files" in doc["error"]["message"]
    assert len(doc["files"]) == _tools.MAX_FILES_PER_CALL
    assert len(text) < 8 << 20  # what crosses is bounded by what was kept


def test_redteam_long_paths_are_bounded_by_bytes():
    long_dir = "/" + "d" * 30000  # under the 32,767-character limit of one path

    def flood():
        call = dcc_flow.current_call()
        for i in range(2000):  # 60 MB of paths said; 16 MiB kept
            call.reads("%s/%d" % (long_dir, i))

    text, doc = run_tool(flood)
    assert doc["error"]["kind"] == "limit_exceeded"
    kept = len(doc["files"])
    assert 0 < kept < 2000 and sum(len(f["path"]) for f in doc["files"]) <= _tools.MAX_FILES_BYTES
    assert len(text.encode("utf-8")) < _tools.MAX_FILES_BYTES + (1 << 20)


def test_redteam_windows_drive_letters_and_unc_shares_are_kept(monkeypatch):
    """As a tool on Windows reports them (ntpath.abspath): the engine receives them as written."""
    monkeypatch.setattr(_tools, "_abspath", ntpath.abspath)

    def tool():
        call = dcc_flow.current_call()
        call.reads(r"\\fileserver\shows\abc\sh010.ma", "C:/proj/tex/wood.exr", r"D:\cache\..\out\a.fbx")

    _, doc = run_tool(tool)
    assert [f["path"] for f in doc["files"]] == [r"\\fileserver\shows\abc\sh010.ma", r"C:\proj\tex\wood.exr",
                                                 r"D:\out\a.fbx"]


def test_redteam_paths_the_engine_would_refuse_never_cross(tmp_path):
    """Paths with JSON's special characters cross escaped; an empty path, a NUL or a lone surrogate
    is refused in the tool, so the answer the engine gets always decodes."""
    odd = str(tmp_path / 'a "quoted" \\ back\tslash \u2028 line.ma')
    with dcc_flow.Engine() as engine:
        @engine.tool
        def tool(path):
            call = dcc_flow.current_call()
            call.reads(odd)
            for bad in ("", "x\x00y", "caf\udce9"):
                try:
                    call.writes(bad)
                except ValueError:
                    pass
            return path

        result = engine.run({"steps": [{"id": "t", "tool": "tool", "args": {"path": odd}}]})
    assert result.status is WorkflowStatus.COMPLETED, result.error
    assert result.outputs["t"] == odd


def test_redteam_an_environment_that_is_not_json_is_refused_when_set():
    class Version:
        def __str__(self):
            return "2025"

    cyclic = []
    cyclic.append(cyclic)
    for kwargs in ({"version": Version()}, {"plugins": {"mtoa": Version()}}, {"gamma": float("inf")},
                   {"loop": cyclic}, {"plugins": {"p%d" % i: "x" * 100 for i in range(1000)}}):
        with pytest.raises((TypeError, ValueError)):
            dcc_flow.set_environment(**kwargs)
    assert _tools.environment() is None
    assert "env" not in run_tool(lambda: 1)[1]
