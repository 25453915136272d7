"""Sub-commands of ``ooc-svm`` (one module each: ``add_parser(subparsers)``, ``run(args)``).

:class:`HelpFormatter` is the ``formatter_class`` of every command's parser.
"""

from __future__ import annotations

import argparse
import re
import shutil
import textwrap

#: ``--help`` never wider than this, however wide the terminal
HELP_WIDTH = 100


#: a two-column line: indent, one-word term, 2+ spaces, text ("  perf        linear SVMs")
_TERM = re.compile(r"^( *)(\S+ {2,})\S")
#: a list item ("- binary labels: ...")
_ITEM = re.compile(r"^( *)([-*] )\S")


def _hang(line: str) -> int:
    """Where the continuation of ``line`` starts: under the text of a two-column line or a
    list item, else 4 columns deeper than the line."""
    m = _TERM.match(line) or _ITEM.match(line)
    if m:
        return len(m.group(1)) + len(m.group(2))
    return len(line) - len(line.lstrip()) + 4


def _entries(lines: list[str]) -> list[tuple[str, int]]:
    """``(text, hanging indent)`` of each entry of an indented paragraph: a line indented
    exactly to the previous entry's hanging indent continues that entry (its words are
    joined to it, to be wrapped again as one)."""
    out: list[tuple[str, int]] = []
    for line in lines:
        lead = len(line) - len(line.lstrip())
        if out and line.strip() and lead == out[-1][1] and lead > _lead(out[-1][0]):
            text, hang = out[-1]
            out[-1] = (f"{text} {line.strip()}", hang)
        else:
            out.append((line.rstrip(), _hang(line)))
    return out


def _lead(line: str) -> int:
    return len(line) - len(line.lstrip())


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` wrapped to ``min(100, terminal width)``.

    In the description and epilog, a paragraph (text between blank lines) of unindented lines
    is filled; a paragraph holding indented lines (a list of examples, a table) keeps its
    lines, and only a line too long for the width is wrapped, with a deeper indent.
    Argument help is wrapped without breaking words at hyphens (``ooc-svm``, ``--max-iter``).
    """

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 28,
                 width: int | None = None) -> None:  # fmt: skip
        if width is None:
            width = min(HELP_WIDTH, shutil.get_terminal_size().columns - 2)
        super().__init__(prog, indent_increment, max_help_position, max(40, width))

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for para in textwrap.dedent(text).strip("\n").split("\n\n"):
            lines = para.split("\n")
            if any(line[:1] == " " for line in lines):
                for entry, hang in _entries(lines):
                    out.extend(
                        textwrap.wrap(
                            entry,
                            width,
                            initial_indent=indent,
                            subsequent_indent=indent + " " * hang,
                            break_long_words=False,
                            break_on_hyphens=False,
                        )
                        or [""]
                    )
            else:
                out.append(
                    textwrap.fill(
                        " ".join(line.strip() for line in lines),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,
                    )
                )
            out.append("")
        return "\n".join(out).rstrip("\n")

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = " ".join(text.split())
        return textwrap.wrap(text, width, break_on_hyphens=False)
