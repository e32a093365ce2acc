"""``dcc-flow cache list|explain|purge``: the content cache of steps with ``cache:``."""

import argparse
import json
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._engine import _age_seconds, _before_bound
from ._assets import cache_source, env_text, when
from ._base import CliError, Command, Context, UsageError, plain
from ._engine import RUN_HELP, _parse_time, add_db_argument, missing_db, open_engine, resolve_run
from .show import args_text

__all__ = ["COMMAND"]

ACTIONS = ("list", "explain", "purge")

#: The entries ``cache list`` prints without ``--limit``.
LIST_LIMIT = 50

#: The hex digits of a key in ``cache list`` (``--json`` and ``explain`` have them whole).
KEY_DIGITS = 12

#: The parts of a key in the order ``explain`` prints them, with their names in its sentences.
PARTS = (("tool", "tool"), ("version", "version"), ("args", "arguments"), ("env", "environment"),
         ("key", "extra key"), ("reads", "declared inputs"))

#: How the engine's reasons of a miss whose key nothing had before begin: ``explain`` shows the
#: entry before (of the same step) and what differs from it.
NEW_KEY_REASONS = ("no earlier run with this key", "input added: ", "input removed: ")

#: Paths of a key's ``reads`` that ``explain`` prints (``--json`` has them all).
READS_SHOWN = 10


def _age(text: str) -> str:
    if _age_seconds(text) is None:
        raise argparse.ArgumentTypeError("%r is not an age; write a number and a unit, e.g. 30d, 12h, 2w, 90m, 36h30m"
                                         % text)
    return text.strip()


def _when(text: str) -> str:
    try:
        _before_bound(text, "--before")
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a time; give an RFC 3339 time (2026-11-01T06:00:00Z; no offset: "
                                         "UTC) or a date (2026-11-01, midnight UTC)" % text) from None
    if _age_seconds(text) is not None:
        raise argparse.ArgumentTypeError("%r is an age: use --older-than %s" % (text, text))
    return text.strip()


class CacheCommand(Command):
    name = "cache"
    summary = "list, explain and purge the content cache"
    description = (
        "The content cache (docs/guide/assets.md, \"Caching\"): a step with `cache:` is skipped when an earlier\n"
        "completed attempt had the same key — its tool, version, arguments, environment, extra key and\n"
        "declared inputs — and its files still hold their hashes.\n"
        "\n"
        "  list                 the entries, newest first (--tool, --workflow, --run, --key, --before,\n"
        "                       --older-than filter them; --limit; --json)\n"
        "  explain RUN STEP_KEY why that step instance of run RUN was a hit or a miss: the parts of its\n"
        "                       key, the run it was served from, or the reason it ran and what changed\n"
        "  purge                delete the entries the filters select (every entry without one): the steps\n"
        "                       they stood for run again; asks first on a terminal unless --yes"
    )
    examples = (("the entries of one tool", "dcc-flow cache list --tool usd__assemble"),
                ("why did the layout step run again?", "dcc-flow cache explain r01a2059aa058768e2436c40aa9aa assemble"),
                ("forget the entries older than a month", "dcc-flow cache purge --older-than 30d --yes"))
    exit_codes = ("0 success, 1 failure (an unknown run or step, a step that made no cache lookup, a purge not "
                  "confirmed), 2 usage error")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", metavar="ACTION", choices=ACTIONS, help="list, explain or purge")
        parser.add_argument("run_id", metavar="RUN", nargs="?", help="explain: " + RUN_HELP)
        parser.add_argument("step", metavar="STEP_KEY", nargs="?",
                            help="explain: the step instance ('assemble', 'per_shot[2].build')")
        parser.add_argument("--tool", metavar="TOOL", help="list, purge: only the entries of this tool")
        parser.add_argument("--workflow", metavar="WORKFLOW", help="list, purge: only the entries of this workflow")
        parser.add_argument("--run", metavar="RUN", dest="run_filter",
                            help="list, purge: only the entries the attempts of this run made")
        parser.add_argument("--key", metavar="KEY", help="list, purge: only the entries of this key (64 hex digits)")
        bound = parser.add_mutually_exclusive_group()
        bound.add_argument("--before", type=_when, metavar="WHEN",
                          help="list, purge: only the entries created before WHEN (RFC 3339, or a date: midnight UTC)")
        bound.add_argument("--older-than", type=_age, metavar="AGE",
                          help="list, purge: only the entries created more than AGE ago (30d, 12h, 2w, 90m)")
        parser.add_argument("--limit", type=int, metavar="N",
                            help="list: at most N entries (default 50; 0 = all)")
        parser.add_argument("--yes", action="store_true", help="purge: do not ask")
        parser.add_argument("--json", action="store_true", help="print JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        self.check(args)
        if args.action == "explain":
            return self.explain(args, ctx)
        filters = {"tool": args.tool, "workflow": args.workflow, "run_id": args.run_filter, "key": args.key,
                   "before": args.before or args.older_than}
        if args.action == "list":
            return self.list(args, ctx, filters)
        return self.purge(args, ctx, filters)

    @staticmethod
    def check(args: argparse.Namespace) -> None:
        """Refuse the options and arguments the action does not take (a usage error naming them)."""
        given = {"--tool": args.tool, "--workflow": args.workflow, "--run": args.run_filter, "--key": args.key,
                 "--before": args.before, "--older-than": args.older_than, "--limit": args.limit is not None,
                 "--yes": args.yes}
        takes = {"list": ("--tool", "--workflow", "--run", "--key", "--before", "--older-than", "--limit"),
                 "purge": ("--tool", "--workflow", "--run", "--key", "--before", "--older-than", "--yes"),
                 "explain": ()}[args.action]
        wrong = [name for name, value in given.items() if value and name not in takes]
        if wrong:
            raise UsageError("cache %s does not take %s" % (args.action, ", ".join(wrong)))
        if args.action == "explain":
            if not args.run_id or not args.step:
                raise UsageError("cache explain needs RUN and STEP_KEY: dcc-flow cache explain RUN STEP_KEY")
        elif args.run_id:
            raise UsageError("cache %s takes no RUN or STEP_KEY (for the entries of a run: --run RUN)" % args.action)
        if args.limit is not None and args.limit < 0:
            raise UsageError("--limit must be >= 0 (0 = all); got %d" % args.limit)

    # -- list ------------------------------------------------------------------------------------

    @staticmethod
    def list(args: argparse.Namespace, ctx: Context, filters: Dict[str, Any]) -> int:
        limit = LIST_LIMIT if args.limit is None else args.limit
        with open_engine(args, beside_owner=True) as engine:
            entries = engine.cache_entries(limit=limit, **filters)
        if args.json:
            ctx.print(json.dumps(entries, indent=2, ensure_ascii=False))
            return 0
        rows = [("KEY", "TOOL", "WORKFLOW", "RUN", "STEP", "CREATED", "EXPIRES")]
        now = time.time()
        for e in entries:
            expires = e.get("expires_at")
            left = _parse_time(expires) if expires else None
            ends = "never" if not expires else ("expired" if left is not None and left <= now else when(expires))
            rows.append((str(e.get("key", ""))[:KEY_DIGITS], str(e.get("tool", "")), str(e.get("workflow") or "-"),
                         str(e.get("run_id", "")), str(e.get("step_key", "")), when(e.get("created_at")), ends))
        ctx.table(rows)
        if not entries:
            ctx.print("(no cache entries)")
        elif limit and len(entries) == limit:
            ctx.print("(the first %d; --limit 0 lists all)" % limit)
        return 0

    # -- purge -----------------------------------------------------------------------------------

    @staticmethod
    def purge(args: argparse.Namespace, ctx: Context, filters: Dict[str, Any]) -> int:
        what = _filter_text(args)
        missing = missing_db(args)
        if missing:  # opening it to purge would create it
            raise CliError("nothing to purge: " + missing)
        with open_engine(args) as engine:
            if not args.yes and _interactive(ctx):
                count = len(engine.cache_entries(**filters))
                if count == 0:
                    ctx.print("no cache entry%s; nothing purged" % (" " + what if what else ""))
                    return 0
                answer = _ask(ctx, "purge %d cache entr%s%s? [y/N] " % (count, "y" if count == 1 else "ies",
                                                                       " " + what if what else ""))
                if answer not in ("y", "yes"):
                    raise CliError("nothing purged (not confirmed)")
            purged = engine.purge_cache(**filters)
        if args.json:
            ctx.print(json.dumps({"purged": purged}))
            return 0
        ctx.print("purged %d cache entr%s%s%s" % (purged, "y" if purged == 1 else "ies", " " + what if what else "",
                                                  ": the steps they stood for run again next time" if purged else ""))
        return 0

    # -- explain ---------------------------------------------------------------------------------

    def explain(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            result = engine.get_status(run_id, all_steps=True)
            step = next((s for s in result.steps if s.key == args.step), None)
            if step is None:
                raise CliError("run %s has no step instance %s; the keys are listed by: dcc-flow show %s"
                               % (result.run_id, plain(args.step), result.run_id))
            enter, exit_ = _lookup_events(engine, result.run_id, step.key)
            hit = exit_.get("cached") is True and bool(cache_source(exit_))
            miss = cache_source(enter) if cache_source(enter).get("hit") is False else {}
            if not hit and not miss:
                raise CliError("step %s of run %s made no cache lookup (%s): its spec has no cache:, or it did not "
                               "run" % (plain(step.key), result.run_id, step.status.value))
            source = cache_source(exit_) if hit else {}
            key = str((source or miss).get("key") or "")
            entries = engine.cache_entries(key=key) if key else []
            entry = _pick(entries, source) if hit else _pick(entries, {"run_id": result.run_id, "step_key": step.key})
            served_env = _attempt_env(engine, source) if hit else None
            previous: Optional[Dict[str, Any]] = None
            reason = str(miss.get("reason") or "")
            if miss and reason.startswith(NEW_KEY_REASONS):
                tool = entry.get("tool") if entry else (step.attempts[-1].tool if step.attempts else "")
                previous = _previous_entry(engine, tool, result.name, step, key, enter.get("_time"))
        doc: Dict[str, Any] = {"run_id": result.run_id, "step_key": step.key, "hit": hit, "key": key,
                               "status": step.status.value}
        if hit:
            doc["from"] = {k: source.get(k) for k in ("run_id", "step_key", "attempt")}
            if served_env:
                doc["from"]["env"] = served_env
        else:
            doc["reason"] = reason
            if step.error:
                doc["error"] = {k: step.error.get(k) for k in ("kind", "message") if step.error.get(k)}
        doc["entry"] = entry
        # The parts of the key: the entry's, else those the miss recorded (a step that left no
        # entry: its call failed, or one of its files was not hashed).
        parts = (entry or {}).get("parts") or (miss.get("parts") if isinstance(miss.get("parts"), dict) else None)
        if not hit and entry is None:
            doc["parts"] = parts
            if parts is None and miss.get("parts_bytes"):
                doc["parts_bytes"] = miss.get("parts_bytes")
            unknown = _unhashed_files(step)
            if unknown:
                doc["unhashed"] = unknown
        if previous is not None:
            doc["previous"] = previous
            doc["changed"] = _changed(previous.get("parts"), parts)
        if args.json:
            ctx.print(json.dumps(doc, indent=2, ensure_ascii=False))
            return 0
        self.print_explanation(ctx, result, doc)
        return 0

    @staticmethod
    def print_explanation(ctx: Context, result: Any, doc: Mapping[str, Any]) -> None:
        head = "run %s (%s), step %s: cache " % (result.run_id, plain(result.name or "unnamed"), plain(doc["step_key"]))
        if doc["hit"]:
            src = doc["from"]
            ctx.print(head + "hit, served from run %s, step %s, attempt %s"
                      % (plain(src.get("run_id")), plain(src.get("step_key")), src.get("attempt")))
        else:
            ctx.print(head + "miss, it ran: %s" % plain(doc.get("reason") or "no reason recorded"))
        ctx.print("key %s" % plain(doc["key"]))
        entry = doc.get("entry")
        parts = (entry or {}).get("parts") or doc.get("parts") or {}
        if parts:
            ctx.print("made of:")
            for line in _parts_lines(parts):
                ctx.print("  " + line)
        elif doc.get("parts_bytes"):
            ctx.print("made of: %s bytes of parts, more than the lookup keeps" % doc["parts_bytes"])
        served_env = (doc.get("from") or {}).get("env")
        if served_env:
            ctx.print("the attempt it was served from ran with %s: what its process reported, which is not part of "
                      "the key" % env_text(served_env, None))
        if entry:
            if not doc["hit"]:
                ctx.print("this run's attempt %s left the entry (%s): a later run with this key can use it"
                          % (entry.get("attempt"), when(entry.get("created_at"))))
        elif not doc["hit"]:
            ctx.print(_no_entry_text(doc))
        else:
            ctx.print("the entry it was served from is gone (purged since)")
        previous = doc.get("previous")
        if previous:
            ctx.print("the entry before, of run %s (key %s…), differs in: %s"
                      % (plain(previous.get("run_id")), plain(str(previous.get("key"))[:KEY_DIGITS]),
                         ", ".join(doc.get("changed") or ["nothing recorded"])))
            was, now = previous.get("parts") or {}, parts
            for part, _name in PARTS:
                if now and was.get(part) != now.get(part):
                    ctx.print("  %-8s was %s" % (part, _part_text(part, was.get(part))))
                    ctx.print("  %-8s now %s" % ("", _part_text(part, now.get(part))))


def _attempt_env(engine: Any, src: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The environment the process that ran attempt ``src`` (run_id, step_key, attempt) reported
    with it, None when it reported none or the attempt is gone (its run pruned)."""
    try:
        res = engine.get_status(str(src.get("run_id")), all_steps=True)
    except Exception:  # noqa: BLE001 - the run may be pruned: nothing to show, not an error
        return None
    for step in res.steps:
        if step.key == src.get("step_key"):
            for att in step.attempts:
                if att.attempt == src.get("attempt") and isinstance(att.env, dict) and att.env:
                    return dict(att.env)
    return None


def _unhashed_files(step: Any) -> List[Dict[str, Any]]:
    """The files of the step's last attempt that were not hashed (``state`` other than ``ok``):
    why a completed attempt left no cache entry."""
    if not step.attempts:
        return []
    out = []
    for f in step.attempts[-1].files or []:
        if f.get("state") != "ok":
            out.append({k: f.get(k) for k in ("role", "path", "state") if f.get(k)})
    return out


def _no_entry_text(doc: Mapping[str, Any]) -> str:
    """Why a miss left no entry under its key: its call failed, a file was not hashed, or the
    entry was purged since."""
    status = doc.get("status")
    err = doc.get("error") or {}
    if status == "failed":
        what = ": ".join(plain(str(err[k])) for k in ("kind", "message") if err.get(k))
        return ("it failed%s, so it left no entry under this key: the next run with this key calls it again"
                % (" (%s)" % what if what else ""))
    unhashed = doc.get("unhashed") or []
    if status == "completed" and unhashed:
        f = unhashed[0]
        more = len(unhashed) - 1
        return ("it completed but left no entry: its %s %s was %s when the attempt ended%s (an attempt's files "
                "must all be hashed for a later run to check them)"
                % (f.get("role", "file"), plain(str(f.get("path"))), f.get("state"),
                   " (and %d more)" % more if more > 0 else ""))
    if status == "completed":
        return "the entry its attempt left is gone (purged since)"
    return "it has not completed (%s): no entry yet" % plain(str(status))


def _interactive(ctx: Context) -> bool:
    try:
        return sys.stdin.isatty() and ctx.out_is_tty
    except (AttributeError, ValueError, OSError):
        return False


def _ask(ctx: Context, prompt: str) -> str:
    ctx.write(prompt)
    try:
        return input().strip().lower()
    except EOFError:
        return ""


def _filter_text(args: argparse.Namespace) -> str:
    parts = []
    for label, value in (("of tool", args.tool), ("of workflow", args.workflow), ("of run", args.run_filter),
                         ("with key", args.key), ("created before", args.before),
                         ("created more than", args.older_than and args.older_than + " ago")):
        if value:
            parts.append("%s %s" % (label, plain(value)))
    return " ".join(parts)


def _lookup_events(engine: Any, run_id: str, key: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The details of the last ``step_enter`` and ``step_exit`` of step instance ``key`` (``{}``
    when none); the enter's carries its event time as ``_time``."""
    enter: Dict[str, Any] = {}
    exit_: Dict[str, Any] = {}
    for ev in engine.events(run_id=run_id, timeout=0):
        if ev.get("step_key") != key:
            continue
        detail = ev.get("detail") if isinstance(ev.get("detail"), dict) else {}
        if ev.get("type") == "step_enter":
            enter = dict(detail, _time=ev.get("time"))
        elif ev.get("type") == "step_exit":
            exit_ = dict(detail)
    return enter, exit_


def _pick(entries: List[Dict[str, Any]], want: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The entry made by the attempt ``want`` names (run_id, step_key and, if given, attempt)."""
    for e in entries:
        if e.get("run_id") == want.get("run_id") and e.get("step_key") == want.get("step_key") and (
                want.get("attempt") is None or e.get("attempt") == want.get("attempt")):
            return e
    return None


def _previous_entry(engine: Any, tool: Optional[str], workflow: str, step: Any, key: str,
                    before: Optional[str]) -> Optional[Dict[str, Any]]:
    """The newest entry of the same tool, workflow and step made before the lookup, under another
    key: what the key was the time before (the same step instance first, else the same step id)."""
    if not tool:
        return None
    bound = _parse_time(before) if before else None
    same_step: Optional[Dict[str, Any]] = None
    for e in engine.cache_entries(tool=tool, workflow=workflow or None, limit=200):
        created = _parse_time(e.get("created_at"))
        if e.get("key") == key or (bound is not None and created is not None and created >= bound):
            continue
        if e.get("step_key") == step.key:
            return dict(e)
        if same_step is None and e.get("step_id") == step.step_id:
            same_step = dict(e)
    return same_step


def _changed(was: Any, now: Any) -> List[str]:
    if not isinstance(was, Mapping) or not isinstance(now, Mapping):
        return []
    return [name for part, name in PARTS if was.get(part) != now.get(part)]


def _part_text(part: str, value: Any) -> str:
    if value is None:
        return "(none)"
    if part == "env":
        return env_text(value, None)
    if part == "reads" and isinstance(value, list):
        shown = ", ".join(plain(p) for p in value[:READS_SHOWN])
        more = len(value) - READS_SHOWN
        return shown + (" … and %d more" % more if more > 0 else "")
    if isinstance(value, str):
        return plain(value)
    return args_text(value, None)


def _parts_lines(parts: Mapping[str, Any]) -> List[str]:
    return ["%-8s %s" % (part, _part_text(part, parts.get(part))) for part, _name in PARTS if part in parts]


COMMAND = CacheCommand()
