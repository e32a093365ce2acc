"""The README says what really happens: its Python sessions run as shown (doctest), its tour's
commands print what it shows (run ids, times and durations aside), its YAML is the example file,
and `make demo` works as its "Two commands" say."""
import doctest
import os
import re
import subprocess
import sys

import _replay

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")


def readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def blocks(lang):
    return re.findall(r"^```%s\n(.*?)^```" % lang, readme(), flags=re.S | re.M)


def test_readme_python_sessions(monkeypatch):
    monkeypatch.chdir(ROOT)
    sessions = "\n\n".join(blocks("python"))
    test = doctest.DocTestParser().get_doctest(sessions, {}, "README.md", "README.md", 0)
    assert len(test.examples) > 10, "the README's Python sessions are missing"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, "the README's Python sessions do not run as shown"


def test_readme_yaml_is_the_example_file():
    with open(os.path.join(ROOT, "examples", "vendor_intake.yaml"), encoding="utf-8") as f:
        assert blocks("yaml")[0] == f.read()


def test_readme_links_exist():
    for target in re.findall(r"\]\(([^)#]+)\)", readme()):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), target


def test_readme_install_snippets_are_the_example_files():
    text = readme()
    for name in ("dcc_flow.mod", "dcc_flow.json"):
        with open(os.path.join(ROOT, "examples", "install", name), encoding="utf-8") as f:
            content = f.read()
        indented = "".join("  " + line + "\n" for line in content.splitlines())
        assert indented in text, "README's copy of examples/install/%s differs" % name


# --- the tour -------------------------------------------------------------------------------


def test_readme_tour_prints_what_it_shows():
    """Each command runs in a fresh working directory that has the repository's examples/, so the
    defaults the tour relies on (.dcc-flow/flow.db, .dcc-flow/vendor_intake) are its own. A command
    that waits for an approval keeps running while the next command (the approval) runs. The
    directory's path is as long as the one the README shows (not tmp_path: _replay.workdir)."""
    with _replay.workdir() as cwd:
        tour_in(cwd)


def tour_in(cwd):
    os.symlink(os.path.join(ROOT, "examples"), os.path.join(cwd, "examples"))
    session = _replay.Session(cwd, "README.md", _replay.VOLATILE + [_replay.HASH])
    text = readme()
    tour = []
    for match in re.finditer(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        tour.extend(_replay.steps(match.group(1), text.count("\n", 0, match.start(1)) + 1))
    assert [step.command.split()[:2] for step in tour][:3] == [["dcc-flow", "validate"], ["dcc-flow", "graph"],
                                                               ["dcc-flow", "run"]]
    try:
        for step in tour:
            session.run(step)
    finally:
        session.close()
    spec_hash = subprocess.run([sys.executable, "-c", "import dcc_flow; print(dcc_flow.WorkflowSpec.from_file("
                                "'examples/vendor_intake.yaml').spec_hash[:12])"], cwd=ROOT, env=session.env,
                               capture_output=True, text=True, check=True).stdout.strip()
    assert "examples/vendor_intake.yaml: ok (4 steps, hash %s)" % spec_hash in readme()


# --- the two commands -----------------------------------------------------------------------


def test_readme_two_commands_are_make_targets():
    two = blocks("sh")[0].splitlines()
    assert [line.split("#")[0].strip() for line in two] == ["make demo", "make test"]
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        makefile = f.read()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_make_demo_runs_the_intake_end_to_end():
    proc = subprocess.run(["make", "--no-print-directory", "demo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert '"status": "completed", "type": "result"' in out, out  # not a terminal: JSON lines
    assert "RUN " in out and "vendor_intake" in out  # the history table
    assert re.search(r"per_file\[2\]\.export\s+completed\s+attempt 1", out), out  # the timeline
    for name in ("hero", "chair", "lamp"):
        assert os.path.isfile(os.path.join(ROOT, ".dcc-flow", "vendor_intake", "fbx", name + ".fbx"))
