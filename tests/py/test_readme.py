"""The README says what really happens: its Python sessions run as shown (doctest), its tour's
commands print what it shows (run ids, times and durations aside), its YAML is the example file,
and `make demo` works as its "Two commands" say."""
import doctest
import os
import re
import shlex
import subprocess
import sys
import time

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

#: Parts of the output that change from run to run, and what they become before comparing.
VOLATILE = [
    (re.compile(r"\br[0-9a-f]{28}\b"), "RUN_ID"),
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b"), "TIME"),
    (re.compile(r"\(in [0-9hms.]+\)"), "(in DURATION)"),
    (re.compile(r"\b\d+(\.\d+)?(ms|s)\b"), "DURATION"),
    (re.compile(r"hash [0-9a-f]{12}"), "hash HASH"),  # checked separately: must be the file's hash
]


def normalise(lines):
    out = []
    for line in lines:
        for pattern, replacement in VOLATILE:
            line = pattern.sub(replacement, line)
        out.append(" ".join(line.split()))
    # Foreach iterations run concurrently: the order in which they started may differ run to run.
    return sorted(out) if any("[1]." in line for line in out) else out


def tour_commands():
    """(command, expected output lines) of every `$ dcc-flow|ls ...` in the README's console blocks."""
    steps = []
    for block in blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def screen(text):
    """What a terminal shows after text: each line as its last carriage-return redraw left it."""
    shown = []
    for line in text.replace("\r\n", "\n").split("\n"):
        visible = ""
        for part in line.split("\r"):
            visible = part + visible[len(part):]
        if visible.strip():
            shown.append(visible.rstrip())
    return shown


class Terminal:
    """A command on a pseudo-terminal, as in the tour; the output is read when it ends."""

    def __init__(self, argv, cwd, env):
        import pty

        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        self.out = b""

    def read_until(self, needle, timeout):
        import select

        deadline = time.monotonic() + timeout
        while needle.encode() not in self.out:
            assert time.monotonic() < deadline, "no %r in %r" % (needle, self.out)
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    self.out += os.read(self.master, 4096)
                except OSError:
                    break

    def finish(self, timeout=60):
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.out += chunk
        self.proc.wait(timeout=timeout)
        os.close(self.master)
        return self.proc.returncode, screen(self.out.decode())


def test_readme_tour_prints_what_it_shows(tmp_path):
    """Each command runs in a fresh working directory that has the repository's examples/, so the
    defaults the tour relies on (.dcc-flow/flow.db, .dcc-flow/vendor_intake) are its own. A command
    that waits for an approval keeps running while the next command (the approval) runs."""
    os.symlink(os.path.join(ROOT, "examples"), str(tmp_path / "examples"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DCC_FLOW", "VENDOR_INTAKE"))}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    waiting = None
    steps = tour_commands()
    assert [cmd.split()[:2] for cmd, _ in steps][:3] == [["dcc-flow", "validate"], ["dcc-flow", "graph"],
                                                         ["dcc-flow", "run"]]
    for command, expected in steps:
        argv = shlex.split(command)
        if argv[0] == "dcc-flow":
            argv = [sys.executable, "-m", "dcc_flow"] + argv[1:]
        term = Terminal(argv, str(tmp_path), env)
        if any("waits for approval" in line for line in expected):
            term.read_until("waits for approval", timeout=60)
            waiting = (command, expected, term)
            continue
        code, shown = term.finish()
        assert code == 0, (command, shown)
        assert normalise(shown) == normalise(expected), command
        if waiting is not None:
            w_command, w_expected, w_term = waiting
            code, shown = w_term.finish()
            assert code == 0, (w_command, shown)
            assert normalise(shown) == normalise(w_expected), w_command
            waiting = None
    assert waiting is None, "a command still waits for an approval the tour never gives"
    spec_hash = subprocess.run([sys.executable, "-c", "import dcc_flow; print(dcc_flow.WorkflowSpec.from_file("
                                "'examples/vendor_intake.yaml').spec_hash[:12])"], cwd=ROOT, env=env,
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
