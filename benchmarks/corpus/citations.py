"""`path:line` citations in what perfbot says (and in an expectation's `where`), and whether each cites a line
that exists: a refused or already site's reason must rest on the repository's own text."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass

EXTENSIONS = "py|pyi|yaml|yml|json|toml|cfg|ini|md|rst|txt|sh|jsonnet|ipynb"
CITATION = re.compile(rf"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:{EXTENSIONS})):(\d+)(?:-(\d+))?(?![\w])")
# "at line 340", "(line 12)": a line of the file the site is in.
SAME_FILE = re.compile(r"(?<![\w:])lines? (\d+)(?:-(\d+))?(?![\w])")


@dataclass(frozen=True)
class Citation:
    """`path:first` or `path:first-last` as written."""

    path: str
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.path}:{self.first}" + (f"-{self.last}" if self.last != self.first else "")

    @property
    def lines(self) -> range:
        """The cited lines."""
        return range(self.first, self.last + 1)


def citations(text: str, near: str = "") -> list[Citation]:
    """Every `path:line` (or `path:first-last`) in `text`, for the file types a training repository holds; with
    `near` (the file a site is in), also every "line N" as a line of that file."""
    found = []
    for match in CITATION.finditer(text):
        first = int(match[2])
        found.append(Citation(match[1].removeprefix("./"), first, max(first, int(match[3] or first))))
    for match in SAME_FILE.finditer(text) if near else ():
        first = int(match[1])
        found.append(Citation(near, first, max(first, int(match[2] or first))))
    return found


class LineCounts:
    """The number of lines of each file of the pinned snapshot; `read(path)` gives a file's text or None."""

    def __init__(self, files: frozenset[str], read: Callable[[str], str | None]) -> None:
        self.files = files
        self._read = read
        self._counts: dict[str, int] = {}

    def count(self, path: str) -> int:
        """The lines of `path` (0 when it does not exist)."""
        if path not in self._counts:
            text = self._read(path) if path in self.files else None
            self._counts[path] = 0 if text is None else len(text.splitlines())
        return self._counts[path]

    def resolve(self, cited: str, near: str) -> list[str]:
        """The files `cited` may mean: from the root, from the folder of `near`, or the one file whose path ends
        in it."""
        candidates = [cited, posixpath.normpath(posixpath.join(posixpath.dirname(near), cited))]
        found = [c for c in candidates if c in self.files]
        if not found:
            ending = [f for f in self.files if f.endswith("/" + cited)]
            found = ending if len(ending) == 1 else []
        return found

    def exists(self, citation: Citation, near: str) -> bool:
        """Whether some file `citation` may mean has its last line."""
        return any(self.count(path) >= citation.last for path in self.resolve(citation.path, near))


def false_citations(text: str, near: str, lines: LineCounts) -> list[Citation]:
    """The citations in `text` (said about a site in `near`) whose line does not exist."""
    return [c for c in citations(text, near) if not lines.exists(c, near)]
