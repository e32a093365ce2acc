"""``dcc-flow pools``: the worker pools of a remotes file, optionally started to check them."""

import argparse
import json
from typing import Any, Dict, List

from .._engine import Engine
from .._errors import DccFlowError
from ._base import CliError, Command, Context
from ._engine import load_remotes

__all__ = ["COMMAND"]


class PoolsCommand(Command):
    name = "pools"
    summary = "list the worker pools of --remotes; --warm starts them"
    description = (
        "List the worker pools of --remotes (the remotes with pool fields, and url lists: docs/guide/pools.md):\n"
        "their command or servers and size. With --warm, start every worker of every pool first and\n"
        "wait until each has answered its initialize, then list the workers with their state, pid (URL\n"
        "for a pool of servers), calls served, memory and uptime:\n"
        "a check that a pool's command line works and that its licences are free. The workers stop\n"
        "when the command ends."
    )
    examples = (("check that 4 mayapy workers start", "dcc-flow pools --remotes remotes.json --warm"),)
    exit_codes = "0 listed (every worker started, with --warm), 1 a worker could not start or a bad file, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--remotes", metavar="FILE", required=True,
                            help="a JSON file of remotes by name (the engine config's remotes object)")
        parser.add_argument("--warm", action="store_true", help="start every worker and wait for it to be ready")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        remotes = load_remotes(args.remotes)
        try:
            with Engine(config={"remotes": remotes}) as engine:
                pools = engine.pools(warm=args.warm)
        except DccFlowError as exc:
            raise CliError(str(exc)) from None
        if args.json:
            ctx.print(json.dumps(pools, indent=2, sort_keys=True))
            return 0
        if not pools:
            ctx.print("(no worker pools in %s: a pool is a command remote with a workers field, or a url list)"
                      % args.remotes)
            return 0
        for p in pools:
            servers = p.get("urls") or []
            where = " ".join(servers) if servers else " ".join(p.get("command") or [])
            ctx.print("%s: %d worker%s max, %s" % (p["name"], p["workers"], "" if p["workers"] == 1 else "s", where))
            if not args.warm:
                continue
            if servers:
                rows: List[Any] = [("ID", "STATE", "URL", "CALLS", "UPTIME")]
                for w in p["running"]:
                    rows.append((str(w["id"]), w["state"], w.get("url") or "", str(w["calls"]),
                                 "%.1fs" % w["uptime_secs"]))
            else:
                rows = [("ID", "STATE", "PID", "CALLS", "RSS", "UPTIME")]
                for w in p["running"]:
                    rows.append((str(w["id"]), w["state"], str(w["pid"]), str(w["calls"]), _mb(w),
                                 "%.1fs" % w["uptime_secs"]))
            ctx.table(rows, indent="  ")
        return 0


def _mb(w: Dict[str, Any]) -> str:
    rss = w.get("rss_mb", -1)
    return "?" if rss is None or rss < 0 else "%.0f MB" % rss


COMMAND = PoolsCommand()
