"""docs/ grouped by audience (issue 35): where each old page went, and the tool that moves them.

The layout: docs/guide/ (using dcc-flow), docs/reference/ (every field, option and export),
docs/operations/ (running it in a studio), docs/design/ (how it is built and how fast). The three
longest pages became folders: an index (README.md) and its parts, in the order of the old page.

    python scripts/docs_moved.py            # rewrite docs/OLD.md citations in the code and docs
    python scripts/docs_moved.py --pages    # move/split old pages still in docs/ (after a merge)
    python scripts/docs_moved.py --check    # print what would change, change nothing

``--pages`` moves each page of MOVED that still exists at its old path (``git mv``), splits each
page of SPLIT that exists at its old path into its parts (the part boundaries are the headings
below; every line goes to exactly one part, the parts get a title and a line of navigation) and
rewrites the relative links of every Markdown page of docs/ and README.md to the new places
(anchors of a split page go to the part that has the heading). A branch that edited an old page
(docs/python.md) merges as a modify/delete conflict: keep its version of the old page and run
``--pages`` again: it splits that version over the parts.

Without ``--pages`` it rewrites each ``docs/OLD.md`` named in a tracked text file (comments,
error messages, tests, the Makefile, docs prose and outputs): a moved page to its new path; a split
page to the part that holds the ``#anchor`` or the quoted section that follows it
(``docs/python.md, "Worker processes"`` → ``docs/reference/python/tools.md, "Worker processes"``),
else to the index. Standard library only; run from anywhere in the repository.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Whole pages: old path -> new path.
MOVED = {
    "docs/architecture.md": "docs/design/architecture.md",
    "docs/performance.md": "docs/design/performance.md",
    "docs/pools.md": "docs/guide/pools.md",
    "docs/scheduler.md": "docs/guide/scheduler.md",
    "docs/ui.md": "docs/guide/ui.md",
    "docs/spec.md": "docs/reference/spec.md",
    "docs/mcp.md": "docs/reference/mcp.md",
    "docs/limits.md": "docs/reference/limits.md",
    "docs/state-machine.md": "docs/reference/state-machine.md",
    "docs/cluster.md": "docs/operations/cluster.md",
    "docs/metrics.md": "docs/operations/metrics.md",
    "docs/operations.md": "docs/operations/running.md",
    "docs/wheels.md": "docs/operations/wheels.md",
}

#: Folders: old -> new (the dashboard's screenshots go with docs/ui.md).
MOVED_DIRS = {
    "docs/ui/": "docs/guide/ui/",
}

#: Split pages: old path -> (new folder, title of the parts, [(part file, part title, first heading)]).
#: A part starts at its heading line (outside code) and runs to the next part's; the lines before
#: the first part are the index's (README.md).
SPLIT = {
    "docs/python.md": ("docs/reference/python/", "Python API", [
        ("engine.md", "Opening an engine", "## Opening an engine"),
        ("tools.md", "Host tools, lanes, timeouts", "## Host tools"),
        ("tool-calls.md", "Tool calls", "## Tool calls: arguments, results, errors"),
        ("running.md", "Running a workflow", "## Running a workflow"),
        ("submitted-runs.md", "Submitted runs, resuming, pruning", "## Submitted runs"),
        ("events-specs-schedules.md", "Events, specs, schedules", "## Events"),
        ("serving.md", "Serving: MCP and webhooks", "## Serving: MCP and webhooks"),
        ("dcc.md", "Inside a DCC", "## Inside a DCC"),
        ("testing.md", "Testing with pytest", "## Testing with pytest"),
        ("errors.md", "Exceptions, error codes, the native library", "## Exceptions and error codes"),
        ("code-first.md", "Code-first workflows", "## Code-first workflows"),
    ]),
    "docs/cli.md": ("docs/reference/cli/", "The `dcc-flow` command line", [
        ("conventions.md", "Conventions", "## Conventions (every command)"),
        ("validate.md", "validate", "## validate"),
        ("run.md", "run", "## run"),
        ("inspecting.md", "status, runs, show", "## status"),
        ("run-control.md", "cancel, approve, pause, unpause, resume, prune", "## cancel"),
        ("catalog.md", "schedules, workflows", "## schedules"),
        ("serve.md", "serve", "## serve"),
        ("workers.md", "worker, pools", "## worker"),
        ("graph.md", "graph", "## graph"),
        ("contributing.md", "Adding a command", "## Adding a command (contributors)"),
    ]),
    "docs/c-abi.md": ("docs/reference/c-abi/", "The C ABI", [
        ("contract.md", "Contract and error codes", "## Contract"),
        ("spec-exports.md", "Spec exports and the canonical spec JSON", "## Exports (ABI version 2)"),
        ("engine.md", "Engine exports: open, register, list, submit, dry run", "## Engine exports (ABI version 2)"),
        ("calls.md", "Tool calls of a puller", "### `dccflow_puller_open(h, in, &out)`"),
        ("runs.md", "Runs: status, control, lists, events",
         "### `dccflow_run_status(h, in, &out)` and `dccflow_run_wait(h, in, &out)`"),
        ("schedules-serve.md", "Schedules and serving",
         "### Schedules: `dccflow_schedules_parse(0, in, &out)` and `dccflow_schedules_validate(0, in, &out)`"),
        ("lifecycle.md", "Pruning, closing, the hand-back rule, one owner",
         "### `dccflow_runs_prune(h, in, &out)` and `dccflow_idempotency_purge(h, in, &out)`"),
    ]),
}

#: Text a split has to change beside links: the doctest's name of a part shows in a traceback;
#: the CLI's "Adding a command" says where a new command's section goes now.
FIXUPS = {
    "docs/python.md": [("<doctest docs/python.md[", "<doctest docs/reference/python/tools.md[")],
    "docs/cli.md": [(
        "5. Add a `## <name>` section here, in `COMMAND_MODULES` order,",
        "5. Add a `## <name>` section to the part of this folder where it belongs (a new part is listed\n"
        "   in the index's \"Parts of this page\"), in `COMMAND_MODULES` order, and the part to\n"
        "   `DOC_PARTS` in `_base.py` (the command's `--help` names it),",
    ), (
        "   `<!-- doc-test: file NAME -->`), and a row in the command table at the top.",
        "   `<!-- doc-test: file NAME -->`), and a row in the command table of the index (`README.md`)\n"
        "   that links `PART.md#<name>`.",
    )],
}

#: Quoted names cited after a split page that are not headings: (old page, name) -> part.
SECTION_PARTS = {
    ("docs/python.md", "Tools"): "docs/reference/python/tool-calls.md",  # the error-kind table
    ("docs/python.md", "Engine.runs"): "docs/reference/python/submitted-runs.md",
    ("docs/python.md", "What cancel guarantees"): "docs/reference/python/tools.md",
    ("docs/c-abi.md", "An attempt"): "docs/reference/c-abi/runs.md",  # run_status's attempt_history
}

INDEX = "README.md"
#: The generated header of a part ends with this line's kind: "Part N of …".
PARTS_HEADING = "## Parts of this page"
PART_LIST = re.compile(r"^\d+\. \[[^\]]+\]\(([\w-]+\.md)\)", flags=re.M)

FENCE = re.compile(r"^(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+).+?\1")
LINK = re.compile(r"(\]\(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


# --- Markdown -------------------------------------------------------------------------------------


def prose_flags(lines):
    """For each line, True when it is outside fenced code."""
    out, fence = [], None
    for line in lines:
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            out.append(False)
            continue
        if fence is not None:
            if line.startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
            out.append(False)
            continue
        out.append(True)
    return out


def slug(heading):
    """GitHub's anchor of a heading's text (before repeats get -1, -2 …)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class Anchors:
    """Unique anchors in the order GitHub makes them."""

    def __init__(self):
        self.seen = {}

    def add(self, heading_text):
        base = slug(heading_text)
        count = self.seen.get(base, 0)
        self.seen[base] = count + 1
        return base if count == 0 else "%s-%d" % (base, count)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def write(rel, text):
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def norm(path):
    return os.path.normpath(path).replace(os.sep, "/")


def rel_link(from_file, to_file):
    return os.path.relpath(to_file, os.path.dirname(from_file) or ".").replace(os.sep, "/")


# --- the split pages ------------------------------------------------------------------------------


def split_page(old, text):
    """{file: text} of the index and parts of an old page (links not yet rewritten)."""
    folder, title, parts = SPLIT[old]
    for before, after in FIXUPS.get(old, []):
        text = text.replace(before, after)
    lines = text.splitlines(True)
    prose = prose_flags([line.rstrip("\n") for line in lines])
    starts = []
    for _name, _part_title, heading in parts:
        found = [i for i, line in enumerate(lines) if prose[i] and line.rstrip("\n") == heading]
        if len(found) != 1:
            raise SystemExit("%s: %d lines are the heading %r (want one)" % (old, len(found), heading))
        starts.append(found[0])
    if starts != sorted(starts):
        raise SystemExit("%s: the parts' headings are not in the page's order" % old)
    out = {}
    intro = "".join(lines[:starts[0]]).rstrip("\n") + "\n"
    listing = ["", PARTS_HEADING, "",
               "Read in this order; the doc tests read them so, as one page.", ""]
    for n, (name, part_title, _heading) in enumerate(parts):
        begin, end = starts[n], starts[n + 1] if n + 1 < len(starts) else len(lines)
        body = lines[begin:end]
        sections = [HEADING.match(line).group(2) for i, line in enumerate(body)
                    if prose[begin + i] and line.startswith("## ")]
        if not sections:
            sections = [HEADING.match(line).group(2) for i, line in enumerate(body)
                        if prose[begin + i] and line.startswith("### ")]
        listing.append("%d. [%s](%s): %s" % (n + 1, part_title, name, " · ".join(
            s.replace("[", "").replace("]", "") for s in sections)))
        nav = ["Part %d of [%s](%s)" % (n + 1, title, INDEX)]
        if n > 0:
            nav.append("previous: [%s](%s)" % (parts[n - 1][1], parts[n - 1][0]))
        if n + 1 < len(parts):
            nav.append("next: [%s](%s)" % (parts[n + 1][1], parts[n + 1][0]))
        header = "# %s: %s\n\n%s.\n\n" % (title, part_title, " · ".join(nav))
        out[folder + name] = header + "".join(body).rstrip("\n") + "\n"
    out[folder + INDEX] = intro + "\n".join(listing) + "\n"
    return out


def part_files(old):
    folder, _title, parts = SPLIT[old]
    return [folder + INDEX] + [folder + name for name, _t, _h in parts]


def header_lines(rel, lines):
    """How many lines at the top of a split page's file were generated (title and navigation)."""
    if rel.endswith("/" + INDEX):
        return 0
    return 3 if len(lines) > 3 and lines[2].startswith("Part ") else 0


def old_anchor_map(old):
    """{anchor of the old page: (new file, anchor there)} for a split page already on disk."""
    out, page = {}, Anchors()
    for rel in part_files(old):
        lines = read(rel).splitlines()
        prose = prose_flags(lines)
        local = Anchors()
        skip = header_lines(rel, lines)
        in_listing = False
        for i, line in enumerate(lines):
            if not prose[i]:
                continue
            match = HEADING.match(line)
            if rel.endswith("/" + INDEX) and line == PARTS_HEADING:
                in_listing = True
            if match:
                new = local.add(match.group(2))
                if i >= skip and not in_listing:
                    out[page.add(match.group(2))] = (rel, new)
            for ident in HTML_ID.findall(line):
                out[ident] = (rel, ident)
    return out


def sections_of(old):
    """[(heading text without backticks, lower case), file] of a split page's headings."""
    out = []
    for rel in part_files(old):
        lines = read(rel).splitlines()
        prose = prose_flags(lines)
        for i, line in enumerate(lines):
            match = HEADING.match(line)
            if prose[i] and match and i >= header_lines(rel, lines):
                out.append((match.group(2).replace("`", "").lower(), rel))
    return out


# --- where an old path goes -----------------------------------------------------------------------


class Map:
    def __init__(self):
        split = [old for old in SPLIT if os.path.exists(os.path.join(ROOT, SPLIT[old][0] + INDEX))]
        self.anchors = {old: old_anchor_map(old) for old in split}
        self.sections = {old: sections_of(old) for old in self.anchors}

    def target(self, old, anchor=None, section=None):
        """(new file, new anchor or None) of an old page (and an anchor or a section name in it)."""
        if old in MOVED:
            return MOVED[old], anchor
        if old in SPLIT:
            folder = SPLIT[old][0]
            if anchor and anchor in self.anchors.get(old, {}):
                return self.anchors[old][anchor]
            if (old, section) in SECTION_PARTS:
                return SECTION_PARTS[(old, section)], anchor
            if section:
                want = section.replace("`", "").lower().rstrip(".")
                for text, rel in self.sections.get(old, []):
                    if text == want:
                        return rel, anchor
                if slug(section) in self.anchors.get(old, {}):  # an <a id> of that name
                    return self.anchors[old][slug(section)][0], anchor
                for text, rel in self.sections.get(old, []):
                    if text.startswith(want) or want.startswith(text):
                        return rel, anchor
            return folder + INDEX, anchor
        for old_dir, new_dir in MOVED_DIRS.items():
            if old.startswith(old_dir):
                return new_dir + old[len(old_dir):], anchor
        return None


# --- links of the Markdown pages -----------------------------------------------------------------


def rewrite_links(text, source_old, source_new, where):
    """Rewrite each relative link of a page read at source_old (the old layout) now at source_new.
    The lines a split wrote (a part's title and navigation, an index's list of parts) are kept."""
    lines = text.split("\n")
    prose = prose_flags(lines)
    if source_old in SPLIT:
        skip = header_lines(source_new, lines)
        listing = lines.index(PARTS_HEADING) if PARTS_HEADING in lines else len(lines)
        prose = [p and skip <= i < listing for i, p in enumerate(prose)]

    def fix(match):
        target = match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            return match.group(0)
        file_part, hash_, anchor = target.partition("#")
        resolved = norm(os.path.join(os.path.dirname(source_old), file_part)) if file_part else source_old
        moved = where.target(resolved, anchor or None)
        new_file, new_anchor = moved if moved else (resolved, anchor or None)
        if new_file == source_new:
            new = "#" + new_anchor if new_anchor else rel_link(source_new, new_file)
        else:
            new = rel_link(source_new, new_file) + ("/" if file_part.endswith("/") else "")
            new += "#" + new_anchor if new_anchor else ""
        if not file_part and not moved:
            return match.group(0)
        return match.group(1) + new + match.group(3)

    for i, line in enumerate(lines):
        if not prose[i] or "](" not in line:
            continue
        pieces, last = [], 0
        for span in CODE_SPAN.finditer(line):
            pieces.append(LINK.sub(fix, line[last:span.start()]))
            pieces.append(span.group(0))
            last = span.end()
        pieces.append(LINK.sub(fix, line[last:]))
        lines[i] = "".join(pieces)
    return "\n".join(lines)


def git(*args):
    return subprocess.run(["git"] + list(args), cwd=ROOT, check=True, stdout=subprocess.PIPE,
                          text=True).stdout


def move_pages(dry):
    """Move and split the old pages still in docs/, then rewrite the links of every page."""
    fresh = {}  # new path -> old path, for pages whose links are still the old layout's
    for old, new in MOVED.items():
        if os.path.exists(os.path.join(ROOT, old)):
            print("move %s -> %s" % (old, new))
            if not dry:
                os.makedirs(os.path.dirname(os.path.join(ROOT, new)), exist_ok=True)
                if os.path.exists(os.path.join(ROOT, new)):  # a merge brought the old page back
                    os.replace(os.path.join(ROOT, old), os.path.join(ROOT, new))
                    git("rm", "-q", "--cached", "--ignore-unmatch", old)
                    git("add", new)
                else:
                    git("mv", old, new)
            fresh[new] = old
    for old_dir, new_dir in MOVED_DIRS.items():
        if os.path.isdir(os.path.join(ROOT, old_dir)):
            print("move %s -> %s" % (old_dir, new_dir))
            if not dry:
                os.makedirs(os.path.dirname(os.path.join(ROOT, new_dir.rstrip("/"))), exist_ok=True)
                git("mv", old_dir.rstrip("/"), new_dir.rstrip("/"))
    for old in SPLIT:
        if os.path.exists(os.path.join(ROOT, old)):
            parts = split_page(old, read(old))
            print("split %s -> %s" % (old, ", ".join(sorted(parts))))
            if not dry:
                for rel, text in parts.items():
                    write(rel, text)
                    fresh[rel] = old
                git("rm", "-q", "--cached", "--ignore-unmatch", old)
                os.remove(os.path.join(ROOT, old))
                git("add", *parts)
    if dry:
        return
    where = Map()
    pages = ["README.md"] + sorted(
        norm(os.path.relpath(os.path.join(d, n), ROOT))
        for d, _dirs, names in os.walk(os.path.join(ROOT, "docs")) for n in names if n.endswith(".md"))
    for rel in pages:
        text = read(rel)
        new = rewrite_links(text, fresh.get(rel, rel), rel, where)
        if new != text:
            write(rel, new)


# --- citations in the code ------------------------------------------------------------------------

CITATION = re.compile(
    r"(?<![\w./-])(?P<path>docs/(?:[\w-]+\.md|ui/))(?:#(?P<anchor>[\w-]+))?"
    r"(?P<tail>,?\s+(?:(?://|#)\s*)?(?:section |in )?\\?[\"\u201c](?P<section>[^\"\u201d\\]{1,120}?)\\?[\"\u201d])?")
#: A section name cited across lines of a comment: the line break and the comment marker go.
WRAPPED = re.compile(r"\s*\n\s*(?://|#|\*)?\s*")


def rewrite_citations(text, where):
    def fix(match):
        old = match.group("path")
        section = match.group("section")
        if section:
            section = WRAPPED.sub(" ", section)
        moved = where.target(old, match.group("anchor"), section)
        if not moved:
            return match.group(0)
        new_file, new_anchor = moved
        return new_file + ("#" + new_anchor if new_anchor else "") + (match.group("tail") or "")

    return CITATION.sub(fix, text)


def tracked_text_files():
    for rel in git("ls-files").splitlines():
        if rel == "scripts/docs_moved.py" or not os.path.isfile(os.path.join(ROOT, rel)):
            continue
        try:
            text = read(rel)
        except UnicodeDecodeError:
            continue
        if "docs/" in text:
            yield rel, text


def main(argv):
    dry = "--check" in argv
    if "--pages" in argv:
        move_pages(dry)
        return 0
    where = Map()
    changed = 0
    for rel, text in tracked_text_files():
        new = rewrite_citations(text, where)
        if new != text:
            changed += 1
            print("%s: %d citation(s)" % (rel, sum(1 for a, b in zip(text.splitlines(), new.splitlines()) if a != b)))
            if not dry:
                write(rel, new)
    print("%d file(s) %s" % (changed, "would change" if dry else "changed"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
