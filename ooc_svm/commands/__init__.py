"""Sub-commands of ``ooc-svm`` (one module each: ``add_parser(subparsers)``, ``run(args)``).

:class:`HelpFormatter` is the ``formatter_class`` of every command's parser.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

#: ``--help`` never wider than this, however wide the terminal
HELP_WIDTH = 100


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
                for line in lines:
                    lead = len(line) - len(line.lstrip())
                    out.extend(
                        textwrap.wrap(
                            line,
                            width,
                            initial_indent=indent,
                            subsequent_indent=indent + " " * (lead + 4),
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
