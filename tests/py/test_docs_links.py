"""Every link of docs/ and README.md, and every docs/ path the code cites, leads somewhere.

- Each relative Markdown link (``[text](target)``, images too) of a page under docs/ or of the
  README names a file or folder that exists, and its ``#anchor``, when the target is a Markdown page,
  is one of that page's headings (GitHub's rule: lower case, punctuation but ``-`` and ``_`` dropped,
  spaces to ``-``, ``-1``, ``-2`` … on repeats) or of its ``<a id="…">`` tags. Code blocks and
  inline code are not read.
- Each ``docs/….md`` (or ``docs/….png``) path named in the code, its tests, scripts, the Makefile
  or the docs themselves (comments, error messages, CLI output) exists, so a reader who follows
  it finds the page (scripts/docs_moved.py rewrites them when pages move).
"""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")

FENCE = re.compile(r"^(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
CODE_SPAN_ML = re.compile(r"(`+)(?:.+?)\1", re.S)  # within a paragraph, across its line ends
BLOCK_START = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|#|\||>)")  # a list item, heading, table row, quote
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def pages():
    """Every Markdown page of docs/ and the README, as paths relative to the repository."""
    out = ["README.md"]
    for folder, _dirs, files in os.walk(DOCS):
        out.extend(os.path.relpath(os.path.join(folder, name), ROOT) for name in files if name.endswith(".md"))
    return sorted(p.replace(os.sep, "/") for p in out)


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            continue
        if fence is not None:
            if line.startswith(fence[0] * len(fence)) and not line.strip(fence[0]).strip():
                fence = None
            continue
        yield number, line


def slug(heading):
    """GitHub's anchor of a heading's text (before making repeats unique)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags go
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """The anchors a page has: its headings' (unique as GitHub makes them) and its <a id>s."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    found, seen = set(), {}
    for _number, line in prose_lines(text):
        found.update(HTML_ID.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else "%s-%d" % (base, count))
    return found


def links(path):
    """(line number, target) of every link of a page outside code. A code span may continue on
    the next line of its paragraph (never past a blank line), as Markdown allows: spans are taken
    from each paragraph whole, so a link after a span that crossed a line end is still seen."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    paragraph = []  # (line number, line) of the paragraph read so far

    def paragraph_links():
        joined = "\n".join(line for _, line in paragraph)
        # a span becomes as many line ends as it held, so the line numbers stay right
        bare = CODE_SPAN_ML.sub(lambda m: "\n" * m.group(0).count("\n"), joined)
        for offset, line in enumerate(bare.split("\n")):
            for target in LINK.findall(line):
                yield paragraph[0][0] + offset, target

    for number, line in prose_lines(text):
        # a blank line, a gap (a code block between) or a line that starts a block ends a paragraph
        if paragraph and (not line.strip() or number != paragraph[-1][0] + 1 or BLOCK_START.match(line)):
            yield from paragraph_links()
            paragraph = []
        if line.strip():
            paragraph.append((number, line))
    if paragraph:
        yield from paragraph_links()


def test_the_slug_is_githubs():
    assert slug("Concurrency: `--workers N`, `--worker-threads N`") == "concurrency---workers-n---worker-threads-n"
    assert slug("`dccflow_engine_open(0, in, &out)`") == "dccflow_engine_open0-in-out"
    assert slug("At 3 a.m.: four questions about a nightly batch") == "at-3-am-four-questions-about-a-nightly-batch"
    assert slug("Workers (`dcc-flow worker`)") == "workers-dcc-flow-worker"


def test_links_are_found_after_a_code_span_across_lines_and_not_past_a_block(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "A span `that runs\non` to [here](one.md) and `x`.\n"  # the span crosses the line end
        "\n"
        "- a stray ` backtick\n"
        "- see [guide](two.md) and `x`\n"  # a new list item: the stray one does not pair with it
        "\n"
        "```\n[in code](no.md)\n```\n",
        encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert [target for _, target in links("page.md")] == ["one.md", "two.md"]
    assert [number for number, _ in links("page.md")] == [2, 5]


@pytest.mark.parametrize("page", pages())
def test_every_link_resolves(page):
    cache = {}
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        if file_part:
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), file_part)).replace(os.sep, "/")
        else:
            resolved = page
        if not os.path.exists(os.path.join(ROOT, resolved)):
            broken.append("%s:%d: %s: no such file (%s)" % (page, number, target, resolved))
            continue
        if anchor and resolved.endswith(".md"):
            if resolved not in cache:
                cache[resolved] = anchors(resolved)
            if anchor not in cache[resolved]:
                broken.append("%s:%d: %s: %s has no heading with the anchor #%s" % (page, number, target, resolved, anchor))
    assert not broken, "\n".join(broken)


CITED = re.compile(r"(?<![\w./-])docs/[\w./-]*?\.(?:md|png)\b")
SCANNED = ("capi", "engine", "internal", "python", "tests", "scripts", "examples", "docs")


def cited():
    """(file, line number, path) of every docs/ path named outside the docs' links."""
    files = [os.path.join(ROOT, "Makefile"), os.path.join(ROOT, "README.md")]
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "node_modules", "_lib")]
            files.extend(os.path.join(folder, n) for n in names
                         if n.endswith((".go", ".py", ".md", ".js", ".html", ".sh", ".h", ".c", ".yaml", ".toml")))
    for path in files:
        if os.path.relpath(path, ROOT).replace(os.sep, "/") == "scripts/docs_moved.py":
            continue  # the map of old paths to new ones
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in CITED.finditer(line):
                yield os.path.relpath(path, ROOT), number, match.group(0).rstrip(".")


def test_every_cited_docs_path_exists():
    missing = ["%s:%d: %s" % (path, number, cited_path) for path, number, cited_path in cited()
               if not os.path.exists(os.path.join(ROOT, cited_path))]
    assert not missing, "docs/ paths that do not exist (scripts/docs_moved.py maps the moved ones):\n" + "\n".join(missing)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
