"""The dcc-flow command line: `python -m dcc_flow ...` in a subprocess, and `main([...])` in-process.

Contract (docs/reference/cli/README.md): results on stdout, diagnostics on stderr; an error is one line, never a
traceback; exit code 0 success, 1 failure, 2 usage error; `--help` everywhere, with examples.
"""

import io
import json
import os
import re
import subprocess
import sys

import pytest

import dcc_flow
from conftest import PYTHON_DIR, ROOT, VENDOR_INTAKE
from dcc_flow import _cli
from dcc_flow.__main__ import main

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "graph")

# Three problems found at three places; the file parses, so they are semantic problems.
BAD_SPEC = """\
name: bad
steps:
  - id: export
    tool: maya.export_fbx
    timeout_secs: 0
  - id: qc
    tool: maya__qc
    depends_on: [lsit]
"""
# The start of each line: FILE:LINE:COLUMN: CODE: and the step the library names (its wording may change).
BAD_LINES = [
    'bad.yaml:4:11: invalid_tool_name: steps[0] (id "export"): tool name "maya.export_fbx" is not valid',
    'bad.yaml:5:19: invalid_policy: steps[0] (id "export"): `timeout_secs` must be between 0.001 and 31536000',
    'bad.yaml:8:17: unknown_dependency: steps[1] (id "qc"): `depends_on` names "lsit"',
    "bad.yaml: invalid (3 errors)",
]


def assert_bad_lines(lines):
    assert len(lines) == len(BAD_LINES), lines
    for line, start in zip(lines, BAD_LINES):
        assert line.startswith(start), (line, start)


# Three problems found while parsing (structure): the spec never gets built.
BAD_STRUCTURE = """\
steps:
  - id: export
    tool: maya__export_fbx
    retries: 3
  - id: qc
    tol: maya__qc
"""

WARN_SPEC = "steps:\n  - { id: export, tool: maya__export_fbx, retry: { max_attempts: 3, jitter: 25 } }\n"

ERROR_LINE = re.compile(r"^dcc-flow( [a-z]+)?: error: \S.*$")


@pytest.fixture()
def files(tmp_path, monkeypatch):
    """A folder with good.yaml, good.json, bad.yaml, structure.yaml and warn.yaml; it is the cwd."""
    (tmp_path / "good.yaml").write_text(VENDOR_INTAKE, encoding="utf-8")
    (tmp_path / "good.json").write_text(dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE).to_json(), "utf-8")
    (tmp_path / "bad.yaml").write_text(BAD_SPEC, encoding="utf-8")
    (tmp_path / "structure.yaml").write_text(BAD_STRUCTURE, encoding="utf-8")
    (tmp_path / "warn.yaml").write_text(WARN_SPEC, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_cli(*args, stdin=None, env=None, cwd=None):
    """`python -m dcc_flow ARGS` with PYTHONPATH=python; returns the CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = PYTHON_DIR
    full_env.pop("DCC_FLOW_DEBUG", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "dcc_flow"] + list(args),
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=full_env,
        cwd=cwd or ROOT,
        timeout=60,
    )


def call(capsys, *args):
    """`main(list(args))` in-process; returns (exit code, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err, prog="dcc-flow"):
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert ERROR_LINE.match(lines[0]) and lines[0].startswith(prog + ": error: "), err
    assert "Traceback" not in err


# --- subprocess: the real entry point ----------------------------------------------------------------


def test_python_m_validate_ok():
    result = run_cli("validate", "examples/vendor_intake.yaml")
    spec = dcc_flow.WorkflowSpec.from_file(os.path.join(ROOT, "examples", "vendor_intake.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "examples/vendor_intake.yaml: ok (%d steps, hash %s)\n" % (
        spec.step_count,
        spec.spec_hash[:12],
    )
    assert result.stderr == ""


def test_python_m_validate_bad_spec(files):
    result = run_cli("validate", "bad.yaml", cwd=str(files))
    assert result.returncode == 1
    assert_bad_lines(result.stdout.splitlines())
    assert result.stderr == ""


def test_python_m_missing_file_is_one_line(files):
    result = run_cli("validate", "nope.yaml", cwd=str(files))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "dcc-flow validate: error: cannot read nope.yaml: No such file or directory\n"


def test_python_m_usage_error_exit_2():
    result = run_cli("validate")
    assert result.returncode == 2
    assert result.stdout == ""
    assert_one_error_line(result.stderr, "dcc-flow validate")
    assert "FILE" in result.stderr and "dcc-flow validate --help" in result.stderr


def test_serve_lease_secs_needs_a_postgresql_database(tmp_path):
    # --lease-secs is the lease of engines sharing a PostgreSQL database (docs/operations/cluster.md); with a
    # SQLite file it would do nothing, so it is refused before anything is served.
    result = run_cli("serve", "--lease-secs", "2", "--db", str(tmp_path / "flow.db"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert_one_error_line(result.stderr, "dcc-flow serve")
    assert "--lease-secs needs --db postgresql://" in result.stderr
    assert not (tmp_path / "flow.db").exists()


def test_serve_close_grace_secs_needs_a_postgresql_database(tmp_path):
    # --close-grace-secs is how long a closing engine waits before it hands runs to the others
    # (docs/operations/cluster.md, "Closing an engine"): nothing to hand over with a SQLite file.
    result = run_cli("serve", "--close-grace-secs", "2", "--db", str(tmp_path / "flow.db"))
    assert result.returncode == 2
    assert_one_error_line(result.stderr, "dcc-flow serve")
    assert "--close-grace-secs needs --db postgresql://" in result.stderr
    assert not (tmp_path / "flow.db").exists()


def test_python_m_no_command():
    result = run_cli()
    assert result.returncode == 2
    assert_one_error_line(result.stderr)
    assert "missing command" in result.stderr and "validate" in result.stderr


def test_python_m_help_and_version():
    result = run_cli("--help")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: dcc-flow ")
    result = run_cli("--version")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "dcc-flow %s" % dcc_flow.__version__
    assert lines[1].startswith("library %s (C ABI " % dcc_flow.library_version()["version"])
    assert lines[2].startswith("python ")


def test_python_m_graph_matches_the_function():
    path = os.path.join(GOLDEN, "branch.yaml")
    spec = dcc_flow.WorkflowSpec.from_file(path)
    for args, fmt in (([], "mermaid"), (["--format", "dot"], "dot"), (["-f", "mermaid"], "mermaid")):
        result = run_cli("graph", path, *args)
        assert result.returncode == 0, result.stderr
        assert result.stdout == dcc_flow.graph(spec, fmt)
        assert result.stderr == ""


def test_python_m_reads_stdin():
    result = run_cli("validate", "-", stdin=VENDOR_INTAKE)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"<stdin>: ok \(3 steps, hash [0-9a-f]{12}\)\n", result.stdout)
    json_text = dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE).to_json()
    result = run_cli("graph", "-", "--format", "dot", stdin=json_text)
    assert result.returncode == 0 and result.stdout.startswith("digraph vendor_intake {\n")
    result = run_cli("validate", "-", stdin=BAD_SPEC)
    assert result.returncode == 1 and result.stdout.startswith("<stdin>:4:11: invalid_tool_name: ")


def test_python_m_library_missing_is_one_line(tmp_path):
    result = run_cli("validate", "examples/vendor_intake.yaml", env={"DCC_FLOW_LIBRARY": str(tmp_path / "no.so")})
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "dcc-flow validate")
    assert "library" in result.stderr and "no.so" in result.stderr
    # --version still works and says why the library is not there.
    result = run_cli("--version", env={"DCC_FLOW_LIBRARY": str(tmp_path / "no.so")})
    assert result.returncode == 0
    assert result.stdout.splitlines()[1].startswith("library not loaded: ")


def test_console_script_is_declared():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as fh:
        text = fh.read()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^dcc-flow = "dcc_flow\.__main__:main"$', section, re.M)
    assert callable(main) and main is _cli.main


# --- validate ---------------------------------------------------------------------------------------


def test_validate_ok_prints_steps_and_hash(files, capsys):
    spec = dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    code, out, err = call(capsys, "validate", "good.yaml", "good.json")
    assert code == 0 and err == ""
    assert out == "good.yaml: ok (3 steps, hash {0})\ngood.json: ok (3 steps, hash {0})\n".format(spec.spec_hash[:12])


def test_validate_reports_three_problems_with_positions(files, capsys):
    code, out, err = call(capsys, "validate", "bad.yaml")
    assert code == 1 and err == ""
    assert_bad_lines(out.splitlines())


def test_validate_reports_parse_time_problems(files, capsys):
    code, out, err = call(capsys, "validate", "structure.yaml")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert [line.split(": ")[0:2] for line in lines[:3]] == [
        ["structure.yaml:4:5", "unknown_field"],
        ["structure.yaml:5:5", "missing_field"],
        ["structure.yaml:6:5", "unknown_field"],
    ]
    assert lines[2].endswith('unknown field "tol"; did you mean "tool"?')
    assert lines[3] == "structure.yaml: invalid (3 errors)"


def test_validate_warning_is_not_a_failure(files, capsys):
    code, out, err = call(capsys, "validate", "warn.yaml")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("warn.yaml:2:77: warning: jitter_clamped: ")
    assert re.fullmatch(r"warn\.yaml: ok \(1 step, hash [0-9a-f]{12}\)", lines[1])


def test_validate_checks_every_file(files, capsys):
    code, out, err = call(capsys, "validate", "good.yaml", "missing.yaml", "bad.yaml", "warn.yaml")
    assert code == 1
    assert out.startswith("good.yaml: ok (")
    assert "bad.yaml: invalid (3 errors)\n" in out and "warn.yaml: ok (1 step" in out
    assert err == "dcc-flow validate: error: cannot read missing.yaml: No such file or directory\n"


def test_validate_directory_and_binary_files(files, capsys):
    (files / "sub").mkdir()
    (files / "latin1.yaml").write_bytes(b"name: caf\xe9\nsteps: []\n")
    code, out, err = call(capsys, "validate", "sub")
    assert code == 1 and out == ""
    assert_one_error_line(err, "dcc-flow validate")
    assert "cannot read sub" in err
    code, out, err = call(capsys, "validate", "latin1.yaml")
    assert code == 1 and err == ""
    assert out.startswith("latin1.yaml:1:10: parse_error: spec text is not valid UTF-8")


def test_validate_json(files, capsys):
    code, out, err = call(capsys, "validate", "--json", "good.yaml", "bad.yaml", "structure.yaml", "gone.yaml")
    assert code == 1
    assert err == "dcc-flow validate: error: cannot read gone.yaml: No such file or directory\n"
    doc = json.loads(out)
    assert [d["file"] for d in doc] == ["good.yaml", "bad.yaml", "structure.yaml", "gone.yaml"]
    good, bad, structure, gone = doc
    spec = dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    assert good == {
        "file": "good.yaml",
        "ok": True,
        "name": "vendor_intake",
        "step_count": 3,
        "spec_hash": spec.spec_hash,
        "problems": [],
    }
    assert bad["ok"] is False and bad["name"] == "bad" and bad["step_count"] == 2
    assert [(p["code"], p["line"], p["column"], p["step_id"]) for p in bad["problems"]] == [
        ("invalid_tool_name", 4, 11, "export"),
        ("invalid_policy", 5, 19, "export"),
        ("unknown_dependency", 8, 17, "qc"),
    ]
    assert structure["ok"] is False and structure["spec_hash"] is None and len(structure["problems"]) == 3
    assert gone["ok"] is False
    assert gone["problems"] == [
        {"code": "read_error", "severity": "error", "message": "cannot read gone.yaml: No such file or directory"}
    ]


def test_validate_json_all_ok_exit_0(files, capsys):
    code, out, _ = call(capsys, "validate", "--json", "warn.yaml")
    assert code == 0
    (entry,) = json.loads(out)
    assert entry["ok"] is True and entry["problems"][0]["severity"] == "warning"


# --- graph ------------------------------------------------------------------------------------------


def test_graph_to_stdout(files, capsys):
    code, out, err = call(capsys, "graph", "good.yaml")
    assert code == 0 and err == ""
    assert out == dcc_flow.graph(dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE))


def test_graph_output_file_and_format_from_suffix(files, capsys):
    spec = dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    for name, fmt, extra in (
        ("flow.dot", "dot", []),
        ("flow.gv", "dot", []),
        ("flow.mmd", "mermaid", []),
        ("forced.dot", "mermaid", ["--format", "mermaid"]),
    ):
        code, out, err = call(capsys, "graph", "good.yaml", "-o", name, *extra)
        assert (code, out, err) == (0, "", "")
        assert (files / name).read_text(encoding="utf-8") == dcc_flow.graph(spec, fmt)


def test_graph_invalid_spec_lists_problems_and_draws_nothing(files, capsys):
    code, out, err = call(capsys, "graph", "bad.yaml")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert_bad_lines(lines[:3] + ["bad.yaml: invalid (3 errors)"])
    assert lines[3] == "dcc-flow graph: error: bad.yaml is not a valid workflow (3 errors); nothing drawn"


def test_graph_warnings_go_to_stderr(files, capsys):
    code, out, err = call(capsys, "graph", "warn.yaml")
    assert code == 0 and out.startswith("flowchart TD\n")
    assert err.startswith("warn.yaml:2:77: warning: jitter_clamped: ")


def test_graph_missing_file_and_unwritable_output(files, capsys):
    code, out, err = call(capsys, "graph", "nope.yaml")
    assert code == 1 and out == ""
    assert err == "dcc-flow graph: error: cannot read nope.yaml: No such file or directory\n"
    code, out, err = call(capsys, "graph", "good.yaml", "-o", str(files / "no" / "such" / "dir.dot"))
    assert code == 1 and out == ""
    assert_one_error_line(err, "dcc-flow graph")
    assert "cannot write" in err


# --- usage errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,prog,words",
    [
        ([], "dcc-flow", ["missing command", "validate, run, status, runs, show, cancel, approve, pause, unpause, "
                                              "resume, prune, schedules, workflows, serve, worker, pools, graph"]),
        (["valdate", "x.yaml"], "dcc-flow", ["unknown command 'valdate'", "did you mean 'validate'?"]),
        (["frobnicate"], "dcc-flow", ["unknown command 'frobnicate'"]),
        (["--bogus"], "dcc-flow", ["unrecognized arguments: --bogus"]),
        (["validate"], "dcc-flow validate", ["required", "FILE"]),
        (["validate", "--jsn", "good.yaml"], "dcc-flow validate", ["--jsn", "did you mean --json?"]),
        (["graph"], "dcc-flow graph", ["required", "FILE"]),
        (["graph", "good.yaml", "--format", "svg"], "dcc-flow graph", ["invalid choice: 'svg'"]),
        (["graph", "good.yaml", "bad.yaml"], "dcc-flow graph", ["unrecognized arguments: bad.yaml"]),
        (["graph", "good.yaml", "--form", "dot"], "dcc-flow graph", ["--form"]),  # no abbreviations
    ],
)
def test_usage_errors(files, capsys, args, prog, words):
    code, out, err = call(capsys, *args)
    assert code == 2 and out == ""
    assert_one_error_line(err, prog)
    assert "(see '%s --help')" % prog in err
    for word in words:
        assert word in err


# --- help -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,examples",
    [
        (["--help"], ["dcc-flow validate flows/vendor_intake.yaml", "dcc-flow graph flow.yaml"]),
        (["-h"], ["examples:"]),
        (["validate", "--help"], ["dcc-flow validate flows/*.yaml", "dcc-flow validate --json", "validate -"]),
        (["graph", "--help"], ["--format dot | dot -Tsvg -o flow.svg", "-o flow.dot"]),
    ],
)
def test_help_has_examples(capsys, args, examples):
    code, out, err = call(capsys, *args)
    assert code == 0 and err == ""
    assert out.startswith("usage: dcc-flow")
    assert "examples:" in out and "exit codes:" in out
    for example in examples:
        assert example in out


def test_top_help_lists_every_command(capsys):
    _, out, _ = call(capsys, "--help")
    commands = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    names = [line.split()[0] for line in commands.splitlines()]
    assert names == list(_cli.COMMAND_MODULES) == list(_cli.commands())


def test_help_of_every_command(capsys):
    for name, command in _cli.commands().items():
        code, out, err = call(capsys, name, "--help")
        assert code == 0 and err == "", name
        assert out.startswith("usage: dcc-flow %s " % name)
        assert command.summary and command.examples, name
        for _comment, line in command.examples:
            assert line in out


def test_every_command_module_is_registered():
    folder = os.path.dirname(_cli.__file__)
    modules = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))
    assert modules == sorted(_cli.COMMAND_MODULES)


# --- failures are one line --------------------------------------------------------------------------


def test_main_never_raises_system_exit(files, capsys):
    for args in ([], ["--help"], ["--version"], ["validate"], ["validate", "--help"], ["nope"]):
        code = main(args)
        assert isinstance(code, int)
    capsys.readouterr()


def test_unexpected_exception_is_one_line(files, capsys, monkeypatch):
    command = _cli.commands()["validate"]

    def boom(args, ctx):
        raise RuntimeError("kaput\nsecond line")

    monkeypatch.setattr(command, "run", boom)
    monkeypatch.delenv("DCC_FLOW_DEBUG", raising=False)
    code, out, err = call(capsys, "validate", "good.yaml")
    assert code == 1 and out == ""
    assert_one_error_line(err, "dcc-flow validate")
    assert "unexpected RuntimeError: kaput; second line" in err and "DCC_FLOW_DEBUG=1" in err
    monkeypatch.setenv("DCC_FLOW_DEBUG", "1")
    with pytest.raises(RuntimeError, match="kaput"):
        main(["validate", "good.yaml"])


def test_keyboard_interrupt_exit_130(files, capsys, monkeypatch):
    def interrupted(args, ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli.commands()["graph"], "run", interrupted)
    code, out, err = call(capsys, "graph", "good.yaml")
    assert code == 130 and out == "" and err == "dcc-flow graph: interrupted\n"


def test_broken_pipe_is_quiet(files, capsys, monkeypatch):
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = main(["graph", "good.yaml"])
    monkeypatch.undo()
    assert code == 1
    assert capsys.readouterr().err == ""


def test_unencodable_output_is_escaped(files, capsys, monkeypatch):
    (files / "unicode.yaml").write_text(
        'steps:\n  - { id: loop, kind: foreach, items: ["caf\u00e9 \u2603"], steps: [{ id: b, tool: t }] }\n',
        encoding="utf-8",
    )
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", ascii_out)
    code = main(["graph", "unicode.yaml"])
    ascii_out.flush()
    monkeypatch.undo()
    assert code == 0
    assert "\\xe9 \\u2603" in raw.getvalue().decode("ascii")


def test_look_only_commands_say_the_database_does_not_exist(tmp_path):
    """runs, show, status and cancel on a --db that is not there say so, rather than "no runs"
    or "no run with id" of what reads like an empty database; and they still create nothing."""
    db = str(tmp_path / "nope.db")
    got = run_cli("runs", "--db", db)
    assert got.returncode == 0 and "(no runs: the database %s does not exist" % db in got.stdout, got.stdout
    for args in (("show", "last"), ("status", "r123"), ("cancel", "r123")):
        got = run_cli(*args, "--db", db)
        assert got.returncode == 1 and "the database %s does not exist" % db in got.stderr, (args, got.stderr)
        assert "DCC_FLOW_DB" in got.stderr
    assert not os.path.exists(db)
    (tmp_path / "empty").mkdir()
    real = str(tmp_path / "empty" / "flow.db")
    dcc_flow.Engine(real).close()  # exists, no runs: the plain messages
    got = run_cli("runs", "--db", real)
    assert got.stdout.rstrip().endswith("(no runs)"), got.stdout
    got = run_cli("status", "r123", "--db", real)
    assert "does not exist" not in got.stderr and 'no run with id "r123"' in got.stderr, got.stderr


def test_late_positionals_convert_and_refuse_as_argparse_does():
    import argparse

    from dcc_flow._cli import UsageError, _late_positionals

    def parse(*argv):
        p = argparse.ArgumentParser(prog="x")
        p.add_argument("r")
        p.add_argument("--db")
        p.add_argument("n", nargs="?", type=int)
        p.add_argument("m", nargs="?", choices=["a", "b"])
        p.add_argument("rest", nargs="*")
        ns, extras = p.parse_known_args(list(argv))
        return ns, _late_positionals(p, ns, extras)

    ns, left = parse("R", "--db", "f", "3", "a", "s", "-", "--later")
    assert (ns.n, ns.m, ns.rest, left) == (3, "a", ["s", "-"], ["--later"])
    ns, left = parse("R", "4", "--db", "f", "b")  # n given before the option keeps its word
    assert (ns.n, ns.m, left) == (4, "b", [])
    with pytest.raises(UsageError, match="argument n: invalid int value: 'x'"):
        parse("R", "--db", "f", "x")
    with pytest.raises(UsageError, match="argument m: invalid choice: 'zz'"):
        parse("R", "--db", "f", "3", "zz")
