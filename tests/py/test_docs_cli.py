"""docs/reference/cli/ (the index README.md and its parts, read as one page) says what the
command line really does.

- The console blocks marked ``<!-- doc-test: replay -->`` are replayed in order, in one temporary
  folder holding a copy of examples/ (and the files of the blocks marked
  ``<!-- doc-test: file NAME -->``), on a terminal: each command must print what the doc shows and
  exit with the code it shows (``[exit N]``, else 0); see tests/py/_replay.py for what is
  normalised.
- Every ``dcc-flow`` command line of the doc, replayed or not (``serve`` and its second terminal),
  is parsed by the real parser: an unknown command or option fails, except where the doc shows
  that usage error (``[exit 2]``).
- Every command has a section; its options table names every option and argument of its parser,
  and nothing else; its synopsis names only real options; it states the command's exit codes.
- The exit codes of the conventions and the environment variables the package reads are listed.

``UPDATE_DOCS=1 pytest tests/py/test_docs_cli.py -k replay`` rewrites the outputs of the replayed
blocks with what the commands print now (then read the diff).
"""

import contextlib
import io
import os
import re
import shlex
import shutil
import sys

import pytest

import _docpage
import _replay
from dcc_flow._cli import COMMAND_MODULES, _base, _build_parser, commands
from dcc_flow._cli._base import ParserExit, UsageError

ROOT = _replay.ROOT
DOC = _docpage.CLI

BLOCK = re.compile(r"(?:^<!-- doc-test: (?P<marker>[^>]*?) -->\n)?^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```$",
                   flags=re.S | re.M)


def page():
    return _docpage.Page(DOC)


def doc():
    return page().text


def blocks(text=None):
    """(marker or None, language, body, doc line of the body's first line, match) of every block."""
    text = doc() if text is None else text
    return [(m.group("marker"), m.group("lang"), m.group("body"), text.count("\n", 0, m.start("body")) + 1, m)
            for m in BLOCK.finditer(text)]


def sections():
    """The text of each ``## name`` section by name (the first word of the heading)."""
    parts = re.split(r"^## ", doc(), flags=re.M)[1:]
    return {part.split()[0].strip("`"): part for part in parts}


# --- the replay -------------------------------------------------------------------------------


def prepare(folder):
    shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(folder, "examples"),
                    ignore=shutil.ignore_patterns("__pycache__"))


def test_replayed_blocks_print_what_they_show():
    with _replay.workdir() as cwd:  # not tmp_path: its length would move where long texts are cut
        replay(cwd)


def test_the_replay_runs_where_paths_are_as_long_as_the_doc_s():
    """Under pytest-xdist tmp_path is 10 characters longer (popen-gwN/), which moved where ``show``
    cuts an error's first line that holds a path: the replay runs in _replay.workdir instead."""
    with _replay.workdir() as cwd:
        assert len(os.path.realpath(cwd)) == len(_replay.DOC_WORKDIR)
        assert os.listdir(cwd) == []
    assert not os.path.exists(cwd)


def replay(cwd):
    update = os.environ.get("UPDATE_DOCS", "") not in ("", "0")
    prepare(cwd)
    cli = page()
    session = _replay.Session(cwd, cli.where, record=update)
    text = cli.text
    found = blocks(text)
    replayed = 0
    try:
        for marker, _lang, body, line, _m in found:
            if marker and marker.startswith("file "):
                path = os.path.join(cwd, marker[len("file "):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(body)
            elif marker == "replay":
                for step in _replay.steps(body, line):
                    session.run(step)
                    replayed += 1
            else:
                assert marker is None, "%s: unknown marker %r" % (cli.where(line - 2), marker)
    finally:
        session.close()
    assert replayed > 40, "the doc's replayed examples are missing"
    if update:
        rewrite(cli, found, session)


def rewrite(cli, found, session):
    """Write the doc back with the output of each replayed command that printed something else
    than the doc shows (the others keep their text, paths and run ids as written)."""
    doc_ids = {real: doc_id for doc_id, real in session.ids.items()}
    text = cli.text
    out, last = [], 0
    for marker, _lang, body, line, m in found:
        if marker != "replay":
            continue
        lines = []
        for step in _replay.steps(body, line):
            _command, shown, code = session.recorded[step.line]
            shown = [_replay.RUN_ID.sub(lambda r: doc_ids.get(r.group(0), r.group(0)), s) for s in shown]
            same = _replay.normalise(shown) == _replay.normalise(step.expected) and code == step.exit_code
            lines.append("$ " + step.command)
            lines.extend(step.expected if same else shown)
            if code:
                lines.append("[exit %d]" % code)
        out.append(text[last:m.start("body")])
        out.append("\n".join(lines) + "\n")
        last = m.end("body")
    out.append(text[last:])
    cli.write("".join(out))


# --- command lines ----------------------------------------------------------------------------

_SHELL = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "2>&1", "&"}


def dcc_flow_args(command):
    """The arguments after ``dcc-flow`` / ``python -m dcc_flow`` in a shell line, or None."""
    words = shlex.split(command, comments=True)
    for i, word in enumerate(words):
        if word == "dcc-flow":
            rest = words[i + 1:]
            break
        if word == "-m" and words[i + 1:i + 2] == ["dcc_flow"]:
            rest = words[i + 2:]
            break
    else:
        return None
    for i, word in enumerate(rest):
        if word in _SHELL or word.startswith((">", "2>")):
            return rest[:i]
    return rest


def command_lines():
    """(doc line, marker, step) of every ``$ `` line in the doc's console blocks."""
    out = []
    for marker, lang, body, line, _m in blocks():
        if lang == "console":
            out.extend((step.line, marker, step) for step in _replay.steps(body, line))
    return out


def parse(args):
    """Parse a dcc-flow command line with the real parser; raise UsageError when it is wrong."""
    registry = commands()
    parser, children = _build_parser(registry)
    if args and not args[0].startswith("-") and args[0] not in registry:
        raise UsageError("unknown command %r" % args[0])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            namespace, extras = parser.parse_known_args(args)
        except ParserExit:  # --help, --version
            return
    if extras:
        raise UsageError("unrecognized arguments: %s" % " ".join(extras))
    if namespace.command is None:
        raise UsageError("missing command")


def test_every_command_line_parses():
    cli = page()
    checked = 0
    for line, _marker, step in command_lines():
        args = dcc_flow_args(step.command)
        if args is None:
            continue
        checked += 1
        if step.exit_code == 2:  # the doc shows this usage error
            with pytest.raises(UsageError):
                parse(args)
        else:
            try:
                parse(args)
            except UsageError as exc:
                pytest.fail("%s: $ %s: %s" % (cli.where(line), step.command, exc.message))
    assert checked > 50


def test_command_lines_outside_replayed_blocks_are_few_and_known():
    """What the test cannot replay: install lines, the Graphviz pipe, serve's two terminals."""
    skipped = {dcc_flow_args(step.command)[0] if dcc_flow_args(step.command) else step.command.split()[0]
               for _line, marker, step in command_lines() if marker != "replay"}
    assert skipped <= {"pip", "validate", "graph", "serve", "curl", "runs", "schedules", "approve"}, skipped


# --- sections and options ---------------------------------------------------------------------


def parsers():
    return _build_parser(commands())[1]


def test_every_command_has_a_section_in_order():
    found = [name for name in sections() if name in COMMAND_MODULES]
    assert found == list(COMMAND_MODULES)
    table = doc().split("## Conventions")[0]
    for name in COMMAND_MODULES:  # the index links each command to its section in its part
        assert re.search(r"\| \[`%s`\]\([\w-]+\.md#%s\) \|" % (name, name), table), "the command table lacks %s" % name
    assert "planned" not in doc()


def options_table(section):
    """The first cells of the section's table whose header is ``| option | meaning |``."""
    table = section.split("| option | meaning |\n|---|---|\n", 1)
    assert len(table) == 2, "no options table"
    cells = []
    for row in table[1].split("\n\n")[0].splitlines():
        cells.append(row.split(" | ")[0].lstrip("| "))
    return cells


OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_options_table_names_every_option_and_only_those(name):
    parser = parsers()[name]
    section = sections()[name]
    cells = options_table(section)
    documented = {opt for cell in cells for opt in OPTION.findall(cell)}
    positionals = {cell.strip("`").replace("\\|", "|") for cell in cells if not OPTION.search(cell)}
    options, metavars = set(), set()
    for action in parser._actions:
        if "-h" in action.option_strings:
            continue
        if action.option_strings:
            options.update(action.option_strings)
        else:
            metavars.add(action.metavar or action.dest)
    assert documented == options, "## %s: options table vs parser" % name
    assert positionals == metavars, "## %s: arguments table vs parser" % name
    for cell in cells:  # a value's name in the table is the parser's metavar
        match = re.search(r"`(--[\w-]+) ([A-Z][\w=]*)`", cell)
        if match:
            action = next(a for a in parser._actions if match.group(1) in a.option_strings)
            assert match.group(2) == (action.metavar or action.dest.upper()), cell


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_synopsis_names_real_options(name):
    parser = parsers()[name]
    section = sections()[name]
    synopsis = re.search(r"^```\n(dcc-flow %s\b.*?)^```" % name, section, flags=re.S | re.M)
    assert synopsis, "## %s has no synopsis block" % name
    options = {o for a in parser._actions for o in a.option_strings}
    named = set(OPTION.findall(synopsis.group(1).replace("dcc-flow", "")))
    assert named and named <= options, named - options
    for action in parser._actions:
        if action.option_strings and "-h" not in action.option_strings:
            assert named & set(action.option_strings), "## %s: the synopsis lacks %s" % (name, action.option_strings)


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_help_names_the_page_of_the_command(name):
    """``dcc-flow NAME --help`` ends with the part of the doc whose ``## NAME`` section it is."""
    epilog = commands()[name].epilog()
    reference = epilog.splitlines()[-1]
    assert reference == "reference: %s/%s#%s" % (DOC, _base.DOC_PARTS[name], name), reference
    path = os.path.join(ROOT, DOC, _base.DOC_PARTS[name])
    with open(path, encoding="utf-8") as f:
        assert re.search(r"^## %s$" % re.escape(name), f.read(), flags=re.M), "%s has no ## %s" % (path, name)


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_section_states_the_exit_codes(name):
    assert "**Exit codes:** %s." % commands()[name].exit_codes in sections()[name]


def test_conventions_list_every_exit_code():
    conventions = doc().split("## Conventions", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^  \| (\d+) \|", conventions, flags=re.M)
    assert rows == ["0", "1", "2", "3", "130"]


def test_every_environment_variable_is_documented():
    used = set()
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "python", "dcc_flow")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    used.update(re.findall(r"\bDCC_FLOW_[A-Z_]+\b", f.read()))
    table = doc().split("### Environment", 1)[1].split("\n\n", 2)[1]
    listed = set(re.findall(r"^\| `(DCC_FLOW_[A-Z_]+)` \|", table, flags=re.M))
    assert used and listed == used


def test_python_excerpts_are_the_example_files():
    cli = page()
    sources = []
    for name in os.listdir(os.path.join(ROOT, "examples")):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "examples", name), encoding="utf-8") as f:
                sources.append(f.read())
    for marker, lang, body, line, _m in blocks():
        if lang == "python" and marker is None:
            assert any(body in source for source in sources), "%s: not in examples/" % cli.where(line)


def test_links_exist():
    cli = page()
    for rel, text in zip(cli.files, cli.texts):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" not in target:
                assert os.path.exists(os.path.join(ROOT, os.path.dirname(rel), target)), (rel, target)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
