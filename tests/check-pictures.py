# SPDX-License-Identifier: MIT
"""check-pictures.py - the pictures the library draws, read back from a
real browser's screenshot and compared with what the run did.

Usage: python3 tests/check-pictures.py BROWSER BUILDDIR SRCDIR

BROWSER is a Chromium (Debian's chromium), run headless.  The SVG pictures
are laid out on one HTML sheet, each at a known place: a script in the page
reads each file and parses it with the browser's XML parser (a file that is
not well-formed XML shows as a parse error, not as a picture), then the
sheet is rendered once with `--screenshot` and its DOM dumped once with
`--dump-dom` (a Chromium start costs about 2 s here, so one per picture
made this test the longest of the suite).  The timeline, an HTML page of
its own, is rendered by itself.  The PNGs are read here with zlib alone.
A screenshot is reduced to bands: scanning every pixel row left to right,
the colours of the known palettes it crosses, each run of one colour
counted once (text and anti-aliased edges match no palette colour and are
skipped); consecutive pixel rows with the same colours form one band.
Then:

- sharding: examples/07_visualize draws each array as text and as SVG;
  the bands of each SVG must be the text grid's rows, each cell's devices
  in their colours (device d in colour d % 8), left to right.
- collectives: examples/19_collective_pictures writes a BEFORE/AFTER SVG
  per collective on the mesh i=4; each must show two bands d0 d1 d2 d3,
  and the DOM the browser built (--dump-dom) must hold, per device, the
  values the run printed before and after.
- timeline: tests/pictures/trace_prog records a trace of two maps
  (psum, all_gather, an asynchronous ppermute per body);
  tools/shmap-trace-timeline draws it; per device row, the bands must be
  the row's device colour followed by each lane's bars in time order in
  their kinds' colours, four device rows, and the lanes must hold what
  the program ran.

Exit status: 0 pass, 1 fail, 99 hard error.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

DEVICE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072",
          "#80b1d3", "#fdb462", "#b3de69", "#fccde5"]
KIND = {"body": "#6baed6", "placement": "#c6dbef", "request": "#9e9ac8",
        "transfer": "#fdd0a2", "psum": "#e6550d", "all_gather": "#31a354",
        "ppermute": "#17becf", "shmap_wait": "#e377c2"}
LANES = ("body", "collective", "request", "transfer")

failures = []


def fail(msg):
    failures.append(msg)
    print("check-pictures: FAIL: " + msg)


def rgb(hexcolour):
    return tuple(int(hexcolour[i:i + 2], 16) for i in (1, 3, 5))


# ---- reading a PNG ---------------------------------------------------------

def read_png(path):
    """Rows of (r, g, b) tuples of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("%s is not a PNG" % path)
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError("%s: PNG of depth %d, colour type %d, interlace %d "
                         "not read here" % (path, depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return rows


def bands(rows, palette):
    """The colour sequences of the pixel rows, each sequence of consecutive
    pixel rows once, empty ones left out.  palette: {rgb: name}."""
    exact = {}
    out = []
    for row in rows:
        seq = []
        for px in row:
            name = exact.get(px)
            if name is None:
                name = ""
                for c, n in palette.items():
                    if all(abs(px[i] - c[i]) <= 2 for i in range(3)):
                        name = n
                        break
                exact[px] = name
            if name and (not seq or seq[-1] != name):
                seq.append(name)
        if seq and (not out or out[-1] != seq):
            out.append(seq)
        elif not seq and out and out[-1] is not None:
            out.append(None)
    return [b for b in out if b is not None]


# ---- the browser -----------------------------------------------------------

def browser_args(browser, tmp):
    args = [browser, "--headless", "--disable-gpu", "--hide-scrollbars",
            "--force-device-scale-factor=1", "--no-first-run",
            "--user-data-dir=" + os.path.join(tmp, "profile")]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to run as root without
    return args


def screenshot(browser, tmp, path, size, extra=()):
    png = path + ".png"
    cmd = browser_args(browser, tmp) + list(extra) + [
        "--window-size=%d,%d" % size, "--screenshot=" + png,
        "file://" + os.path.abspath(path)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=180)
    if r.returncode != 0 or not os.path.exists(png):
        raise RuntimeError("%s failed (%d): %s" % (
            " ".join(cmd), r.returncode, r.stderr.decode()[-2000:]))
    return read_png(png)


def dump_dom(browser, tmp, path, extra=()):
    cmd = browser_args(browser, tmp) + list(extra) + ["--dump-dom",
                                        "file://" + os.path.abspath(path)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=180)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d)" % (" ".join(cmd), r.returncode))
    return r.stdout.decode()


def svg_size(path):
    with open(path) as f:
        head = f.read(300)
    m = re.search(r'width="(\d+)" height="(\d+)"', head)
    if not m:
        raise ValueError("%s: no width and height on its first line" % path)
    return int(m.group(1)), int(m.group(2))


class Sheet:
    """SVG files laid out one below the other on one HTML page, GAP pixels
    apart, rendered and dumped once; then each picture's pixel rows and
    its part of the DOM."""
    GAP = 40

    def __init__(self):
        self.files, self.tops, self.sizes = [], [], []
        self.height, self.width = self.GAP, 0

    def add(self, path):
        w, h = svg_size(path)
        self.files.append(os.path.abspath(path))
        self.tops.append(self.height)
        self.sizes.append((w, h))
        self.height += h + self.GAP
        self.width = max(self.width, w)
        return len(self.files) - 1

    def render(self, browser, tmp):
        page = os.path.join(tmp, "sheet.html")
        boxes = "".join(
            '<div id="pic-%d" style="position:absolute;left:20px;top:%dpx;'
            'width:%dpx;height:%dpx"></div>\n' % (k, top, w, h)
            for k, (top, (w, h)) in enumerate(zip(self.tops, self.sizes)))
        with open(page, "w") as f:
            f.write("""<!DOCTYPE html>
<html><head><meta charset="utf-8">
<style>body { margin: 0; background: white; }</style></head><body>
%s<script>
var files = %s;
for (var k = 0; k < files.length; k++) {
  var box = document.getElementById("pic-" + k);
  var r = new XMLHttpRequest();
  r.open("GET", files[k], false);
  r.overrideMimeType("image/svg+xml");
  r.send();
  var doc = new DOMParser().parseFromString(r.responseText, "image/svg+xml");
  if (doc.getElementsByTagName("parsererror").length)
    box.textContent = "not well-formed XML";
  else
    box.appendChild(document.importNode(doc.documentElement, true));
}
</script></body></html>
""" % (boxes, json.dumps(["file://" + f for f in self.files])))
        # Room below: with a fresh profile Chromium leaves the bottom
        # hundred pixels or so of its window blank.
        rows = screenshot(browser, tmp, page,
                          (self.width + 40, self.height + 200),
                          ["--allow-file-access-from-files"])
        dom = dump_dom(browser, tmp, page, ["--allow-file-access-from-files"])
        parts = re.split(r'<div id="pic-(\d+)"', dom)
        self.doms = {int(parts[i]): parts[i + 1]
                     for i in range(1, len(parts) - 1, 2)}
        self.rows = []
        for k, top in enumerate(self.tops):
            h = self.sizes[k][1]
            self.rows.append(rows[top - self.GAP // 2:top + h + self.GAP // 2])
            if "<svg" not in self.doms.get(k, ""):
                said = re.sub(r"<[^>]*>|^[^>]*>", "", self.doms.get(k, ""))
                fail("%s: the browser shows no picture for it (%s)" % (
                    self.files[k], said.strip()[:200] or "no element"))


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300, **kw)
    if r.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (
            " ".join(cmd), r.returncode, r.stderr.decode()[-2000:]))
    return r.stdout.decode()


DEVICE_PALETTE = {rgb(c): "d%d" % d for d, c in enumerate(DEVICE)}


# ---- the three kinds of pictures -------------------------------------------

def plan_sharding(build, tmp, sheet):
    """Runs examples/07_visualize; its pictures onto the sheet.  Returns
    what check_sharding compares once the sheet is rendered."""
    d = os.path.join(tmp, "sharding")
    os.mkdir(d)
    text = run([os.path.join(build, "examples/07_visualize"), d])
    grids, cur = [], None
    for line in text.splitlines():
        if line.startswith("spec "):
            cur = []
            grids.append((line[5:], cur))
        elif line.startswith("|") and cur is not None:
            cells = [c.split() for c in line.strip("|").split("|")]
            row = []
            for cell in cells:
                for dev in cell:
                    if not row or row[-1] != dev:
                        row.append(dev)
            cur.append(row)
    if len(grids) != 8:
        fail("07_visualize printed %d grids, 8 expected" % len(grids))
    return [(k, spec, want,
             sheet.add(os.path.join(d, "sharding-%d.svg" % k)))
            for k, (spec, want) in enumerate(grids, 1)]


def check_sharding(plan, sheet):
    for k, spec, want, pic in plan:
        got = bands(sheet.rows[pic], DEVICE_PALETTE)
        if got != want:
            fail("sharding-%d.svg (%s): the screenshot shows the rows %s; "
                 "the run's grid is %s" % (k, spec, got, want))
    print("check-pictures: %d sharding pictures match their text grids"
          % len(plan))


def plan_collectives(build, tmp, sheet):
    """Runs examples/19_collective_pictures; its pictures onto the sheet."""
    d = os.path.join(tmp, "collectives")
    text = run([os.path.join(build, "examples/19_collective_pictures"), d])
    states = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"(\w+) over i$", line)
        if m:
            name = m.group(1)
            states[name] = {}
        m = re.match(r"  (before|after) +(.*)$", line)
        if m and name:
            states[name][m.group(1)] = re.findall(r"\[([^]]*)\]", m.group(2))
    want_names = ["psum", "pmean", "pmax", "pmin", "all_gather",
                  "psum_scatter", "all_to_all", "ppermute", "pbroadcast"]
    if list(states) != want_names:
        fail("19_collective_pictures ran %s; expected %s"
             % (list(states), want_names))
    return [(name, st, sheet.add(os.path.join(d, name + ".svg")))
            for name, st in states.items()]


def check_collectives(plan, sheet):
    four = ["d0", "d1", "d2", "d3"]
    for name, st, pic in plan:
        got = bands(sheet.rows[pic], DEVICE_PALETTE)
        if got != [four, four]:
            fail("%s.svg: the screenshot shows %s; BEFORE and AFTER rows of "
                 "d0 d1 d2 d3 expected" % (name, got))
        dom = sheet.doms.get(pic, "")
        texts = [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>",
                                               dom)]
        # Per cell: devices, index range, values; before's 4 then after's 4.
        cells = [texts[i:i + 3] for i in range(len(texts))
                 if re.fullmatch(r"d\d", texts[i])]
        values = [c[2] for c in cells if len(c) == 3]
        want = st.get("before", []) + st.get("after", [])
        if values != want:
            fail("%s.svg: the browser's DOM holds the values %s; the run "
                 "printed %s" % (name, values, want))
    print("check-pictures: %d BEFORE/AFTER pictures show the run's devices "
          "and values" % len(plan))


def lane_of(e):
    cat = e["cat"]
    if cat in ("body", "placement"):
        return "body"
    return cat if cat in ("request", "transfer") else "collective"


def check_timeline(browser, build, src, tmp):
    trace = os.path.join(tmp, "trace.json")
    text = run([os.path.join(build, "tests/pictures/trace_prog"), trace])
    maps = [line.split(": ")[1].split() for line in text.splitlines()]
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    devices = sorted(e["tid"] for e in events
                     if e.get("name") == "thread_name"
                     and " requests " not in e["args"]["name"])
    if len(devices) != 4:
        fail("the trace has %d device tracks; the mesh i=4 has 4"
             % len(devices))
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("name") == "thread_name"}
    palette = dict(DEVICE_PALETTE)
    palette.update({rgb(c): k for k, c in KIND.items()})
    want = []
    for tid in devices:
        dev = "d%d" % (tid - 1)
        mine = [e for e in events if e.get("ph") == "X" and (
            e["tid"] == tid or names.get(e["tid"], "").startswith(
                names[tid] + " requests"))]
        for lane in LANES:
            bars = sorted((e for e in mine if lane_of(e) == lane),
                          key=lambda e: float(e["ts"]))
            kinds = [e["name"] if e["cat"] in ("collective", "call")
                     else e["cat"] for e in bars]
            # The wait for each async ppermute is a bar of its own there.
            ran = [c if c != "ppermute(async)" else "shmap_wait"
                   for m in maps for c in m]
            if lane == "collective" and kinds != [c for c in ran
                                                  if c in ("psum",
                                                           "all_gather",
                                                           "shmap_wait")]:
                fail("device %s: the trace's collectives are %s; the program "
                     "ran %s" % (dev, kinds, maps))
            if lane == "request" and kinds != ["request"] * len(maps):
                fail("device %s: the trace's requests are %s; the program "
                     "started one ppermute per map" % (dev, kinds))
            seq = [dev]
            for k in kinds:
                if seq[-1] != k:
                    seq.append(k)
            want.append(seq)
    html_path = os.path.join(tmp, "timeline.html")
    run([sys.executable, os.path.join(src, "tools/shmap-trace-timeline"),
         trace, html_path])
    got = bands(screenshot(browser, tmp, html_path, (1300, 640)), palette)
    rows = [b for b in got if b[0] in DEVICE_PALETTE.values()]
    # Bands holding only a device's colour are the gaps between its lanes.
    rows = [b for b in rows if len(b) > 1]
    if rows != want:
        fail("timeline: the screenshot's device rows show %s; the trace has "
             "%s" % (rows, want))
    legend = [b for b in got if b[0] not in DEVICE_PALETTE.values()]
    kinds = {e["name"] if e["cat"] in ("collective", "call") else e["cat"]
             for e in events if e.get("ph") == "X"}
    if len(legend) != 1 or sorted(legend[0]) != sorted(kinds):
        fail("timeline: the legend shows %s; the trace's kinds are %s"
             % (legend, sorted(kinds)))
    print("check-pictures: the timeline shows %d devices with %d bars in "
          "the trace's order and colours" % (len(devices),
                                             sum(len(w) - 1 for w in want)))


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 99
    browser, build, src = argv[1:]
    tmp = tempfile.mkdtemp(prefix="check-pictures.")
    try:
        sheet = Sheet()
        shard = plan_sharding(build, tmp, sheet)
        coll = plan_collectives(build, tmp, sheet)
        sheet.render(browser, tmp)
        check_sharding(shard, sheet)
        check_collectives(coll, sheet)
        check_timeline(browser, build, src, tmp)
    except (RuntimeError, ValueError, OSError,
            subprocess.TimeoutExpired) as e:
        print("check-pictures: ERROR: %s" % e)
        return 99
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
