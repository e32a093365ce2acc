"""What a run looks like from Python: ``RunResult`` (its state), ``StepRecord`` and ``AttemptRecord``
(a step instance and the calls it made), ``RunPage`` (a page of ``Engine.runs``) and
``RunFailedError`` (``RunResult.raise_for_status``).

Plain records built from the library's JSON answers: this module calls nothing, so the engine
(``_engine``) and the dry run (``_dryrun``) both import it and neither imports the other at run time.
"""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ._errors import DccFlowError
from ._spec import StepStatus, WorkflowStatus

__all__ = ["RunResult", "StepRecord", "AttemptRecord", "RunPage", "RunFailedError"]


class RunFailedError(DccFlowError):
    """``RunResult.raise_for_status()``: the run did not complete."""


class AttemptRecord:
    """One attempt of a ``tool`` or ``tool_remote`` step instance: a call it made
    (``StepRecord.attempts``, docs/reference/python/running.md "Attempts")."""

    __slots__ = ("attempt", "tool", "status", "args", "worker", "host", "pid", "error", "exit", "started_at",
                 "finished_at", "env", "files")

    def __init__(self, d: Mapping[str, Any]) -> None:
        #: 1, 2, ... counted across the run's resumes: a resumed step's attempts follow those made
        #: before. The ``attempt`` of the step's ``logs`` lines and ``progress`` is this number.
        self.attempt: int = int(d.get("attempt") or 0)
        #: The tool called (``"DCC/TOOL"`` for a ``tool_remote`` step).
        self.tool: str = d.get("tool") or ""
        #: ``running`` while in flight, then ``completed``, ``failed``, ``cancelled`` or
        #: ``interrupted``.
        self.status = StepStatus(d.get("status", "running"))
        #: The rendered arguments of the call: secrets redacted (``"[redacted]"``: names the tool's
        #: schema marks ``writeOnly``/``x-secret``/``format: password``, and any name containing
        #: token, password, passwd, secret, api_key or apikey), at most 64 KiB of JSON; larger,
        #: ``{"_truncated": True, "bytes": N, "preview": "..."}``. None when not recorded.
        self.args: Optional[Dict[str, Any]] = d.get("args")
        #: The pool worker (``"POOL/PID"``) or the engine of a queued call; ``""`` in-process.
        self.worker: str = d.get("worker") or ""
        #: The host and pid of the process that ran the call where known (the engine's own for an
        #: in-process tool); ``""`` and 0 otherwise.
        self.host: str = d.get("host") or ""
        self.pid: int = int(d.get("pid") or 0)
        #: The failure (``kind``, ``message``, ``trace``?), None when the attempt did not fail.
        self.error: Optional[Dict[str, Any]] = d.get("error")
        #: For a lost worker (``error["kind"] == "worker_lost"``): how its process ended,
        #: ``"exit status 139"``, ``"signal: killed"``; ``""`` otherwise.
        self.exit: str = d.get("exit") or ""
        #: RFC 3339 UTC times; ``finished_at`` is None while the attempt runs.
        self.started_at: Optional[str] = d.get("started_at")
        self.finished_at: Optional[str] = d.get("finished_at")
        #: The environment of the process that ran the call (``{"dcc": "maya", "version": ...}``:
        #: what its host or worker reported, else the engine's ``environment``); None when none.
        self.env: Optional[Dict[str, Any]] = d.get("env")
        #: The files the attempt read and wrote (docs/guide/assets.md): dicts of ``role``
        #: (``"read"``/``"write"``), ``path``, ``state`` (``ok``, ``missing``, ``unreadable``,
        #: ``unstable``), ``size``, ``mtime``, ``hash`` (``"blake3:..."`` when ok), ``error``.
        self.files: List[Dict[str, Any]] = list(d.get("files") or ())

    def __repr__(self) -> str:
        return "AttemptRecord(attempt=%d, status=%s%s)" % (
            self.attempt, self.status.value, ", error=%r" % self.error.get("kind") if self.error else "")


class StepRecord:
    """One step instance of a run (a foreach iteration's step is its own instance)."""

    __slots__ = ("key", "step_id", "kind", "status", "attempt", "cached", "output", "file_refs", "error",
                 "worker", "logs", "logs_dropped", "progress", "waiting", "child_run_id", "started_at", "finished_at",
                 "args", "attempts", "attempts_dropped")

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.key: str = d.get("key", "")
        self.step_id: str = d.get("step_id", "")
        self.kind: str = d.get("kind", "")
        self.status = StepStatus(d.get("status", "pending"))
        #: The attempts made (the record's ``attempts``): the number of the last one, 0 when none ran
        #: (a cached step, an approval, a container).
        self.attempt: int = int(d.get("attempts") or 0)
        self.cached: bool = bool(d.get("cached"))
        self.output: Any = d.get("output")
        self.file_refs: Any = d.get("file_refs")
        self.error: Optional[Dict[str, Any]] = d.get("error")
        #: The pool worker that ran the last attempt, ``"POOL/PID"`` (docs/guide/pools.md), or the id of
        #: the engine that ran it from the tool-call queue (docs/operations/cluster.md); ``""`` when neither.
        self.worker: str = d.get("worker") or ""
        #: The output lines of the step's attempts, oldest first: dicts with ``stream``
        #: (``"stdout"`` or ``"stderr"`` for what a pool worker's tool printed, docs/guide/pools.md
        #: "Output"; ``"log"`` for ``current_call().log()``, with its ``fields``), ``text`` and
        #: ``attempt``; later kinds of entries may add fields. ``logs_dropped`` counts older lines
        #: not kept (at most 1,000 lines and 256 KiB are kept per step: docs/reference/limits.md).
        self.logs: List[Dict[str, Any]] = list(d.get("logs") or [])
        self.logs_dropped: int = int(d.get("logs_dropped") or 0)
        #: The latest progress the tool of the current (or last) attempt reported with
        #: ``current_call().progress()``: ``{"done", "total"?, "message"?, "attempt"}``, or None.
        self.progress: Optional[Dict[str, Any]] = d.get("progress")
        #: What a ``waiting_resources`` step waits for (docs/guide/resources.md, "Waiting, visibly"):
        #: ``{"resources": {"houdini": 1}, "place": 2, "of": 3, "since": "2026-…Z"}`` (``place`` 1 is
        #: served next in the queue of the engine running it, of ``of`` waiters; ``other_engines``
        #: when it is first there and other engines of a shared database hold the units); None
        #: in every other status.
        self.waiting: Optional[Dict[str, Any]] = d.get("waiting")
        #: The newest child run of a ``workflow`` step (docs/reference/spec.md, "workflow"); ``""`` for
        #: other kinds.
        self.child_run_id: str = d.get("child_run_id") or ""
        self.started_at: Optional[str] = d.get("started_at")
        self.finished_at: Optional[str] = d.get("finished_at")
        #: The rendered arguments of the latest attempt (``AttemptRecord.args``: secrets redacted,
        #: bounded); None when none was recorded (not a tool step, or an engine without a record).
        self.args: Optional[Dict[str, Any]] = d.get("args")
        #: Every attempt of a ``tool``/``tool_remote`` step, oldest first, across resumes: the first
        #: 10 and the last 100 are kept, ``attempts_dropped`` counts those between (docs/reference/limits.md).
        self.attempts: Tuple[AttemptRecord, ...] = tuple(AttemptRecord(a) for a in d.get("attempt_history") or ())
        self.attempts_dropped: int = int(d.get("attempts_dropped") or 0)

    def __repr__(self) -> str:
        return "StepRecord(key=%r, status=%s, attempt=%d%s)" % (
            self.key,
            self.status.value,
            self.attempt,
            ", cached=True" if self.cached else "",
        )


class RunResult:
    """The state of a run: status, error, per-step records and the outputs of top-level steps."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        outputs = d.get("outputs") or {}
        for s in d.get("steps") or ():  # the library sends a top-level step's output once, in outputs
            if "output" not in s and s.get("key") == s.get("step_id") and s.get("step_id") in outputs:
                s["output"] = outputs[s["step_id"]]
        self.raw: Dict[str, Any] = dict(d)
        self.run_id: str = d.get("run_id", "")
        self.name: str = d.get("name", "")
        self.status = WorkflowStatus(d.get("status", "pending"))
        self.error: Optional[Dict[str, Any]] = d.get("error")
        progress = d.get("progress") or {}
        self.progress: Tuple[int, int] = (int(progress.get("completed", 0)), int(progress.get("total", 0)))
        self.outputs: Dict[str, Any] = dict(d.get("outputs") or {})
        self.steps: Tuple[StepRecord, ...] = tuple(StepRecord(s) for s in d.get("steps") or ())
        self.spec_hash: str = d.get("spec_hash", "")
        #: The run's own priority, given when it started (``submit(priority=)``) over its spec's
        #: ``priority``, kept across resumes (docs/guide/resources.md); None: the spec's.
        self.priority: Optional[int] = d.get("priority")
        #: The catalog version of the spec the run used (``engine.workflows()``); 0 when that spec
        #: was never registered.
        self.workflow_version: int = int(d.get("workflow_version") or 0)
        #: For a child run (started by a ``kind: workflow`` step): the parent run's id and the
        #: step instance that started it; ``""`` for a run started on its own.
        self.parent_run_id: str = d.get("parent_run_id") or ""
        self.parent_step_key: str = d.get("parent_step_key") or ""
        #: The child runs this run's ``workflow`` steps started, oldest first (every attempt of a
        #: retried step): dicts with ``run_id``, ``step_key``, ``name`` and ``status``.
        self.children: List[Dict[str, Any]] = list(d.get("children") or [])
        #: The run's resumes, oldest first: dicts with ``at`` (RFC 3339), ``by`` (who: a login
        #: name, ``"mcp"``, ``"engine ID (takeover)"``; absent when not recorded), ``forced`` (the
        #: steps forced to run again) and ``on_failure_only``. Empty for a run never resumed.
        self.resumes: List[Dict[str, Any]] = list(d.get("resumes") or [])
        self.timed_out: bool = bool(d.get("timed_out"))

    @property
    def ok(self) -> bool:
        """True when the run completed and its end is recorded. A run whose steps all completed
        but whose end could not be written to the database (``error["kind"] == "storage"``: a full
        disk) is not ``ok``: its outputs are here, but the database does not show it finished."""
        return self.status is WorkflowStatus.COMPLETED and not (self.error and self.error.get("kind") == "storage")

    @property
    def terminal(self) -> bool:
        return self.status.is_terminal

    def step(self, key: str) -> StepRecord:
        """The step instance with this key (``"export"``, ``"per_file[3].export"``). The steps of
        foreach iterations (``per_file[3].export``) are only in a result of
        ``engine.get_status(run_id, all_steps=True)``; ``engine.run()``'s and ``wait()``'s results
        hold the steps outside iterations (the foreach step ``per_file`` itself). KeyError when
        there is none, saying where an iteration's step is."""
        for s in self.steps:
            if s.key == key:
                return s
        hint = ""
        if "[" in key and not any("[" in s.key for s in self.steps):  # not a result of all_steps=True
            hint = " here: the steps of foreach iterations are in engine.get_status(%r, all_steps=True)" % self.run_id
        raise KeyError("run %s has no step instance %r%s" % (self.run_id, key, hint))

    def raise_for_status(self) -> "RunResult":
        """Return self when the run completed, else raise ``RunFailedError`` with its error."""
        if not self.ok:
            err = self.error or {}
            where = " at step %r" % err["step_key"] if err.get("step_key") else ""
            raise RunFailedError(
                "run %s %s%s: %s" % (self.run_id, self.status.value, where, err.get("message", "")),
                code=str(err.get("kind") or self.status.value),
                details=self.raw,
                step_id=err.get("step_key"),
            )
        return self

    def __repr__(self) -> str:
        return "RunResult(run_id=%r, status=%s, progress=%d/%d)" % (
            self.run_id,
            self.status.value,
            self.progress[0],
            self.progress[1],
        )


class RunPage(List["RunResult"]):
    """A page of ``Engine.runs``: a list of RunResult, newest first, and ``next_cursor``, the
    ``cursor`` that lists the runs after it (None when there are none)."""

    def __init__(self, runs: Iterable["RunResult"] = (), next_cursor: Optional[str] = None) -> None:
        super().__init__(runs)
        self.next_cursor = next_cursor
