#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""transcripts.py - keep the transcripts in README.md and the man pages true.

A transcript is a block of a document that shows what a command prints.  It
is marked by a comment on the line before it:

    README.md (Markdown):  <!-- transcript -->         then a ``` block
                           <!-- transcript: CMD -->
    man pages (roff):      .\\" transcript              then an .EX/.EE block
                           .\\" transcript: CMD

With a bare "transcript" the block is a session: lines starting with "$ "
are shell commands, and the lines after a "$ ... gdb ..." command that
start with "(gdb) " are gdb commands typed at its prompt; every other line
is output.  With "transcript: CMD" the block is the whole output of the
shell command CMD, except when CMD starts gdb and the block holds only
"(gdb) " commands and their output: then the block shows those commands
typed after CMD's own -ex commands (whose output is left out).  The
commands of a session run in one shell, so a later command can use what
an earlier one left ($!, files); gdb runs in batch mode (-nx -batch) with the typed
commands and "(gdb) COMMAND" echoed before each.

Each block is compared with a fresh run after both are normalised:
addresses, process and thread ids, durations ("1.0 s"), trace timestamps,
line numbers in the library's sources (src/) and the directory of the
build tree are replaced by placeholders, the arguments of a frame in the
library's sources are reduced to their names (GCC keeps or drops their
values with every edit of the library), and runs of blanks by one.  A block that differs is run a second time before it
counts as different (its programs order their devices with sleeps).  With --update the blocks are rewritten with the fresh
output instead (as printed, not normalised).

The commands run in a scratch directory where tests, src, examples and
libtool lead to the build tree and gdb to the source tree.

usage: transcripts.py [--update] [--builddir DIR] [--srcdir DIR] FILE...
Exit status: 0 all match (or updated), 1 a transcript differs, 2 usage or
a malformed document.
"""

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile

TIMEOUT = 300


def md_blocks(lines):
    """(start, end, command) of each marked block: lines[start:end] is the
    block's content."""
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^<!-- transcript(?::\s*(.*?))?\s*-->\s*$", line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError("line %d: a transcript marker must be followed "
                             "by a ``` block" % (i + 1))
        j = i + 2
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise ValueError("line %d: unterminated ``` block" % (i + 2))
        out.append((i + 2, j, m.group(1)))
    return out


def man_blocks(lines):
    out = []
    for i, line in enumerate(lines):
        m = re.match(r'^\.\\" transcript(?::\s*(.*?))?\s*$', line)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != ".EX":
            if not lines[j].startswith("."):
                raise ValueError("line %d: text between a transcript marker "
                                 "and its .EX" % (j + 1))
            j += 1
        k = j + 1
        while k < len(lines) and lines[k].strip() != ".EE":
            k += 1
        if k >= len(lines):
            raise ValueError("line %d: no .EX/.EE block after the "
                             "transcript marker" % (i + 1))
        out.append((j + 1, k, m.group(1)))
    return out


_MAN_IN = [("\\-", "-"), ("\\(aq", "'"), ("\\(ti", "~"), ("\\(dq", '"'),
           ("\\&", ""), ("\\e", "\\")]


def man_unescape(line):
    out, i = [], 0
    while i < len(line):
        for esc, ch in _MAN_IN:
            if line.startswith(esc, i):
                out.append(ch)
                i += len(esc)
                break
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def man_escape(line):
    s = line.replace("\\", "\\e").replace("-", "\\-").replace("'", "\\(aq")
    if s.startswith(".") or s.startswith("'"):
        s = "\\&" + s
    return s


def gdb_echo(text):
    """A gdb "echo" argument that prints text exactly."""
    s = text.replace("\\", "\\\\")
    if s.startswith(" "):
        s = "\\" + s
    return s + "\\n"


def is_gdb(cmd):
    words = shlex.split(cmd)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    return bool(words) and words[0] == "gdb"


def run_session(block, builddir, tmp):
    """Run the commands of a session block; the fresh block."""
    steps = []  # (shell command, [gdb commands])
    for line in block:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.startswith("(gdb) ") and steps and is_gdb(steps[-1][0]):
            steps[-1][1].append(line[6:])
    if not steps:
        raise ValueError("a session transcript without a \"$ \" command")
    script = []
    for n, (cmd, gcmds) in enumerate(steps):
        script.append("echo '@@step %d'" % n)
        if is_gdb(cmd):
            path = os.path.join(tmp, "gdb%d.cmds" % n)
            with open(path, "w") as f:
                for g in gcmds:
                    f.write("echo %s\n" % gdb_echo("(gdb) " + g))
                    f.write(g + "\n")
            cmd += " -nx -batch -x %s" % shlex.quote(path)
        script.append(cmd)
    res = run_shell("\n".join(script) + "\n", builddir)
    out = []
    current = None
    for line in res.split("\n"):
        m = re.match(r"^@@step (\d+)$", line)
        if m:
            current = int(m.group(1))
            out.append("$ " + steps[current][0])
            continue
        if current is not None:
            out.append(line)
    while out and out[-1] == "":
        out.pop()
    return out


def run_gdb_block(cmd, block, builddir, tmp):
    """A block of "(gdb) " commands and their output, typed into the gdb
    that the shell command cmd starts (after cmd's own -ex commands, whose
    output is not part of the block)."""
    if not is_gdb(cmd):
        raise ValueError("a block of gdb commands needs a gdb command line "
                         "in its marker")
    steps = [line for line in block if line.startswith("(gdb) ")]
    out = run_session(["$ " + cmd] + steps, builddir, tmp)
    while out and not out[0].startswith("(gdb) "):
        out.pop(0)
    return out


def run_shell(script, builddir):
    env = dict(os.environ)
    env["DEBUGINFOD_URLS"] = ""
    for k in ("SHMAP_WATCHDOG", "SHMAP_TRACE", "SHMAP_SCHED",
              "SHMAP_WORKERS", "SHMAP_SPIN"):
        env.pop(k, None)
    p = subprocess.run(["sh", "-c", script], cwd=builddir, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=TIMEOUT)
    text = p.stdout.decode("utf-8", "replace").expandtabs()
    return "\n".join(line.rstrip() for line in text.split("\n"))


def run_command(cmd, builddir):
    out = run_shell(cmd + "\n", builddir).split("\n")
    while out and out[-1] == "":
        out.pop()
    return out


def frame_arg_names(s):
    """A frame in the library's own sources keeps its arguments' names only.

    Whether GCC keeps an argument's value (count=16), only its value at
    entry (count=count@entry=16) or neither (count=<optimized out>) changes
    with edits of the library as much as its line numbers do; the names are
    the function's parameters and stay.  Frames in the tests and examples
    keep their values."""
    m = re.match(r"(#\d+\s+(?:0x\S+ in )?[\w.]+ \()(.*)(\) at src/\S+)$", s)
    if not m:
        return s
    names, depth, cur = [], 0, ""
    for ch in m.group(2) + ",":
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            names.append(cur.split("=", 1)[0].strip())
            cur = ""
        else:
            cur += ch
    return m.group(1) + ", ".join(names) + m.group(3)


def normalise(lines, builddir):
    root = os.path.realpath(builddir)
    out = []
    lib_line = None  # the line number of a frame in the library's sources
    for line in lines:
        s = line.expandtabs().replace(root + "/", "<top>/")
        # Line numbers in the library's own sources change with every edit
        # of them and tell a reader nothing: a frame's, and the source line
        # gdb prints after it.
        if lib_line is not None and s.startswith(lib_line + " "):
            s = "?" + s[len(lib_line):]
        m = re.search(r"\bat src/[\w/.-]+\.[ch]:(\d+)$", s)
        lib_line = m.group(1) if m else None
        s = re.sub(r"\b(at src/[\w/.-]+\.[ch]):\d+", r"\1:?", s)
        s = frame_arg_names(s)
        s = re.sub(r"/tmp[^\s:'\"()<>]*/run/", "<top>/", s)
        s = re.sub(r"/[^\s:'\"()<>]*/(tests|src|gdb|examples)/", r"<top>/\1/",
                   s)
        # A build with MPI names its library libshmap-mpi.so.N, one without
        # libshmap.so.N (README.md, "ABI policy"): one transcript fits both.
        s = re.sub(r"\blibshmap-mpi\.so\b", "libshmap.so", s)
        s = re.sub(r"0x[0-9a-fA-F]+", "0x?", s)
        s = re.sub(r"\b(LWP|process|pid) \d+", r"\1 ?", s)
        s = re.sub(r"\b\d+\.\d+ s\b", "?.? s", s)
        s = re.sub(r'"(ts|dur)":[0-9.]+', r'"\1":?', s)
        s = re.sub(r"\s+", " ", s).strip()
        out.append(s)
    return out


def make_rundir(tmp, builddir, srcdir):
    """A directory where the documents' relative paths work: tests, src,
    examples and libtool of the build tree, gdb of the source tree."""
    run = os.path.join(tmp, "run")
    os.mkdir(run)
    for name, top in (("tests", builddir), ("src", builddir),
                      ("examples", builddir), ("libtool", builddir),
                      ("gdb", srcdir)):
        target = os.path.join(os.path.realpath(top), name)
        if os.path.exists(target):
            os.symlink(target, os.path.join(run, name))
    return run


def run_block(cmd, want, builddir, srcdir):
    """A fresh run of a block (want: its lines in the document)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = make_rundir(tmp, builddir, srcdir)
        if cmd and any(l.startswith("(gdb) ") for l in want) and not \
                any(l.startswith("$ ") for l in want):
            return run_gdb_block(cmd, want, run, tmp)
        if cmd:
            return run_command(cmd, run)
        return run_session(want, run, tmp)


def check_file(path, builddir, srcdir, update):
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    man = not path.endswith(".md")
    blocks = man_blocks(lines) if man else md_blocks(lines)
    ok = True
    # From the end, so that updates keep the earlier positions valid.
    for start, end, cmd in reversed(blocks):
        want = lines[start:end]
        if man:
            want = [man_unescape(l) for l in want]
        what = "%s:%d" % (path, start)
        nwant = normalise(want, builddir)
        # A second run when the first differs: the programs shown wait
        # for each other with sleeps, which a machine busy enough can
        # outlast.
        for attempt in (1, 2):
            got = run_block(cmd, want, builddir, srcdir)
            ngot = normalise(got, builddir)
            if nwant == ngot or update:
                break
        if nwant == ngot:
            print("ok: %s%s" % (what, "" if attempt == 1 else
                                " (on the second run)"))
            continue
        if update:
            lines[start:end] = [man_escape(l) for l in got] if man else got
            print("updated: %s" % what)
            continue
        ok = False
        print("DIFFERS: %s (- the document, + a fresh run, both "
              "normalised):" % what)
        sys.stdout.writelines(difflib.unified_diff(
            [l + "\n" for l in nwant], [l + "\n" for l in ngot],
            "document", "fresh run", n=2))
        print("---- the fresh run as printed:")
        sys.stdout.writelines(l + "\n" for l in got)
    if update:
        new = "\n".join(lines)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
    return ok


def main(argv):
    update = False
    builddir = srcdir = "."
    files = []
    args = iter(argv)
    for a in args:
        if a == "--update":
            update = True
        elif a == "--builddir":
            builddir = next(args, None)
            if builddir is None:
                print(__doc__, file=sys.stderr)
                return 2
        elif a == "--srcdir":
            srcdir = next(args, None)
            if srcdir is None:
                print(__doc__, file=sys.stderr)
                return 2
        elif a.startswith("-"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            files.append(a)
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    ok = True
    for path in files:
        try:
            ok = check_file(path, builddir, srcdir, update) and ok
        except (ValueError, OSError) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
