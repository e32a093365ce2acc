"""``--resource NAME=LIMIT``: the scarce resources an engine of the command line declares
(docs/guide/resources.md), for ``run``, ``serve`` and ``resources``."""

import argparse
from typing import Any, Dict, List, Optional

from ._base import UsageError

__all__ = ["add_resource_argument", "resources_config"]


def _resource(text: str) -> str:
    name, sep, limit = text.partition("=")
    if not sep or not name.strip() or not limit.strip().isdigit() or int(limit) < 1:
        raise argparse.ArgumentTypeError("%r: write NAME=LIMIT with a whole number ≥ 1, e.g. houdini=4" % text)
    return text


def add_resource_argument(parser: argparse.ArgumentParser) -> None:
    """``--resource NAME=LIMIT`` (repeatable): the engine's declared resources."""
    parser.add_argument("--resource", metavar="NAME=LIMIT", dest="resources", action="append", type=_resource,
                        help="declare a scarce resource and its limit, e.g. houdini=4 (repeatable; "
                             "docs/guide/resources.md)")


def resources_config(args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """The ``resources`` of the engine config from ``--resource``; None without it. A name given
    twice is a usage error."""
    given: List[str] = getattr(args, "resources", None) or []
    if not given:
        return None
    out: Dict[str, Any] = {}
    for text in given:
        name, _, limit = text.partition("=")
        name = name.strip()
        if name in out:
            raise UsageError("--resource %s is given twice; give each resource once" % name)
        out[name] = {"limit": int(limit)}
    return out
