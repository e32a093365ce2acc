"""A doc page split into a folder (docs/reference/python/, cli/, c-abi/), read as one page.

The folder's README.md is the index: its text comes first, then the parts its numbered list
(``1. [Title](part.md): …``, under "Parts of this page") names, in that order. The doc tests read
the concatenation as the one page it was (sessions run in order across parts) and name a part and
its own line in their messages.
"""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PART_LIST = re.compile(r"^\d+\. \[[^\]]+\]\(([\w-]+\.md)\)", flags=re.M)

PYTHON = "docs/reference/python"
CLI = "docs/reference/cli"
C_ABI = "docs/reference/c-abi"


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


class Page:
    """The index and parts of a split page: ``text`` is their concatenation, in order."""

    def __init__(self, folder):
        self.folder = folder
        index = folder + "/README.md"
        names = PART_LIST.findall(_read(index))
        assert names, "%s lists no parts (a numbered list of links under 'Parts of this page')" % index
        self.files = [index] + [folder + "/" + name for name in names]
        self.texts = [_read(rel) for rel in self.files]
        for rel, text in zip(self.files, self.texts):
            assert text.endswith("\n"), "%s does not end with a newline" % rel
        self.text = "".join(self.texts)
        self.starts = []  # offset of each file in text
        offset = 0
        for text in self.texts:
            self.starts.append(offset)
            offset += len(text)

    def _file_at(self, offset):
        index = 0
        for i, start in enumerate(self.starts):
            if start <= offset:
                index = i
        return index

    def where(self, line):
        """'docs/…/part.md line N' of a 1-based line of ``text``."""
        offset = 0
        for _ in range(line - 1):
            offset = self.text.index("\n", offset) + 1
        index = self._file_at(offset)
        return "%s line %d" % (self.files[index], self.texts[index].count("\n", 0, offset - self.starts[index]) + 1)

    def split_lines(self, line):
        """(file, 0-based line in that file) of a 0-based line of ``text``."""
        offset = 0
        for _ in range(line):
            offset = self.text.index("\n", offset) + 1
        index = self._file_at(offset)
        return self.files[index], self.texts[index].count("\n", 0, offset - self.starts[index])

    def write(self, text):
        """Write back a changed ``text`` whose changes stay inside the files (the files keep
        their boundaries: each file's first line is found again from where the last one ended)."""
        out, rest = [], text
        for i in range(len(self.files)):
            if i + 1 < len(self.files):
                following = self.texts[i + 1]
                cut = rest.index(following[:200])
                out.append(rest[:cut])
                rest = rest[cut:]
            else:
                out.append(rest)
        for rel, new, old in zip(self.files, out, self.texts):
            if new != old:
                with open(os.path.join(ROOT, rel), "w", encoding="utf-8") as f:
                    f.write(new)
