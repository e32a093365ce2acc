"""Replaying the console sessions of the docs (README.md's tour, docs/reference/cli/README.md) and comparing what
the commands print with what the doc shows.

A session is the ``$ command`` lines of the doc's ```` ```console ```` blocks, each followed by the
lines it prints and, when it does not exit with 0, a last line ``[exit N]``. Each command runs with
bash on a pseudo-terminal, as on the reader's screen (stdout and stderr interleaved, progress lines
redrawn in place), in one working directory for the whole session, with ``dcc-flow`` on PATH being
``python -m dcc_flow`` of this checkout. Run ids, times, durations, pids, versions and the working
directory's path are normalised before comparing (``normalise``). A command whose output says it
"waits for approval" (and that has no ``--timeout``) keeps running while the next commands run,
until a ``dcc-flow approve`` or ``dcc-flow cancel`` has answered it ("from another terminal").

Run ids the doc shows are real ones from when it was written; a later command that names one runs
with the id the replay got in its place. ``REPLAY_TRACE=1`` prints each command as it starts.
"""

import contextlib
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Pattern, Sequence, Tuple, Union

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The working directory docs/reference/cli/README.md shows in paths; the replay's own directory is shown as it.
DOC_WORKDIR = "/home/td/intake"



@contextlib.contextmanager
def workdir() -> Iterator[str]:
    """A fresh, empty working directory for a session whose real path is exactly as long as
    ``DOC_WORKDIR``, removed afterwards.

    The commands cut long texts at a fixed width (``dcc-flow show`` an error's first line at 160
    characters, ``status`` an output at 200): where the cut falls depends on the length of the
    paths inside, so a session run in pytest's ``tmp_path`` (``/tmp/pytest-of-USER/pytest-N/...``,
    longer under pytest-xdist by ``popen-gwN/``, longer again from pytest-1000 on) would print
    another cut than the doc shows. In a directory as long as ``DOC_WORKDIR`` it prints what the
    doc's reader sees. It is made in the temporary folder (``TMPDIR``, else ``/tmp``), which must
    be short enough: at most ``len(DOC_WORKDIR) - 10`` characters (``/tmp`` is 4).
    """
    random_part = 8  # tempfile.mkdtemp's random name part
    base = None
    for candidate in (tempfile.gettempdir(), "/tmp"):
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and len(real) + 1 + 1 + random_part <= len(DOC_WORKDIR):
            base = real
            break
    assert base is not None, (
        "the doc replay needs a working directory whose path is %d characters long, as %s: set TMPDIR to a "
        "folder of at most %d characters" % (len(DOC_WORKDIR), DOC_WORKDIR, len(DOC_WORKDIR) - 2 - random_part))
    prefix = "r" * (len(DOC_WORKDIR) - len(base) - 1 - random_part)
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    assert len(os.path.realpath(path)) == len(DOC_WORKDIR), path
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


RUN_ID = re.compile(r"\br[0-9a-f]{28}\b")

#: Parts of the output that change from run to run, and what they become before comparing.
VOLATILE: List[Tuple[Pattern[str], str]] = [
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "ISOTIME"),
    (RUN_ID, "RUN_ID"),
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\b"), "TIME"),
    (re.compile(r"^\d\d:\d\d:\d\d "), "CLOCK "),
    (re.compile(r"\(in [0-9dhms.]+\)"), "(in DURATION)"),
    (re.compile(r"\b\d+[dhm]\d\d[hms]\b"), "DURATION"),
    (re.compile(r"\b\d+(\.\d+)?(ms|s)\b"), "DURATION"),
    (re.compile(r'"seq": \d+'), '"seq": N'),
    # an attempt's process: the host and pid of the engine (an in-process tool) or of a worker
    (re.compile(r'"pid": \d+'), '"pid": PID'),
    (re.compile(r'"host": "[^"]*"'), '"host": "HOST"'),
    (re.compile(r"\bpid \d+@\S+"), "pid PID@HOST"),
    (re.compile(r"in use by pid \d+ \(.*?\) since \S+;"), "in use by pid PID (COMMAND) since TIME;"),
    # --version: the versions of the package, the library, Go and Python, and where they are
    (re.compile(r"/\S*/libdccflow\.(so|dylib|dll)\b"), "LIBRARY_PATH"),
    (re.compile(r"\bgo\d+(\.\d+)+"), "GO_VERSION"),
    (re.compile(r"^python \S+ \(.*\)$"), "python VERSION (PATH)"),
    (re.compile(r"\b\d+\.\d+\.\d+\b"), "VERSION"),
    # tracebacks: where Python and the package are installed, and line numbers, vary
    (re.compile(r'File "[^"]*/([^/"]+/[^/"]+)", line \d+'), r'File ".../\1", line N'),
    # `dcc-flow status` cuts each output at 200 characters: where depends on the paths inside
    (re.compile(r"^(output \S+: .{60}).*…$"), r"\1…"),
]

#: The lines of carets Python 3.11+ draws under a traceback's expression (older ones do not).
_CARETS = re.compile(r"^[\s|]*[\^~]+[\s\^~]*$")

#: A spec hash as `validate` prints it (the README checks it separately).
HASH = (re.compile(r"hash [0-9a-f]{12}"), "hash HASH")


def normalise(lines: Sequence[str], patterns: Sequence[Tuple[Pattern[str], str]] = VOLATILE) -> List[str]:
    out = []
    for line in lines:
        if _CARETS.match(line):
            continue
        for pattern, replacement in patterns:
            line = pattern.sub(replacement, line)
        out.append(" ".join(line.split()))
    # Foreach iterations run concurrently: the order in which they started may differ run to run.
    return sorted(out) if any("[1]." in line for line in out) else out


def screen(text: str) -> List[str]:
    """What a terminal shows after text: each line as its last carriage-return redraw left it."""
    shown = []
    for line in text.replace("\r\n", "\n").split("\n"):
        visible = ""
        for part in line.split("\r"):
            visible = part + visible[len(part):]
        if visible.strip():
            shown.append(visible.rstrip())
    return shown


class Step(NamedTuple):
    """One ``$ command`` of a doc, what it prints and its exit code; ``line`` is its line in the doc."""

    command: str
    expected: List[str]
    exit_code: int
    line: int


_EXIT = re.compile(r"^\[exit (\d+)\]$")


def steps(block: str, first_line: int = 1) -> List[Step]:
    """The commands of a console block (``first_line``: the doc line of the block's first line)."""
    found: List[Tuple[str, List[str], int]] = []
    for n, line in enumerate(block.splitlines()):
        if line.startswith("$ "):
            found.append((line[2:], [], first_line + n))
        elif found:
            found[-1][1].append(line)
    out = []
    for command, expected, line in found:
        code = 0
        if expected and _EXIT.match(expected[-1]):
            code = int(_EXIT.match(expected[-1]).group(1))  # type: ignore[union-attr]
            expected = expected[:-1]
        out.append(Step(command, expected, code, line))
    return out


class Terminal:
    """A shell command on a pseudo-terminal; the output is read when it ends."""

    def __init__(self, command: str, cwd: str, env: Dict[str, str]) -> None:
        import pty

        self.master, slave = pty.openpty()
        shell = shutil.which("bash") or "/bin/sh"
        self.proc = subprocess.Popen([shell, "-c", command], cwd=cwd, env=env, stdout=slave, stderr=slave,
                                     stdin=subprocess.DEVNULL)
        os.close(slave)
        self.out = b""

    def read_until(self, needle: str, timeout: float) -> List[str]:
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.out:
            assert time.monotonic() < deadline, "no %r in %r" % (needle, self.out)
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    self.out += os.read(self.master, 4096)
                except OSError:
                    break
        return screen(self.out.decode(errors="replace"))

    def finish(self, timeout: float = 60) -> Tuple[int, List[str]]:
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("still running after %ds; it printed %r" % (timeout, self.out))
            if not select.select([self.master], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.out += chunk
        self.proc.wait(timeout=timeout)
        os.close(self.master)
        return self.proc.returncode, screen(self.out.decode(errors="replace"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Session:
    """Replays steps in ``cwd``, one after the other, keeping what they leave there (files, the
    database). ``patterns`` are what ``normalise`` replaces; ``where`` names the doc in messages:
    a path, or a function of a doc line giving 'FILE line N' (a page split into parts)."""

    def __init__(self, cwd: str, where: Union[str, Callable[[int], str]], patterns: Sequence[Tuple[Pattern[str], str]] = VOLATILE,
                 record: bool = False) -> None:
        self.cwd, self.where, self.patterns = cwd, where, patterns
        #: With ``record``, nothing is compared: each step's (command run, lines shown, exit code)
        #: is kept here by its doc line, to rewrite the doc with.
        self.record = record
        self.recorded: Dict[int, Tuple[str, List[str], int]] = {}
        self.ids: Dict[str, str] = {}  # run id in the doc -> the replay's
        self.waiting: Optional[Tuple[Step, Terminal]] = None
        bin_dir = os.path.join(cwd, ".bin")
        os.makedirs(bin_dir, exist_ok=True)
        script = os.path.join(bin_dir, "dcc-flow")
        with open(script, "w", encoding="utf-8") as f:
            f.write('#!/bin/sh\nexec "%s" -m dcc_flow "$@"\n' % sys.executable)
        os.chmod(script, 0o755)
        os.symlink(sys.executable, os.path.join(bin_dir, "python3"))  # for the doc's one-line scripts
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DCC_FLOW", "VENDOR_INTAKE"))}
        self.env.update(PYTHONPATH=os.path.join(ROOT, "python"), COLUMNS="100",
                        PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
                        DCC_FLOW_USER="td")  # who resumes, approves, pauses: the doc's user

    def at(self, line: int) -> str:
        """'FILE line N' of a doc line."""
        if callable(self.where):
            return self.where(line)
        return "%s line %d" % (self.where, line)

    def shown(self, lines: Sequence[str]) -> List[str]:
        """The lines a command printed, with the replay's working directory shown as the doc's."""
        real = os.path.realpath(self.cwd)
        return [line.replace(real, DOC_WORKDIR).replace(self.cwd, DOC_WORKDIR) for line in lines]

    def check(self, step: Step, code: int, lines: Sequence[str]) -> None:
        shown = self.shown(lines)
        if self.record:
            command = RUN_ID.sub(lambda m: self.ids.get(m.group(0), m.group(0)), step.command)
            self.recorded[step.line] = (command, shown, code)
            self.learn_ids(step.expected, shown)
            return
        where = "%s: $ %s" % (self.at(step.line), step.command)
        assert normalise(shown, self.patterns) == normalise(step.expected, self.patterns), where
        assert code == step.exit_code, "%s: exit code %d, the doc says %d\n%s" % (
            where, code, step.exit_code, "\n".join(shown))
        self.learn_ids(step.expected, shown)

    def learn_ids(self, expected: Sequence[str], shown: Sequence[str]) -> None:
        for doc_id, real_id in zip(RUN_ID.findall("\n".join(expected)), RUN_ID.findall("\n".join(shown))):
            self.ids.setdefault(doc_id, real_id)

    def run(self, step: Step) -> None:
        command = RUN_ID.sub(lambda m: self.ids.get(m.group(0), m.group(0)), step.command)
        if os.environ.get("REPLAY_TRACE"):
            print("replay %s: $ %s" % (self.at(step.line), command), file=sys.stderr, flush=True)
        term = Terminal(command, self.cwd, self.env)
        if any("waits for approval" in line for line in step.expected) and "--timeout" not in command:
            assert self.waiting is None, "%s: two commands wait at once" % self.at(step.line)
            self.learn_ids(step.expected, self.shown(term.read_until("waits for approval", timeout=60)))
            self.waiting = (step, term)
            return
        try:
            code, lines = term.finish()
        finally:
            term.kill()
        self.check(step, code, lines)
        words = command.split()
        answered = code == 0 and words[:1] == ["dcc-flow"] and words[1:2] in (["approve"], ["cancel"])
        if self.waiting is not None and answered:
            waiting, self.waiting = self.waiting, None
            try:
                code, lines = waiting[1].finish()
            finally:
                waiting[1].kill()
            self.check(waiting[0], code, lines)

    def close(self) -> None:
        """Stop a command left waiting; fail if there was one (the doc never answers it)."""
        if self.waiting is not None:
            step, term = self.waiting
            self.waiting = None
            term.kill()
            raise AssertionError("%s: $ %s still waits for an approval the doc never gives"
                                 % (self.at(step.line), step.command))
