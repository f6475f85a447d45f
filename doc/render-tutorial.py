# SPDX-License-Identifier: MIT
"""render-tutorial.py - the tutorial's page, doc/tutorial.html, made from
its manual page, man/shmap-tutorial.7, with the pictures inline.

Usage: python3 doc/render-tutorial.py PAGE.7 PICTURES_DIR OUT.html

It reads the small part of roff and man macros the tutorial uses (.TH,
.SH, .SS, .PP, .TP, .EX/.EE, .B, .I, .BR, .IR, .RB, .BI and the escapes
\\fB \\fI \\fR \\e \\- \\(aq \\(dq \\(mu \\&) and writes one HTML file with
no reference to any other file.  A comment line '.\\" picture: NAME'
becomes the SVG picture PICTURES_DIR/NAME, inline, where the manual page
can only name the file.
"""
import html
import os
import re
import sys

ESCAPES = [("\\(aq", "'"), ("\\(dq", '"'), ("\\(mu", "\u00d7"),
           ("\\(em", "\u2014"), ("\\-", "-"), ("\\&", ""), ("\\e", "\\")]


def text(s):
    """Inline roff to HTML: escapes, then font changes."""
    for a, b in ESCAPES:
        s = s.replace(a, "\0%d\0" % ESCAPES.index((a, b)))
    s = html.escape(s, quote=False)
    out, font = [], None
    for part in re.split(r"(\\f[BIRP])", s):
        if part in ("\\fB", "\\fI", "\\fR", "\\fP"):
            if font:
                out.append("</%s>" % font)
            font = {"\\fB": "b", "\\fI": "i"}.get(part)
            if font:
                out.append("<%s>" % font)
        else:
            out.append(part)
    if font:
        out.append("</%s>" % font)
    s = "".join(out)
    return re.sub("\0(\\d+)\0", lambda m: html.escape(ESCAPES[int(m.group(1))][1]), s)


def args_of(line):
    """The arguments of a macro line, with double quotes grouping."""
    return [a[1:-1] if a.startswith('"') else a
            for a in re.findall(r'"[^"]*"|\S+', line)]


def alternate(fonts, args):
    tags = {"B": "b", "I": "i", "R": None}
    out = []
    for k, a in enumerate(args):
        t = tags[fonts[k % 2]]
        out.append("<%s>%s</%s>" % (t, text(a), t) if t else text(a))
    return "".join(out)


def macro(name, rest):
    """Inline macros: .B .I .BR .IR .RB .BI .IB .RI."""
    args = args_of(rest)
    if name in ("B", "I"):
        t = name.lower()
        return "<%s>%s</%s>" % (t, text(" ".join(args)), t)
    return alternate(name, args)


def render(lines, pictures):
    out, para, in_ex, title = [], [], False, "libshmap tutorial"
    tp_pending = False

    def flush():
        if para:
            out.append("<p>%s</p>" % "\n".join(para))
            para.clear()

    for line in lines:
        if in_ex:
            if line.startswith(".EE"):
                out.append("</pre>")
                in_ex = False
            else:
                out.append(html.escape(text_raw(line), quote=False))
            continue
        m = re.match(r'^\.\\" picture: (\S+)', line)
        if m:
            flush()
            with open(os.path.join(pictures, m.group(1))) as f:
                out.append('<figure>%s<figcaption>%s</figcaption></figure>'
                           % (f.read(), html.escape(m.group(1))))
            continue
        if line.startswith('.\\"') or line.startswith(".if ") or line in (
                ".in", ".nf", ".fi", ".br") or line.startswith(".in "):
            continue
        m = re.match(r"^\.(\w+)\s*(.*)$", line)
        if not m:
            if tp_pending:
                flush()
                out.append("<dt>%s</dt>" % text(line))
                tp_pending = False
            else:
                para.append(text(line))
            continue
        name, rest = m.groups()
        if name == "TH":
            title = "%s(%s)" % tuple(args_of(rest)[:2])
        elif name == "SH":
            flush()
            out.append("<h2>%s</h2>" % text(" ".join(args_of(rest))))
        elif name == "SS":
            flush()
            out.append("<h3>%s</h3>" % text(" ".join(args_of(rest))))
        elif name in ("PP", "P", "LP"):
            flush()
        elif name == "TP":
            flush()
            tp_pending = True
        elif name == "EX":
            flush()
            out.append('<pre class="code">')
            in_ex = True
        elif name in ("B", "I", "BR", "IR", "RB", "BI", "IB", "RI"):
            if tp_pending:
                out.append("<dt>%s</dt>" % macro(name, rest))
                tp_pending = False
            else:
                para.append(macro(name, rest))
    flush()
    # Join a <pre>'s lines, which were appended one by one.
    body, buf, in_pre = [], [], False
    for piece in out:
        if piece.startswith("<pre"):
            in_pre, buf = True, [piece]
        elif in_pre and piece == "</pre>":
            body.append(buf[0] + "\n".join(buf[1:]) + "</pre>")
            in_pre = False
        elif in_pre:
            buf.append(piece)
        else:
            body.append(piece)
    return title, "\n".join(body)


def text_raw(line):
    """A line of an .EX block as plain text (escapes undone, no fonts)."""
    for a, b in ESCAPES:
        line = line.replace(a, b)
    return line


PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>
body { font-family: sans-serif; max-width: 60em; margin: 1em auto;
       padding: 0 1em; line-height: 1.4; }
pre.code { background: #f4f4f4; padding: 0.6em; overflow-x: auto; }
figure { margin: 1em 0; }
figcaption { font-size: small; color: #555; }
dt { font-weight: bold; margin-top: 0.8em; }
</style></head>
<body>
<h1>%(title)s</h1>
%(body)s
</body></html>
"""


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        lines = f.read().split("\n")
    title, body = render(lines, argv[2])
    with open(argv[3], "w") as f:
        f.write(PAGE % {"title": html.escape(title), "body": body})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
