"""The code blocks of README.md and docs/**/*.md, and the directives that say how a test runs them.

Only fenced blocks whose language is bash, sh or python count; output, YAML and JSON are
written as ```text / ```yaml / ```json and are not run. A block may be preceded, on the lines
right above its fence (no blank line between), by one or more visible HTML comments:

    <!-- test: replace "--episodes 8" "--episodes 2" -->   smaller sizes (any number of pairs)
    <!-- test: before "carla-wds synth raw --layout tcp" -->  a bash command run first, in the
                                                            same folder (data the page assumes)
    <!-- test: timeout 300 -->                             seconds for this block (default 120)
    <!-- test: skip (needs a GPU) -->                      not run; the reason is required

A directive that is not understood, a `replace` whose text is not in the block, or a comment
that no counted block follows is an error, so a directive cannot go stale silently.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

LANGS = {"bash": "bash", "sh": "bash", "python": "python"}
DEFAULT_TIMEOUT = 120
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_DIRECTIVE = re.compile(r"^\s*<!--\s*test:\s*(.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip\s*\((.+)\)$")


class DirectiveError(ValueError):
    """A `<!-- test: ... -->` comment that cannot be applied; names the page and line."""


@dataclass
class Block:
    page: str            # relative to the repository root
    line: int            # 1-based line of the opening fence
    lang: str            # "bash" or "python"
    code: str            # as written in the doc
    replace: list[tuple[str, str]] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    timeout: int = DEFAULT_TIMEOUT
    skip: str | None = None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((ln.strip() for ln in self.code.splitlines() if ln.strip()), "")

    def runnable(self) -> str:
        """The code with the block's replacements applied, each of which must match."""
        code = self.code
        for old, new in self.replace:
            if old not in code:
                raise DirectiveError(f"{self.name}: replace {old!r}: not in the block; "
                                     "fix the directive above the block")
            code = code.replace(old, new)
        return code


def _apply(block: Block, text: str, where: str) -> None:
    skip = _SKIP.match(text)
    if skip:
        block.skip = skip.group(1).strip()
        return
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise DirectiveError(f"{where}: {text!r}: {exc}") from None
    kind, args = (words[0], words[1:]) if words else ("", [])
    if kind == "replace" and args and len(args) % 2 == 0:
        block.replace += list(zip(args[::2], args[1::2]))
    elif kind == "before" and len(args) == 1:
        block.before.append(args[0])
    elif kind == "timeout" and len(args) == 1 and args[0].isdigit():
        block.timeout = int(args[0])
    else:
        raise DirectiveError(
            f"{where}: <!-- test: {text} -->: expected skip (reason), replace \"old\" \"new\" "
            "[...], before \"bash command\" or timeout SECONDS")


def page_blocks(path: Path, root: Path) -> list[Block]:
    """The counted blocks of one Markdown page, in order, with their directives applied."""
    rel = str(path.relative_to(root))
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []   # directives waiting for their block
    i = 0
    while i < len(lines):
        found = _DIRECTIVE.match(lines[i])
        fence = _FENCE.match(lines[i])
        if found:
            pending.append((i + 1, found.group(1)))
            i += 1
            continue
        if not fence:
            if pending:
                raise DirectiveError(f"{rel}:{pending[0][0]}: a test directive must be on the "
                                     "line(s) right above a ```bash/```sh/```python fence")
            i += 1
            continue
        indent, marker, lang = fence.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == marker),
                   len(lines))
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln
                         for ln in lines[i + 1:end])
        if lang in LANGS:
            block = Block(rel, i + 1, LANGS[lang], body + "\n")
            for at, text in pending:
                _apply(block, text, f"{rel}:{at}")
            blocks.append(block)
        elif pending:
            raise DirectiveError(f"{rel}:{pending[0][0]}: a test directive above a ```{lang} "
                                 "block, which is not run; only bash, sh and python blocks are")
        pending = []
        i = end + 1
    if pending:
        raise DirectiveError(f"{rel}:{pending[0][0]}: a test directive with no block after it")
    return blocks


def doc_pages(root: Path) -> list[Path]:
    """README.md and every Markdown page under docs/ (the site's pages), sorted."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
