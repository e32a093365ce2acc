"""A skill folder (SKILL.md with its specs and a sibling schedules.yaml) loads with
--workflows DIR and --schedules DIR / `dcc-flow schedules DIR`: the schedules SKILL.md lists are
read whatever their name, and files that are not workflow specs are skipped with a line."""
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=60)


def skill_folder(tmp_path):
    skill = tmp_path / "scene-maintenance"
    skill.mkdir()
    (skill / "SKILL.md").write_text(textwrap.dedent("""\
        ---
        name: scene-maintenance
        description: Nightly cleanup + upload validation for Maya scenes.
        metadata:
          dcc-mcp:
            workflow:
              specs: [workflows.yaml]
              schedules: [schedules.yaml]
        ---
        # Scene maintenance
        """))
    (skill / "workflows.yaml").write_text("name: scene_cleanup\nsteps: [{ id: a, tool: flow__echo }]\n")
    (skill / "schedules.yaml").write_text(textwrap.dedent("""\
        schedules:
          - id: nightly_cleanup
            workflow: scene_cleanup
            trigger: { kind: cron, expression: "0 0 3 * * *" }
        """))
    (skill / "remotes.json").write_text(json.dumps({"maya": {"command": ["mayapy"]}}))
    return skill


def test_schedules_of_a_skill_folder(tmp_path):
    skill = skill_folder(tmp_path)
    proc = cli("schedules", str(skill), "--workflows", str(skill), "--json", "--db", ":memory:", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [s["id"] for s in json.loads(proc.stdout)] == ["nightly_cleanup"]
    # The schedules file and the remotes file are not specs: each is skipped with a line.
    skipped = sorted(line for line in proc.stderr.splitlines() if "skipping" in line)
    assert skipped == [
        "--workflows: skipping %s (not a workflow spec: no `steps`, and field `maya`)"
        % os.path.join(str(skill), "remotes.json"),
        "--workflows: skipping %s (not a workflow spec: no `steps`, and field `schedules`)"
        % os.path.join(str(skill), "schedules.yaml"),
    ], proc.stderr


def test_a_spec_with_problems_still_stops_the_command(tmp_path):
    skill = skill_folder(tmp_path)
    (skill / "broken.yaml").write_text("name: broken\nstpes: [{ id: a, tool: flow__echo }]\n")
    proc = cli("schedules", str(skill), "--workflows", str(skill), "--db", ":memory:", cwd=tmp_path)
    assert proc.returncode == 1
    assert 'unknown field "stpes"; did you mean "steps"?' in proc.stderr


def test_a_skill_md_listing_a_missing_file_is_reported(tmp_path):
    skill = skill_folder(tmp_path)
    os.remove(str(skill / "schedules.yaml"))
    proc = cli("schedules", str(skill), "--workflows", str(skill), "--db", ":memory:", cwd=tmp_path)
    assert proc.returncode == 1
    assert 'metadata.dcc-mcp.workflow.schedules[0]: "schedules.yaml" is not a file in' in proc.stdout + proc.stderr
    assert "SKILL.md:8:" in proc.stdout + proc.stderr
