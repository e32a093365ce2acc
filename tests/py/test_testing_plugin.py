"""The pytest plugin dcc_flow.testing, exercised in a separate pytest run as a studio would."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INTAKE = """
name: intake
inputs: {date: {type: string, format: date, required: true}}
steps:
  - {id: list, tool: vendor_intake__list_sftp, args: {date: "{{inputs.date}}"}}
  - id: per_file
    kind: foreach
    items: "$.list.files"
    as: file
    concurrency: 2
    steps: [{id: export, tool: maya__export_fbx, args: {scene: "{{file.path}}"}}]
"""


def test_plugin_fixtures_in_a_studio_test_suite(tmp_path):
    (tmp_path / "test_pipeline.py").write_text(
        textwrap.dedent(
            """
            import dcc_flow

            SPEC = %r

            def test_intake(engine, fake_tools):
                fake_tools.add("vendor_intake__list_sftp", {"files": [{"path": "a.ma"}, {"path": "b.ma"}]})
                export = fake_tools.add("maya__export_fbx", lambda scene: {"fbx": scene[:-3] + ".fbx"})
                result = engine.run(SPEC, {"date": "2026-11-22"})
                assert result.ok, result.error
                assert sorted(c["scene"] for c in export.calls) == ["a.ma", "b.ma"]
                assert fake_tools["maya__export_fbx"].call_count == 2

            def test_side_effects_drive_retries(engine, fake_tools):
                flaky = fake_tools.add("flaky", side_effect=[dcc_flow.Transient("busy"), "ok"])
                result = engine.run("steps: [{id: f, tool: flaky, retry: {max_attempts: 3, initial_delay_ms: 1, max_delay_ms: 1}}]")
                assert result.outputs["f"] == "ok" and flaky.call_count == 2
            """
            % INTAKE
        )
    )
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "dcc_flow.testing", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
