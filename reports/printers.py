"""The report tree (reports/model.py) printed as HTML and as LaTeX: each printer is one generic walk, `doprint`
dispatching on the node's class name to its `_print_<Node>` (as sympy.printing.printer.Printer does). Escaping
lives here, never in the tree."""
from __future__ import annotations

import re

from markupsafe import escape

from reports import model
from reports.model import Only

LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


def tex_escape(value):
    """Literal text for LaTeX: specials escaped, and "--" kept as two hyphens (not an en dash)."""
    text = re.sub(r"[\\&%$#_{}~^<>|]", lambda m: LATEX_SPECIALS[m.group(0)], str(value))
    return text.replace("--", "-{}-").replace("-{}--", "-{}-{}-")


def tex_breakable(value, every=10):
    """Escaped; long words (decimals) may break every few characters, for narrow columns."""
    def word(w):
        return r"\allowbreak{}".join(tex_escape(w[i:i + every]) for i in range(0, len(w), every))
    return " ".join(word(w) for w in str(value).split(" "))


class Printer:
    format = ""

    def doprint(self, node):
        if node is None:
            return ""
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, (list, tuple)):
            return self.join(self.doprint(n) for n in node)
        return getattr(self, f"_print_{type(node).__name__}")(node)

    def join(self, pieces):
        return "".join(pieces)

    def blocks(self, nodes, sep="\n"):
        return sep.join(p for p in map(self.doprint, nodes) if p)

    def _print_Only(self, node):
        return self.doprint(node.content) if node.format == self.format else ""

    def visible(self, node):
        """The node itself, or None where it is another format's Only."""
        while isinstance(node, Only):
            if node.format != self.format:
                return None
            node = node.content
        return node

    def table_parts(self, table):
        """(header cells, kept column indices, rows) with the other format's columns and rows left out."""
        header = table.header or []
        keep = [i for i, h in enumerate(header) if self.visible(h) is not None] if header else None
        rows = [r for r in (self.visible(r) for r in table.rows) if r is not None]
        return [header[i] for i in keep] if header else [], keep, rows

    @staticmethod
    def cells(row, keep):
        cells = row.cells if isinstance(row, model.Row) else row
        return cells if keep is None else [cells[i] for i in keep]


class HtmlPrinter(Printer):
    format = "html"
    GLYPHS = {"ndash": "&ndash;", "mdash": "&mdash;", "middot": "&middot;", "hellip": "&hellip;", "mu": "&mu;",
              "times": "&times;", "plusmn": "&plusmn;", "x": "x", "nbsp": " "}
    ALERT_CLASS = {"pass": "banner pass", "fail": "banner fail", "loud": "alert loud", "alert": "alert", "warn": "warn"}

    def __init__(self, svgs=None):
        self.svgs = svgs or {}

    @staticmethod
    def attrs(**kw):
        return "".join(f' {k.rstrip("_")}="{escape(v)}"' for k, v in kw.items() if v)

    def text(self, s):
        return str(escape(s))

    def _print_Code(self, n):
        return f"<code{self.attrs(class_='nowrap' if n.nowrap else '')}>{self.text(n.text)}</code>"

    def _print_Bold(self, n):
        return f"<b>{self.doprint(n.content)}</b>"

    def _print_Emph(self, n):
        return f"<em>{self.doprint(n.content)}</em>"

    def _print_Small(self, n):
        return f'<span class="small">{self.doprint(n.content)}</span>'

    def _print_Alarm(self, n):
        return self.doprint(n.content)

    def _print_Math(self, n):
        return (r"\[{}\]" if n.display else r"\({}\)").format(self.text(n.latex))

    def _print_Latex(self, n):
        return self.text(n.text)

    def _print_Long(self, n):
        return self.text(n.text)

    def _print_Link(self, n):
        return f'<a class="small" href="#{escape(n.target)}">{self.doprint(n.content)}</a>'

    def _print_Badge(self, n):
        cls = "badge" + (" mini" if n.mini else "") + f" {n.cls}" + (" open" if n.open else "")
        return f'<span class="{cls}">{self.text(n.lead)}{self.doprint(n.word)}</span>'

    def _print_Glyph(self, n):
        return self.GLYPHS[n.name]

    def _print_Break(self, n):
        return "<br>"

    def _print_Paragraph(self, n):
        return f"<p{self.attrs(class_=n.cls, id=n.id)}>{self.doprint(n.content)}</p>"

    def _print_List(self, n):
        labels = n.labels or [None] * len(n.items)
        items = "".join(f"<li>{f'<b>{self.text(lb)}</b> ' if lb else ''}{self.doprint(it)}</li>"
                        for lb, it in zip(labels, n.items))
        style = ' style="list-style: none"' if n.labels else ""
        return f"<ul{self.attrs(id=n.id)}{style}>{items}</ul>"

    def cell(self, c, num, th=False):
        if not isinstance(c, model.Cell):
            c = model.Cell(c, cls="num" if num else None, th=th)
        tag = "th" if c.th or th else "td"
        return f"<{tag}{self.attrs(class_=c.cls, title=c.title)}>{self.doprint(c.content)}</{tag}>"

    def _print_Table(self, t):
        header, keep, rows = self.table_parts(t)
        cols = keep if keep is not None else range(max((len(self.cells(r, None)) for r in rows
                                                        if not isinstance(r, model.SpanRow)), default=0))
        num = [i in t.num for i in cols]
        lines = [f"<table{self.attrs(id=t.id)}>"]
        if header:
            lines[0] += "<tr>" + "".join(self.cell(h, k, th=True) for h, k in zip(header, num)) + "</tr>"
        for r in rows:
            if isinstance(r, model.SpanRow):
                n = len(num)
                lines.append(f'<tr><td></td><td colspan="{n - 1}">{self.doprint(r.content)}</td></tr>' if r.indent
                             else f'<tr><td colspan="{n}">{self.doprint(r.content)}</td></tr>')
                continue
            rid = r.id if isinstance(r, model.Row) else None
            lines.append(f"<tr{self.attrs(id=rid)}>" + "".join(self.cell(c, k) for c, k in zip(self.cells(r, keep), num))
                         + "</tr>")
        return "\n".join(lines) + "</table>"

    def _print_Figure(self, n):
        svg = self.svgs.get(n.name)
        return f"<figure{self.attrs(id=n.id)}>{svg}</figure>" if svg else ""

    def _print_Details(self, n):
        return f"<details><summary>{self.doprint(n.summary)}</summary>{self.doprint(n.content)}</details>"

    def _print_Alert(self, n):
        title = f"<b>{self.doprint(n.title)}</b>\n" if n.title else ""
        return f'<div class="{self.ALERT_CLASS[n.kind]}"{self.attrs(id=n.id)}>{title}{self.blocks(n.body)}\n</div>'

    def _print_Contents(self, n):
        links = " &middot; ".join(f'<a href="#{a}">{self.doprint(t)}</a>' for a, t in n.entries)
        return f'<nav id="contents"><b>Contents</b>\n{links}\n</nav>'

    def _print_Section(self, n):
        h = f"h{n.level}"
        return "\n".join([f"<{h}{self.attrs(id=n.anchor)}>{self.doprint(n.title)}</{h}>", self.blocks(n.children)])


class TexPrinter(Printer):
    format = "tex"
    GLYPHS = {"ndash": "--", "mdash": "---", "middot": r"\textperiodcentered{}", "hellip": r"\ldots{}",
              "mu": r"$\mu$", "times": r"$\times$", "plusmn": r"$\pm$", "x": r"$\times$", "nbsp": "~"}
    HEADINGS = {2: r"\section{%s}", 3: r"\subsection*{%s}", 4: r"\paragraph{%s}"}
    BOX = {"pass": ("passed", "passed!10"), "fail": ("failed", "failed!10"), "loud": ("bad", "bad!12")}

    def text(self, s):
        return tex_escape(s)

    def join(self, pieces):
        """Concatenated, with a space where a control word would otherwise swallow the letters after it."""
        out = ""
        for p in pieces:
            if p and re.search(r"\\[A-Za-z]+$", out) and p[0].isalpha():
                out += " "
            out += p
        return out

    def _print_Code(self, n):
        text = self.text(n.text)
        for ch in n.breaks:
            text = text.replace(ch, ch + r"\allowbreak{}")
        return rf"\texttt{{{text}}}"

    def _print_Bold(self, n):
        return rf"\textbf{{{self.doprint(n.content)}}}"

    def _print_Emph(self, n):
        return rf"\emph{{{self.doprint(n.content)}}}"

    def _print_Small(self, n):
        return rf"{{\footnotesize {self.doprint(n.content)}}}"

    def _print_Alarm(self, n):
        return rf"\textcolor{{bad}}{{\textbf{{{self.doprint(n.content)}}}}}"

    def _print_Math(self, n):
        return rf"\[ {n.latex} \]" if n.display else f"${n.latex}$"

    def _print_Latex(self, n):
        return n.text

    def _print_Long(self, n):
        return tex_breakable(n.text)

    def _print_Link(self, n):
        return rf"{{\scriptsize\hyperlink{{{n.target}}}{{{self.doprint(n.content)}}}}}"

    def _print_Badge(self, n):
        out = self.text(n.lead) + rf"\verdict{{{n.cls}}}{{{self.doprint(n.word)}}}"
        return rf"{{\footnotesize {out}}}" if n.mini and n.lead else out

    def _print_Glyph(self, n):
        return self.GLYPHS[n.name]

    def _print_Break(self, n):
        return r"\newline"

    def _print_Paragraph(self, n):
        body = self.doprint(n.content)
        return rf"{{\footnotesize {body}\par}}" if n.cls == "small" else body

    def _print_List(self, n):
        labels = n.labels or [None] * len(n.items)
        items = "".join((rf"\item[{self.text(lb)}] " if lb else r"\item ") + self.doprint(it) + "\n"
                        for lb, it in zip(labels, n.items))
        return f"\\begin{{itemize}}\n{items}\\end{{itemize}}"

    def cell(self, c):
        return self.doprint(c.content if isinstance(c, model.Cell) else c)

    def _print_Table(self, t):
        header, keep, rows = self.table_parts(t)
        env = "longtable" if t.long else "tabular"
        lines = [rf"\begin{{{env}}}{{{t.tex}}}"]
        if header:
            lines.append(r"\toprule " + " & ".join(map(self.cell, header)) + r" \\ \midrule" + (r" \endhead" if t.long else ""))
        for r in rows:
            if isinstance(r, model.SpanRow):
                n = len(header)
                lines.append(rf"\multicolumn{{{n}}}{{@{{}}l@{{}}}}{{\hspace*{{1em}}\parbox[t]{{\dimexpr\textwidth-1em-2pt\relax}}"
                             rf"{{\raggedright {self.doprint(r.content)}\strut}}}} \\" if r.indent
                             else rf"\multicolumn{{{n}}}{{@{{}}l}}{{{self.doprint(r.content)}}} \\")
                continue
            cells = list(map(self.cell, self.cells(r, keep)))
            row = r if isinstance(r, model.Row) else model.Row(cells)
            if row.target and row.id:
                cells[0] = rf"\hypertarget{{{row.id}}}{{}}" + cells[0]
            line = cells[0] + "".join(f" & {c}" if c else " &" for c in cells[1:])
            lines.append((r"\midrule" + "\n" if row.rule else "") + line + (r" \\*" if row.keep else r" \\"))
        lines += [r"\bottomrule", rf"\end{{{env}}}"]
        body = "\n".join(lines)
        return f"{{{t.tex_pre}\n{body}}}" if t.tex_pre else body

    def _print_Figure(self, n):
        return (rf"\begin{{figure}}[htbp]\centering\includegraphics[width={n.width}\textwidth]{{figures/{n.name}.pdf}}"
                r"\end{figure}")

    def _print_Details(self, n):
        return self.doprint(n.content)

    def _print_Alert(self, n):
        if n.kind in ("alert", "warn"):
            return "\n".join([rf"\section*{{{self.doprint(n.title)}}}", self.blocks(n.body)])
        frame, fill = self.BOX[n.kind]
        title = ""
        if n.title:
            title = (rf"\textcolor{{bad}}{{\textbf{{{self.doprint(n.title)}}}}}" if n.kind == "loud"
                     else rf"\textbf{{{self.doprint(n.title)}}}") + "\n"
        return (rf"\medskip\noindent\fcolorbox{{{frame}}}{{{fill}}}{{\begin{{minipage}}{{0.96\textwidth}}" + "\n"
                + title + self.blocks(n.body) + "\n" + r"\end{minipage}}" + "\n" + r"\medskip")

    def _print_Contents(self, n):
        return r"{\small\tableofcontents}"

    def _print_Section(self, n):
        title = self.doprint(n.tex_title if n.tex_title is not None else n.title)
        head = self.HEADINGS[n.level] % title + (rf"\label{{{n.anchor}}}" if n.anchor and n.level == 2 else "")
        return "\n".join([head, self.blocks(n.children, "\n\n")])
