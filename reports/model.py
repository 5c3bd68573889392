"""The report as a tree of nodes: reports/build.py makes it from results.json, reports/printers.py prints it as
HTML and as LaTeX (one `_print_<Node>` per node kind and format).

A node holds content, never markup: text is plain and the printers escape it. Inline content is a str, a node, or
a list of them. Where the two outputs have always said different things (the PDF's narrower page keeps fewer
columns, the web page folds long lists), the tree marks it with `Only(format, content)`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Content = Any  # str | node | list of them


# -- inline ------------------------------------------------------------------------------------------------------
@dataclass
class Code:
    text: str
    nowrap: bool = False
    breaks: str = ""  # characters after which the PDF may break the line


@dataclass
class Bold:
    content: Content


@dataclass
class Emph:
    content: Content


@dataclass
class Small:
    content: Content


@dataclass
class Alarm:
    """Text that must be seen: red and bold in the PDF (on the web page the alert box around it already is)."""
    content: Content


@dataclass
class Math:
    latex: str
    display: bool = False


@dataclass
class Latex:
    """LaTeX source with inline $...$ math (a claim's derivation): the PDF takes it as it is, KaTeX typesets it."""
    text: str


@dataclass
class Long:
    """A long word (an exact number) that may break anywhere in a narrow PDF column."""
    text: str


@dataclass
class Link:
    target: str
    content: Content


@dataclass
class Badge:
    """A verdict word in its colour class (good, bad, partial, neutral); `lead` is read before it."""
    word: Content
    cls: str
    mini: bool = False
    open: bool = False
    lead: str = ""


@dataclass
class Glyph:
    """A symbol each format spells its own way: ndash, mdash, middot, hellip, mu, times, plusmn, x (a speedup's),
    nbsp (between a number and its unit in the PDF)."""
    name: str


@dataclass
class Break:
    pass


@dataclass
class Only:
    """Content for one format ("html" or "tex") only."""
    format: str
    content: Content


# -- blocks ------------------------------------------------------------------------------------------------------
@dataclass
class Paragraph:
    content: Content
    id: str | None = None
    cls: str | None = None  # "small", "counts", "alert"


@dataclass
class List:
    items: list
    labels: list | None = None  # one label per item ("(a)"), or None for bullets
    id: str | None = None


@dataclass
class Cell:
    content: Content
    cls: str | None = None
    title: str | None = None  # the web page's tooltip
    th: bool = False


@dataclass
class Row:
    cells: list
    id: str | None = None
    rule: bool = False    # a rule above it in the PDF
    keep: bool = False    # kept on one page with the row after it
    target: bool = False  # the id is a link target in the PDF too


@dataclass
class SpanRow:
    """One cell across the table; `indent` leaves the first column free."""
    content: Content
    indent: bool = True


@dataclass
class Table:
    """A header (a column whose header is Only(format, ...) exists in that format only) and rows (lists of cells,
    Row, SpanRow, or Only of them). Columns in `num` are right-aligned figures. `tex` is the LaTeX column spec,
    `tex_pre` what goes before the table inside its group (a font size), `long` a longtable (else tabular)."""
    header: list | None
    rows: list
    id: str | None = None
    num: frozenset = frozenset()
    tex: str = ""
    tex_pre: str = ""
    long: bool = True


@dataclass
class Figure:
    name: str
    id: str | None = None
    width: float = 0.95


@dataclass
class Details:
    """Folded on the web page; in the PDF just its content."""
    summary: Content
    content: Content


@dataclass
class Alert:
    """A box: kind "pass"/"fail" (the banner), "loud" (an inconsistency), "alert" (failures), "warn" (skips)."""
    kind: str
    title: Content
    body: list
    id: str | None = None


@dataclass
class Contents:
    entries: list  # (anchor, title)


@dataclass
class Section:
    """A heading and its children; level 2 is a numbered section in the PDF, 3 a subsection, 4 a paragraph head.
    `tex_title` is the PDF's shorter heading where it has one."""
    anchor: str | None
    title: Content
    children: list = field(default_factory=list)
    level: int = 2
    tex_title: Content = None


def html(*content):
    return Only("html", content[0] if len(content) == 1 else list(content))


def tex(*content):
    return Only("tex", content[0] if len(content) == 1 else list(content))


def alt(for_html, for_tex):
    """What each format says at one place."""
    return [Only("html", for_html), Only("tex", for_tex)]


def join(items, sep):
    """Inline items with a separator between them."""
    out = []
    for i, item in enumerate(items):
        out += [sep, item] if i else [item]
    return out
