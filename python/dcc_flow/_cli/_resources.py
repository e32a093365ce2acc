"""``--resource NAME=LIMIT`` and ``--resources FILE``: the scarce resources an engine of the
command line declares (docs/guide/resources.md), for ``run``, ``serve`` and ``resources``."""

import argparse
from typing import Any, Dict, List, Optional, Sequence

from ._base import UsageError, load_config_section

__all__ = ["add_resource_argument", "resource_options_hint", "resources_config"]


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
    parser.add_argument("--resources", metavar="FILE", dest="resources_file",
                        help="a JSON file of the resources by name, each with its limit and optionally a probe "
                             "of the licence server (the engine config's resources object; docs/guide/resources.md)")


def resource_options_hint(problems: Sequence[Any]) -> Optional[str]:
    """The options that declare the resources a refused spec asks for, from its problems: steps
    asking for resources the engine does not declare (``unknown_resource``) or for more than its
    limit (``resource_over_limit``), each naming its resource in its path
    (``steps[0].resources.gpu``); None when no problem is of these kinds. The engine's own message
    speaks of "the engine settings": on the command line they are these options."""
    names: List[str] = []
    for problem in problems:
        path = getattr(problem, "path", None) or ""
        if getattr(problem, "code", None) in ("unknown_resource", "resource_over_limit") and ".resources." in path:
            name = path.rsplit(".resources.", 1)[1]
            if name not in names:
                names.append(name)
    if not names:
        return None
    return "this command declares them with %s or --resources FILE: docs/guide/resources.md" % " ".join(
        "--resource %s=LIMIT" % name for name in names)


def load_resources(path: str) -> Dict[str, Any]:
    """The ``resources`` object of a JSON file: the object itself, or the ``resources`` member of a
    whole engine config. The engine validates its fields when it opens."""
    return load_config_section("--resources", path, "resources",
                               '{"houdini": {"limit": 4, "probe": {"command": ["lmutil", "lmstat", "-f", "houdini"], '
                               '"parser": "lmstat"}}}')


def resources_config(args: argparse.Namespace, base: Any = None) -> Optional[Dict[str, Any]]:
    """The ``resources`` of the engine config from ``--resources FILE`` and ``--resource``; None
    without either. ``--resources FILE`` replaces ``base`` (the ``resources`` of a ``--config``
    file); ``--resource NAME=LIMIT`` sets the limit of a resource of the file, else of ``base``
    (keeping its probe), or adds one; a name given twice with ``--resource`` is a usage error."""
    given: List[str] = getattr(args, "resources", None) or []
    path: Optional[str] = getattr(args, "resources_file", None)
    if not given and not path:
        return None
    out: Dict[str, Any] = {}
    if path:
        out = {name: (dict(r) if isinstance(r, dict) else r) for name, r in load_resources(path).items()}
    elif isinstance(base, dict):
        out = {name: (dict(r) if isinstance(r, dict) else r) for name, r in base.items()}
    seen = set()
    for text in given:
        name, _, limit = text.partition("=")
        name = name.strip()
        if name in seen:
            raise UsageError("--resource %s is given twice; give each resource once" % name)
        seen.add(name)
        base = out.get(name)
        out[name] = dict(base, limit=int(limit)) if isinstance(base, dict) else {"limit": int(limit)}
    return out
