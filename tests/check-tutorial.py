# SPDX-License-Identifier: MIT
"""check-tutorial.py - the code of the tutorial is the code that runs.

Usage: python3 tests/check-tutorial.py [--update] SRCDIR [HTML]

In man/shmap-tutorial.7 every .EX/.EE block is marked on the line before
it, either as a transcript (tests/transcripts.py checks those) or as an
excerpt:

    .\\" excerpt: examples/NAME.c TAG

An excerpt is the lines of examples/NAME.c between the lines
"/* [tutorial:TAG] */" and "/* [end] */", without their common
indentation, written in roff (\\e for a backslash, \\- for a minus,
\\(aq for a quote, \\& before a leading dot).  This check fails when a
block is not marked, when an excerpt differs from its source, when the
marks are missing from the source, or when the source's program is not
one that `make check` runs (listed in a TESTS += $(list) of an
examples/*.mk fragment, or on the "for ex in" line of a script there).  With --update the excerpts are rewritten from
the sources instead.

Given HTML (the page doc/render-tutorial.py made, doc/tutorial.html), it
also checks that the page is the one the current man page gives: every
excerpt's code is in it, and an inline <svg> for every picture.

Exit status: 0 pass, 1 fail, 2 usage or a malformed page.
"""
import html
import os
import re
import sys

PAGE = "man/shmap-tutorial.7"


def to_roff(line):
    s = line.replace("\\", "\\e").replace("-", "\\-").replace("'", "\\(aq")
    if s.startswith(".") or s.startswith("\\(aq"):
        s = "\\&" + s
    return s


def from_roff(line):
    s = line.replace("\\&", "").replace("\\-", "-").replace("\\(aq", "'")
    s = s.replace("\\(dq", '"')
    return s.replace("\\e", "\\")


def excerpt(src, path, tag):
    with open(os.path.join(src, path)) as f:
        lines = f.read().split("\n")
    start = [i for i, l in enumerate(lines)
             if l.strip() == "/* [tutorial:%s] */" % tag]
    if len(start) != 1:
        return None
    end = next((i for i in range(start[0] + 1, len(lines))
                if lines[i].strip() == "/* [end] */"), None)
    if end is None:
        return None
    body = lines[start[0] + 1:end]
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()),
                 default=0)
    return [l[indent:] for l in body]


def tested_programs(src):
    """Programs that make check runs: members of lists added to TESTS in
    examples/*.mk."""
    out = set()
    d = os.path.join(src, "examples")
    for name in os.listdir(d):
        if not name.endswith(".mk"):
            continue
        with open(os.path.join(d, name)) as f:
            text = f.read().replace("\\\n", " ")
        lists = {}
        for m in re.finditer(r"^(\w+)\s*\+?=\s*(.*)$", text, re.M):
            lists.setdefault(m.group(1), []).extend(m.group(2).split())
        for v in lists.get("TESTS", []):
            m = re.fullmatch(r"\$\((\w+)\)", v)
            out.update(lists.get(m.group(1), []) if m else [v])
            # A script that runs examples names them on a "for ex in" line.
            if v.endswith(".sh") and os.path.exists(os.path.join(src, v)):
                with open(os.path.join(src, v)) as f:
                    for m in re.finditer(r"^for ex in (.*?); do", f.read(),
                                         re.M):
                        out.update("examples/" + p for p in m.group(1).split())
    return out


def blocks(lines):
    """(marker line index, .EX index, .EE index) of every .EX block."""
    out = []
    for i, l in enumerate(lines):
        if l.startswith(".EX"):
            j = next((k for k in range(i + 1, len(lines))
                      if lines[k].startswith(".EE")), None)
            if j is None:
                raise ValueError("%s:%d: .EX without .EE" % (PAGE, i + 1))
            k = i - 1
            while k >= 0 and lines[k].startswith(".in"):
                k -= 1
            out.append((k, i, j))
    return out


def main(argv):
    args = argv[1:]
    update = args[:1] == ["--update"]
    if update:
        args = args[1:]
    if len(args) not in (1, 2):
        sys.stderr.write(__doc__)
        return 2
    src = args[0]
    with open(os.path.join(src, PAGE)) as f:
        lines = f.read().split("\n")
    tested = tested_programs(src)
    bad, codes, done = 0, [], 0
    for k, i, j in reversed(blocks(lines)):
        mark = lines[k] if k >= 0 else ""
        if re.match(r'^\.\\" transcript', mark):
            continue
        m = re.match(r'^\.\\" excerpt: (\S+) (\S+)\s*$', mark)
        if not m:
            print("check-tutorial: %s:%d: a code block marked neither as an "
                  "excerpt nor as a transcript" % (PAGE, i + 1))
            bad += 1
            continue
        path, tag = m.groups()
        want = excerpt(src, path, tag)
        if want is None:
            print("check-tutorial: %s:%d: %s has no excerpt %s between "
                  "/* [tutorial:%s] */ and /* [end] */"
                  % (PAGE, k + 1, path, tag, tag))
            bad += 1
            continue
        if re.sub(r"\.c$", "", path) not in tested:
            print("check-tutorial: %s:%d: %s is not a program make check "
                  "runs" % (PAGE, k + 1, path))
            bad += 1
        codes.append(want)
        got = [from_roff(l) for l in lines[i + 1:j]]
        if got != want:
            if update:
                lines[i + 1:j] = [to_roff(l) for l in want]
                continue
            print("check-tutorial: %s:%d: the excerpt %s of %s differs from "
                  "its source:" % (PAGE, i + 1, tag, path))
            for a, b in zip(got + [""] * len(want), want + [""] * len(got)):
                if a != b:
                    print("  page:   %s\n  source: %s" % (a, b))
                    break
            bad += 1
        done += 1
    if update:
        with open(os.path.join(src, PAGE), "w") as f:
            f.write("\n".join(lines))
        return 0
    if len(args) == 2:
        with open(args[1]) as f:
            page = f.read()
        for want in codes:
            if html.escape("\n".join(want), quote=False) not in page:
                print("check-tutorial: %s lacks the excerpt starting %r: "
                      "rebuild it from %s" % (args[1], want[0], PAGE))
                bad += 1
        pics = [l for l in lines if l.startswith('.\\" picture: ')]
        svgs = page.count("<svg ")
        if svgs != len(pics):
            print("check-tutorial: %s has %d inline pictures; %s marks %d"
                  % (args[1], svgs, PAGE, len(pics)))
            bad += 1
    print("check-tutorial: %d excerpts checked against their sources" % done)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
