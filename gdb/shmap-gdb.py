# SPDX-License-Identifier: MIT
# shmap-gdb.py - gdb support for libshmap.
#
# Load it in gdb (or in ~/.gdbinit) with
#
#     source /usr/local/share/libshmap/gdb/shmap-gdb.py
#
# (the file is installed in $(datadir)/libshmap/gdb/; from a source tree,
# source gdb/shmap-gdb.py).  It adds:
#
#   shmap meshes            one line per live mesh: axes, devices, whether
#                           a map is running and which body it runs
#   shmap devices           every device of every live mesh: number,
#                           coordinates, the gdb thread running it (or
#                           "parked", for a fiber no thread runs), and what
#                           it does, in the watchdog's words ("running its
#                           body for 1.2 s", "waiting in psum over 'j'");
#                           under mpirun, a device another process runs as
#                           "runs in process 1 (host h)"
#   shmap device DEV [MESH] select device DEV: switch to its thread, or show
#                           a parked fiber from its saved registers (also
#                           spelled shmap thread)
#   shmap release           give back the registers a parked fiber borrowed
#                           (done by itself before the program resumes)
#   shmap schedule          under an exploring schedule (SHMAP_REPLAY,
#                           shmap_explore(3)): the schedule, its step, the
#                           device that runs next and those that could have
#   shmap schedule step [N] run to the schedule's next choice (or N-th next)
#                           and show it
#   $shmap_device()         the device number the selected thread runs, or
#                           -1 (break f.c:42 if $shmap_device() == 3)
#   set shmap values N      how many leading values the printers show
#
# and pretty-printers for shmap_block ("f32[2,8] {40, 41, ...}"),
# struct shmap_array, struct shmap_mesh and struct shmap_ctx.  print/r
# shows the raw structures.
#
# The extension reads the library's internal structures (src/sched/
# runtime.h, src/internal.h) through its debug information: libshmap must
# be built with -g (the default CFLAGS are -g -O2).  It finds the live
# meshes through the global list head shmap__registry.  See
# shmap-debugging(7).

import bisect
import struct
import sys
import time

import gdb
import gdb.printing

# ---- constants mirrored from the library ------------------------------------

# enum shmap_dtype: the library's table (shmap__dtypes in src/dtype.c) is
# read from the inferior; this copy of its first rows only serves when the
# library has no debugging symbols.  Rows: name, size, class.
_CLASS_FLOAT, _CLASS_SIGNED, _CLASS_UNSIGNED, _CLASS_BOOL, _CLASS_COMPLEX = \
    range(5)
_DTYPES_FALLBACK = {0: ("f32", 4, _CLASS_FLOAT), 1: ("f64", 8, _CLASS_FLOAT),
                    2: ("i32", 4, _CLASS_SIGNED), 3: ("i64", 8, _CLASS_SIGNED)}
_MAX_RANK = 8
_MAX_AXES = 8
# enum shmap__state.
_ST_PARKED, _ST_INPUTS, _ST_BODY, _ST_COLL, _ST_DONE, _ST_REPLICA = range(6)
# enum shmap__mode.
_MODE_THREADS, _MODE_FIBERS = 1, 2
# Longest list of meshes or devices walked (a corrupt list ends here).
_MAX_MESHES = 1000
_MAX_DEVICES = 4096
# Devices beyond this count are listed without their body's line (finding it
# switches to every thread and unwinds it).
_MAX_WHERE = 256


class _Settings:
    values = 8  # leading values shown by the printers (None: all)


class ShmapError(Exception):
    pass


# ---- reading the inferior ---------------------------------------------------

def _int(v):
    return int(v)


def _str(v):
    """A char array or char * field as a Python string."""
    try:
        return v.string(errors="replace")
    except gdb.error:
        return "?"


def _registry():
    """The first runtime of the registry (a gdb.Value pointer, maybe 0)."""
    inf = gdb.selected_inferior()
    if inf is None or inf.pid == 0:
        raise ShmapError("the program is not running")
    try:
        head = gdb.parse_and_eval("shmap__registry")
    except gdb.error as e:
        raise ShmapError(
            "cannot read shmap__registry (%s): is the program linked with "
            "libshmap, has the library been loaded (start the program first), "
            "and was libshmap built with -g?" % e)
    if head.type.strip_typedefs().code != gdb.TYPE_CODE_PTR:
        raise ShmapError("shmap__registry has no type: libshmap was built "
                         "without debug information (-g)")
    return head


def _runtimes():
    """Every live runtime, oldest first."""
    rts = []
    seen = set()
    rt = _registry()
    while _int(rt) != 0 and len(rts) < _MAX_MESHES:
        addr = _int(rt)
        if addr in seen:
            break
        seen.add(addr)
        rts.append(rt.dereference())
        rt = rt["next"]
    rts.reverse()
    return rts


def _mesh_axes(mesh):
    """[(name, size), ...] of a struct shmap_mesh value."""
    n = _int(mesh["naxes"])
    if not 0 <= n <= _MAX_AXES:
        raise ShmapError("mesh has %d axes: not a mesh" % n)
    return [(_str(mesh["names"][a]), _int(mesh["sizes"][a])) for a in range(n)]


def _axes_text(axes):
    return ", ".join("%s=%d" % a for a in axes)


def _coords(axes, dev):
    """Coordinates of device `dev` (row-major numbering)."""
    c = []
    for _, size in reversed(axes):
        c.append(dev % size if size > 0 else 0)
        dev = dev // size if size > 0 else 0
    return list(reversed(c))


def _devname(axes, dev):
    """Like the library's messages: "device 3 (i=1, j=1)"."""
    c = _coords(axes, dev)
    return "device %d (%s)" % (dev, ", ".join(
        "%s=%d" % (axes[a][0], c[a]) for a in range(len(axes))))


def _op_text(axes, op):
    """A packed collective as the watchdog words it: "psum over 'j'"."""
    kind = op & 0xFF
    n = min((op >> 8) & 0xF, _MAX_AXES)
    ax = [(op >> (12 + 4 * k)) & 0xF for k in range(n)]
    names = ["'%s'" % (axes[a][0] if a < len(axes) else "?") for a in ax]
    if n == 0:
        over = "()"
    elif n == 1:
        over = names[0]
    else:
        over = "(" + ", ".join(names) + ")"
    return "%s over %s" % (_kind_name(kind), over)


def _kind_name(kind):
    """The name of a collective kind (the kind in a packed op word), read
    from the library's table shmap__kind_names (src/kinds.c), so that a
    new collective needs no change here; "?" for a kind the table does not
    have, as in the library's own messages."""
    try:
        table = gdb.parse_and_eval("shmap__kind_names")
        lo, hi = table.type.range()
        if lo < kind <= hi:
            return table[kind].string()
        return "?"
    except (gdb.error, gdb.MemoryError, RuntimeError):
        # No list to fall back on: without the table's symbol and type the
        # library was built without debug information, and then the
        # extension cannot read the devices whose calls it would name
        # (_registry says so); the number still tells the kind apart.
        return "kind %d" % kind


def _now_ns(since_values):
    """The inferior's uv_hrtime() now (CLOCK_MONOTONIC).  For a core file or
    a remote target the latest state change stands in for "now"; returns
    (now, exact)."""
    inf = gdb.selected_inferior()
    conn = getattr(inf, "connection", None)
    ctype = getattr(conn, "type", "native") if conn is not None else "native"
    if ctype == "native":
        return time.monotonic_ns(), True
    return max([s for s in since_values if s] or [0]), False


def _thread_maps():
    """Threads of the selected inferior by pthread_t handle and by name."""
    by_handle, by_name = {}, {}
    for th in gdb.selected_inferior().threads():
        try:
            h = th.handle()
            if h:
                by_handle[int.from_bytes(bytes(h), sys.byteorder)] = th
        except (gdb.error, RuntimeError, AttributeError, TypeError,
                ValueError):
            pass
        if th.name:
            by_name.setdefault(th.name, []).append(th)
    return by_handle, by_name


def _find_thread(dev, maps):
    """The gdb thread of a shmap__dev value, or None."""
    by_handle, by_name = maps
    try:
        th = by_handle.get(_int(dev["thread"]))
        if th is not None and th.is_valid():
            return th
    except gdb.error:
        pass
    # The thread's name, unless several meshes use it.
    try:
        cands = by_name.get(_str(dev["name"]), [])
    except gdb.error:
        cands = []
    return cands[0] if len(cands) == 1 else None


def _map_running(rt):
    try:
        return (_int(rt["started"]) != 0 and _int(rt["devs"]) != 0 and
                _int(rt["done"]) < _int(rt["ndev"]))
    except gdb.error:
        return False


def _placement(rt):
    """(this process's rank, owner of each device) of a mesh whose devices
    run in several processes (under mpirun: the mesh's `place`, see
    src/proc/proc.h), or None when this process runs them all."""
    try:
        p = rt["mesh"]["place"]
        if _int(p) == 0:
            return None
        p = p.dereference()
        if _int(p["nproc"]) <= 1 or _int(p["owner"]) == 0:
            return None
        n = min(_int(rt["mesh"]["ndev"]), _MAX_DEVICES)
        return _int(p["self"]), [_int(p["owner"][d]) for d in range(n)]
    except gdb.error:
        return None


def _proc_host(rank):
    """The host name of process `rank` of the job (the library's table in
    src/proc/proc.c), or None."""
    try:
        objfile, _ = _library_location()
        cands = []
        if hasattr(gdb, "lookup_static_symbols"):
            for name in ("hosts", "self"):
                cands.append([s for s in gdb.lookup_static_symbols(name)
                              if s.symtab is not None
                              and s.symtab.filename.endswith("proc.c")
                              and (objfile is None
                                   or s.symtab.objfile == objfile)])
        if len(cands) == 2 and len(cands[0]) == 1 and len(cands[1]) == 1:
            hosts, me = cands[0][0].value(), cands[1][0].value()
        else:
            hosts = gdb.parse_and_eval("'proc.c'::hosts")
            me = gdb.parse_and_eval("'proc.c'::self")
        if _int(hosts) == 0 or not 0 <= rank < _int(me["size"]):
            return None
        return _str(hosts[rank]) or None
    except (gdb.error, RuntimeError, AttributeError, ValueError):
        return None


def _elsewhere(place, d):
    """For a device another process runs: "runs in process 1 (host h)";
    None for a device of this process."""
    if place is None or d >= len(place[1]) or place[1][d] == place[0]:
        return None
    r = place[1][d]
    host = _proc_host(r)
    return "runs in process %d%s" % (r, " (host %s)" % host if host else "")


def _body_function(rt):
    """The symbol of the running map's body, or None."""
    try:
        if not _map_running(rt) or _int(rt["job"]) == 0:
            return None
        pc = _int(rt["job"]["body"])
        block = gdb.block_for_pc(pc)
        while block is not None and block.function is None:
            block = block.superblock
        return block.function if block is not None else None
    except (gdb.error, RuntimeError):
        return None


def _where_text(sal):
    if sal is None or sal.symtab is None:
        return None
    return "%s:%d" % (sal.symtab.filename.rsplit("/", 1)[-1], sal.line)


def _library_location():
    """(objfile, source directory) of libshmap, from shmap__registry's
    symbol: frames in either belong to the library."""
    try:
        sym = gdb.lookup_global_symbol("shmap__registry")
        if sym is None or sym.symtab is None:
            return None, None
        # .../src/debug/debug.c: the library's sources are under .../src.
        root = sym.symtab.fullname().rsplit("/", 2)[0]
        if not root.endswith("/src"):
            root = None
        return sym.symtab.objfile, root
    except (gdb.error, RuntimeError):
        return None, None


def _user_frame(th, body, lib):
    """Where the device's body is on thread th: (frame number, function
    name, "file:line") of the newest frame of the program's own code
    called from the body (the body's frame itself at the least)."""
    if body is None or th is None:
        return None
    libobj, libroot = lib
    bodyobj = body.symtab.objfile if body.symtab is not None else None
    th.switch()
    f = gdb.newest_frame()
    level = 0
    best = None
    while f is not None and level < 10000:
        fn = f.function()
        if fn is not None and fn.symtab is not None:
            in_lib = ((libroot is not None and
                       fn.symtab.fullname().startswith(libroot + "/")) or
                      (libobj is not None and libobj != bodyobj and
                       fn.symtab.objfile == libobj))
            if (best is None and not in_lib
                    and (bodyobj is None or fn.symtab.objfile == bodyobj)):
                best = (level, fn.name, _where_text(f.find_sal()))
            if fn == body or fn.name == body.name:
                return best
        f = f.older()
        level += 1
    return None


def _nest_text(axes, dev):
    """The maps a device is in, as the watchdog words them:
    " [map over 'data' > nested over 'model']", or "" for a map over every
    axis (older libraries have no such field)."""
    try:
        nest = _int(dev["dbg"]["nest"])
    except gdb.error:
        return ""
    levels = nest >> 56
    everything = (1 << len(axes)) - 1
    if levels == 0 or (levels == 1 and (nest & 0xFF) == everything):
        return ""
    parts = []
    for lvl in range(min(levels, 7)):
        mask = (nest >> (8 * lvl)) & 0xFF
        names = ", ".join("'%s'" % axes[a][0] for a in range(len(axes))
                          if mask & (1 << a)) or "none"
        parts.append("%s over %s" % ("nested" if lvl else "map", names))
    return " [" + " > ".join(parts) + "]"


def _state_text(rt, dev, now):
    """What the device does, worded like the watchdog, and whether the
    duration is in the past ("... ago")."""
    axes = _mesh_axes(rt["mesh"].dereference())
    state = _int(dev["dbg"]["state"])
    since = _int(dev["dbg"]["since"])
    secs = (now - since) / 1e9 if since and now > since else 0.0
    if state == _ST_INPUTS:
        what = "building its input blocks"
    elif state == _ST_BODY:
        what = "running its body"
    elif state == _ST_COLL:
        what = "waiting in %s (call #%d)" % (_op_text(axes, _int(dev["dbg"]["op"])),
                                            _int(dev["coll"]["arrive"]))
    elif state == _ST_DONE:
        what = "returned from its body"
    elif state == _ST_REPLICA:
        # A map over some axes: the device holds the values of the body
        # that runs on its host (dbg.op), as the watchdog says.
        what = "replica of %s, waiting for its body" % _devname(
            axes, _int(dev["dbg"]["op"]))
    elif state == _ST_PARKED:
        if not _map_running(rt):
            when = ("for %.1f s" % secs) if since else ""
            return "parked between maps", when
        if not _int(dev["coll"]["finished"]):
            # Its time of state is the end of the previous map, not when it
            # began to wait for this one (which nothing records).
            return "not started yet", ""
        what = "returned from its body"
    else:
        what = "in unknown state %d" % state
    what += _nest_text(axes, dev)
    if not since:
        return what, ""
    if what.startswith("returned"):
        return what, "%.1f s ago" % secs
    return what, "for %.1f s" % secs


# Request states (coll/async.c).
_REQ_STATES = {1: "queued behind earlier requests",
               2: "in transfer (waiting for its group or data)",
               3: "done, not yet waited for"}


def _requests_text(rt, ndev, now):
    """One line per open asynchronous request (shmap_*_start) of each
    device, as the watchdog words them."""
    try:
        if not _int(rt["async"]):
            return []
        # A pointer per device, NULL while it never started a request.
        t = gdb.lookup_type("struct shmap__async_dev").pointer().pointer()
        tab = rt["async"].cast(t)
        axes = _mesh_axes(rt["mesh"].dereference())
        lines = []
        for d in range(ndev):
            if not _int(tab[d]):
                continue
            reqs = tab[d].dereference()["req"]
            lo, hi = reqs.type.range()
            for s in range(lo, hi + 1):
                r = reqs[s]
                st = _int(r["state"])
                if st == 0:
                    continue
                t0 = _int(r["t_start"])
                secs = (now - t0) / 1e9 if t0 and now > t0 else 0.0
                lines.append("    %s request %d: %s (call #%d, %s), "
                             "started %.1f s ago: %s"
                             % (_devname(axes, d), s, _str(r["op"]),
                                _int(r["k"]), _str(r["api"]), secs,
                                _REQ_STATES.get(st, "state %d" % st)))
        return lines
    except gdb.error:
        return []


def _mesh_summary(rt):
    mesh = rt["mesh"].dereference()
    axes = _mesh_axes(mesh)
    ndev = _int(rt["ndev"])
    text = "mesh #%d %s (%d device%s)" % (_int(rt["id"]), _axes_text(axes),
                                         ndev, "" if ndev == 1 else "s")
    if _int(rt["devs"]) == 0 or not _int(rt["started"]):
        status = "no map yet (device threads not started)"
    elif _map_running(rt):
        devs = rt["devs"]
        place = _placement(rt)
        mine = [d for d in range(ndev)
                if place is None or _elsewhere(place, d) is None]
        finished = sum(1 for d in mine if _int(devs[d]["coll"]["finished"]))
        status = "a map is running (%d of %d bodies%s returned)" % (
            finished, len(mine), " in this process" if place else "")
        body = _body_function(rt)
        if body is not None:
            loc = ""
            if body.symtab is not None:
                loc = " at %s:%d" % (body.symtab.filename.rsplit("/", 1)[-1],
                                     body.line)
            status += ", body %s()%s" % (body.name, loc)
        if _int(rt["abort"]):
            status += "; a device failed: %s" % _str(rt["fail_msg"])
    else:
        status = "idle between maps"
    return "%s: %s  [(shmap_mesh *) 0x%x]" % (text, status, _int(rt["mesh"]))


# ---- fibers -----------------------------------------------------------------
#
# In fiber mode a device runs on whichever worker thread (or, for worker 0,
# the map's caller) switched to it, and a device that waits is parked: its
# registers are saved on its own stack, at struct shmap__fiber's `sp`.  The
# x86-64 switch (src/sched/fiber.c) pushes rbp, rbx, r12, r13, r14, r15
# below the return address and then 8 bytes of MXCSR and x87 control word:
#
#     sp+0 csr  sp+8 r15  sp+16 r14  sp+24 r13  sp+32 r12  sp+40 rbx
#     sp+48 rbp  sp+56 return address (in shmap__fiber_switch, or in its
#                      caller when the compiler turned the call into a jump)
#
# A running device is found by its stack: the thread whose stack pointer is
# inside the device's fiber stack runs it.  A parked device is shown by
# loading its saved registers into a stopped thread (its worker's) for as
# long as it stays selected; the thread's own registers are put back before
# the program resumes, is detached or killed, and before gdb exits.

_SAVED_SLOTS = (("r15", 8), ("r14", 16), ("r13", 24), ("r12", 32),
                ("rbx", 40), ("rbp", 48))
_VIEW_REGS = ("rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15")


def _exploring(rt):
    """Whether a map of the runtime runs under the exploring mode now (its
    devices are fibers that the map's caller runs one at a time)."""
    try:
        return (_int(rt["devs"]) != 0 and
                _int(rt["devs"][0]["sched"]["xfiber"]) != 0)
    except gdb.error:
        return False


def _is_fibers(rt):
    try:
        return (_int(rt["devs"]) != 0 and _int(rt["started"]) != 0 and
                (_int(rt["mode"]) == _MODE_FIBERS or _exploring(rt)))
    except gdb.error:
        return False


def _dev_fiber(dev):
    """A shmap__dev value's fiber: the exploring mode's while a map runs
    under it, else fiber mode's."""
    try:
        x = dev["sched"]["xfiber"]
        if _int(x) != 0:
            return x.dereference()
    except gdb.error:
        pass
    return dev["sched"]["fiber"]


def _fiber_range(dev):
    """[lo, hi) of a shmap__dev value's fiber stack, or None."""
    f = _dev_fiber(dev)
    lo = _int(f["stack"])
    size = _int(f["stack_size"])
    if lo == 0 or size <= 0 or _int(f["map"]) == 0:
        return None
    return lo, lo + size


def _arch_ok():
    try:
        name = gdb.selected_inferior().architecture().name()
    except (gdb.error, AttributeError):
        return False
    return "x86-64" in name


class _View:
    """The parked device whose saved registers a thread holds, if any."""
    thread = None  # gdb.InferiorThread
    regs = None    # the thread's own registers
    rt_id = None
    dev = None


def _read_regs():
    """The selected thread's innermost registers we may replace."""
    f = gdb.newest_frame()
    return {r: int(f.read_register(r)) & 0xFFFFFFFFFFFFFFFF
            for r in _VIEW_REGS}


def _write_regs(regs):
    # In frame 0: in an outer frame, gdb would write the registers that
    # frame's callees saved, on the stack.
    gdb.newest_frame().select()
    for r in _VIEW_REGS:
        gdb.execute("set $%s = 0x%x" % (r, regs[r]), to_string=True)


def _real_sp(th):
    """A thread's own stack pointer (the one it resumes with)."""
    if _View.thread is not None and _View.thread.ptid == th.ptid:
        return _View.regs["rsp"]
    th.switch()
    return int(gdb.newest_frame().read_register("rsp")) & 0xFFFFFFFFFFFFFFFF


def _release_view():
    """Give the thread holding a parked device's registers its own back."""
    th, regs = _View.thread, _View.regs
    _View.thread = _View.regs = _View.rt_id = _View.dev = None
    if th is None or not th.is_valid():
        return
    sel = gdb.selected_thread()
    try:
        th.switch()
        _write_regs(regs)
    finally:
        if sel is not None and sel.is_valid():
            sel.switch()


def _load_context(th, dev):
    """Load parked device `dev`'s saved registers into thread th (selected
    afterwards).  The thread's own registers are kept in _View."""
    sp = _int(_dev_fiber(dev)["sp"])
    if sp == 0:
        raise ShmapError("device %d has no saved context" % _int(dev["id"]))
    _define_hooks()
    inf = gdb.selected_inferior()
    words = inf.read_memory(sp, 64).tobytes()
    word = lambda off: int.from_bytes(words[off:off + 8], "little")
    th.switch()
    own = _read_regs()
    regs = dict(own)
    for r, off in _SAVED_SLOTS:
        regs[r] = word(off)
    regs["rip"] = word(56)
    regs["rsp"] = sp + 64
    try:
        _write_regs(regs)
    except gdb.error as e:
        try:
            _write_regs(own)
        except gdb.error:
            pass
        raise ShmapError("cannot load the device's saved registers into "
                         "thread %d (%s); a core file's registers cannot "
                         "be changed" % (th.num, e))
    _View.thread, _View.regs = th, own


class _Cache:
    """Stack ranges and thread handles of every device, rebuilt when the
    set of live runtimes changes (new runtimes get new numbers)."""
    key = None
    ranges = []   # sorted (lo, hi, runtime number, device)
    handles = {}  # pthread_t -> device (thread mode)


def _device_index():
    sig = []
    rts = _runtimes()
    for rt in rts:
        sig.append((_int(rt["id"]), _int(rt["devs"]), _int(rt["started"]),
                    _int(rt["mode"]), _exploring(rt)))
    sig = tuple(sig)
    if sig == _Cache.key:
        return
    ranges, handles = [], {}
    for rt in rts:
        if not _int(rt["devs"]) or not _int(rt["started"]):
            continue
        n = min(_int(rt["ndev"]), _MAX_DEVICES)
        fib = _is_fibers(rt)
        for d in range(n):
            dev = rt["devs"][d]
            if fib:
                r = _fiber_range(dev)
                if r is not None:
                    ranges.append((r[0], r[1], _int(rt["id"]), d))
            else:
                h = _int(dev["thread"])
                if h:
                    handles[h] = d
    ranges.sort()
    _Cache.key, _Cache.ranges, _Cache.handles = sig, ranges, handles


def _device_at_sp(sp):
    """(runtime number, device) whose fiber stack holds sp, or None."""
    _device_index()
    i = bisect.bisect_right(_Cache.ranges, (sp, float("inf"))) - 1
    if i >= 0:
        lo, hi, rid, d = _Cache.ranges[i]
        if lo <= sp < hi:
            return rid, d
    return None


def _fiber_threads(rt):
    """{device: gdb thread} of the devices of a fiber-mode runtime that a
    thread is running now."""
    out = {}
    rid = _int(rt["id"])
    for th in gdb.selected_inferior().threads():
        try:
            hit = _device_at_sp(_real_sp(th))
        except gdb.error:
            continue
        if hit is not None and hit[0] == rid:
            out[hit[1]] = th
    return out


def _worker_thread(rt, dev, maps):
    """The gdb thread of a fiber device's worker (where a parked device is
    shown), or None."""
    try:
        w = dev["sched"]["worker"]
        # Exploring, the map's caller runs the devices: no worker.
        if _int(w) == 0 or _int(dev["sched"]["xfiber"]) != 0:
            return None
        return _find_thread(w.dereference(), maps)
    except gdb.error:
        return None


# ---- commands ---------------------------------------------------------------

class ShmapPrefix(gdb.Command):
    """libshmap: inspect meshes and devices.

shmap meshes            -- one line per live mesh
shmap devices [MESH]    -- every device of every live mesh (or of mesh #MESH)
shmap device DEV [MESH] -- select device DEV (also: shmap thread DEV)
shmap release           -- give back the registers a parked fiber borrowed
shmap schedule          -- an exploring schedule's next choice
shmap schedule step [N] -- run to its next choice (or N-th next)
See also: set shmap values, $shmap_device(), and shmap-debugging(7)."""

    def __init__(self):
        super().__init__("shmap", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)


def _run(fn):
    try:
        fn()
    except ShmapError as e:
        raise gdb.GdbError("shmap: %s" % e)
    except gdb.MemoryError as e:
        raise gdb.GdbError("shmap: cannot read the library's state: %s" % e)


def _parse_ints(arg, most, usage):
    words = gdb.string_to_argv(arg)
    if len(words) > most:
        raise ShmapError(usage)
    try:
        return [int(w.lstrip("#"), 0) for w in words]
    except ValueError:
        raise ShmapError(usage)


class ShmapMeshes(gdb.Command):
    """List the live meshes of libshmap: one line per mesh.

Each line shows the mesh's number (the trace's process number), its axes,
its number of devices, whether a map is running (how many bodies returned,
which body function) and the mesh's address."""

    def __init__(self):
        super().__init__("shmap meshes", gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        def go():
            rts = _runtimes()
            if not rts:
                gdb.write("No live mesh.\n")
                return
            for rt in rts:
                gdb.write(_mesh_summary(rt) + "\n")
        _run(go)


class ShmapDevices(gdb.Command):
    """List every device of every live libshmap mesh: shmap devices [MESH]

For each device: its number and coordinates, the gdb thread that runs it
(with the thread's name, d<number>(<coordinates>)), what it does in the
watchdog's words and since when, and for a device inside a map body the
body's frame and line.  '*' marks the selected thread.  With MESH, only
the mesh of that number (see "shmap meshes").  Under mpirun, a device that
another process runs is shown as "runs in process P (host H)".

Times are measured from the device's last change of state to now, so they
include the time the program has been stopped in gdb."""

    def __init__(self):
        super().__init__("shmap devices", gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        _run(lambda: self._list(arg))

    def _list(self, arg):
        want = _parse_ints(arg, 1, "usage: shmap devices [MESH]")
        rts = _runtimes()
        if want:
            rts = [rt for rt in rts if _int(rt["id"]) == want[0]]
            if not rts:
                raise ShmapError("no live mesh #%d (see \"shmap meshes\")"
                                 % want[0])
        if not rts:
            gdb.write("No live mesh.\n")
            return
        sel_thread = gdb.selected_thread()
        try:
            sel_frame = gdb.selected_frame()
            sel_level = sel_frame.level()
        except gdb.error:
            sel_frame, sel_level = None, 0
        # The selected device: the parked one shown, or the one the
        # selected thread runs.
        view = None
        if _View.thread is not None and sel_thread is not None:
            view = (_View.thread, _View.rt_id, _View.dev)
        sel_dev = None
        try:
            if view is not None and view[0].ptid == sel_thread.ptid:
                sel_dev = view[1:]
            elif sel_thread is not None:
                sel_dev = _device_at_sp(_real_sp(sel_thread))
        except gdb.error:
            pass
        maps = _thread_maps()
        since_all = []
        for rt in rts:
            if _int(rt["devs"]):
                n = min(_int(rt["ndev"]), _MAX_DEVICES)
                since_all += [_int(rt["devs"][d]["dbg"]["since"]) for d in range(n)]
        now, exact = _now_ns(since_all)
        # Showing where parked devices are borrows threads: give back the
        # one that shows a device, and show it again afterwards.
        _release_view()
        try:
            for rt in rts:
                self._mesh(rt, maps, now, sel_thread, sel_dev)
        finally:
            if view is not None and view[0].is_valid():
                for rt in _runtimes():
                    if _int(rt["id"]) == view[1]:
                        _load_context(view[0], rt["devs"][view[2]])
                        _View.rt_id, _View.dev = view[1], view[2]
            if sel_thread is not None and sel_thread.is_valid():
                sel_thread.switch()
                if view is not None:
                    try:
                        f = gdb.newest_frame()
                        for _ in range(sel_level):
                            f = f.older() if f is not None else None
                        if f is not None:
                            f.select()
                    except gdb.error:
                        pass
                elif sel_frame is not None and sel_frame.is_valid():
                    sel_frame.select()
        if not exact:
            gdb.write("(not a live process: times are counted up to the "
                      "last change of state)\n")

    def _mesh(self, rt, maps, now, sel_thread, sel_dev):
        gdb.write(_mesh_summary(rt) + "\n")
        mesh = rt["mesh"].dereference()
        axes = _mesh_axes(mesh)
        ndev = min(_int(rt["ndev"]), _MAX_DEVICES)
        place = _placement(rt)
        if _int(rt["devs"]) == 0:
            for d in range(ndev):
                gdb.write("  %s: %s\n" % (_devname(axes, d),
                                          _elsewhere(place, d) or
                                          "not started yet (no thread)"))
            return
        body = _body_function(rt)
        lib = _library_location()
        fib = _is_fibers(rt)
        running = _fiber_threads(rt) if fib else {}
        rid = _int(rt["id"])
        rows = []
        for d in range(ndev):
            elsewhere = _elsewhere(place, d)
            if elsewhere is not None:
                # Another process runs it: nothing of it here to show.
                rows.append((" ", _devname(axes, d) + ":", "", "", elsewhere,
                             ""))
                continue
            dev = rt["devs"][d]
            what, when = _state_text(rt, dev, now)
            state = _int(dev["dbg"]["state"])
            want_where = (body is not None and ndev <= _MAX_WHERE
                          and state in (_ST_BODY, _ST_COLL))
            uf = None
            if fib:
                th = running.get(d)
                wth = _worker_thread(rt, dev, maps)
                if th is not None:
                    tcol, tname = "thread %d" % th.num, th.name or ""
                else:
                    tcol = "parked"
                    tname = _str(dev["sched"]["worker"]["name"]) if (
                        _int(dev["sched"]["worker"]) and
                        not _exploring(rt)) else ""
                mark = "*" if sel_dev == (rid, d) else " "
                if want_where and th is not None:
                    uf = self._where(th, body, lib)
                elif want_where and _arch_ok():
                    borrow = wth or sel_thread
                    if borrow is not None:
                        try:
                            _load_context(borrow, dev)
                            uf = self._where(borrow, body, lib)
                        except (ShmapError, gdb.error):
                            uf = None
                        finally:
                            _release_view()
            else:
                th = _find_thread(dev, maps)
                tname = _str(dev["name"])
                tcol = "thread %d" % th.num if th is not None else "no thread"
                mark = "*" if (th is not None and sel_thread is not None
                               and th.ptid == sel_thread.ptid) else " "
                if want_where and th is not None:
                    uf = self._where(th, body, lib)
            where = ""
            if uf is not None:
                where = "%s() at %s (frame %d)" % (uf[1], uf[2] or "?", uf[0])
            rows.append((mark, _devname(axes, d) + ":", tcol,
                         '"%s"' % tname if tname else "",
                         (what + " " + when).strip(), where))
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        for r in rows:
            cols = [r[k].ljust(widths[k]) for k in range(len(r) - 1)] + [r[-1]]
            gdb.write((cols[0] + " " + "  ".join(cols[1:])).rstrip() + "\n")
        for line in _requests_text(rt, ndev, now):
            gdb.write(line + "\n")

    @staticmethod
    def _where(th, body, lib):
        try:
            return _user_frame(th, body, lib)
        except gdb.error:
            return None


class ShmapDevice(gdb.Command):
    """Select a libshmap device: shmap device DEV [MESH] (or shmap thread)

DEV is the device number (as in "shmap devices"); MESH the mesh number,
needed only when several meshes are live (the newest is the default).

With a thread per device, or for a fiber that a thread is running, this
switches to that thread.  A parked fiber (a device waiting in fiber mode)
has no thread: its registers, saved on its own stack when it stopped, are
loaded into its worker's thread, so that bt, frame, info locals and print
show the device.  That thread gets its own registers back when another
device is selected, with "shmap release", and before the program resumes
(continue, next, step, finish, ...), is killed or detached, and before gdb
exits.  A parked device cannot be stepped (it runs only when its worker
switches back to it): break at a line with "if $shmap_device() == DEV"
and continue instead."""

    def __init__(self, name):
        super().__init__(name, gdb.COMMAND_RUNNING, gdb.COMPLETE_NONE)
        self._name = name

    def invoke(self, arg, from_tty):
        _run(lambda: self._select(arg, from_tty))

    def _select(self, arg, from_tty):
        usage = "usage: %s DEV [MESH]" % self._name
        nums = _parse_ints(arg, 2, usage)
        if not nums:
            raise ShmapError(usage)
        rts = _runtimes()
        if len(nums) > 1:
            rts = [rt for rt in rts if _int(rt["id"]) == nums[1]]
        rts = [rt for rt in rts if _int(rt["devs"]) and _int(rt["started"])]
        if not rts:
            raise ShmapError("no live mesh with running devices%s (devices "
                             "start at a mesh's first map)" % (
                                 " numbered #%d" % nums[1]
                                 if len(nums) > 1 else ""))
        rt = rts[-1]
        d = nums[0]
        if not 0 <= d < _int(rt["ndev"]):
            raise ShmapError("mesh #%d has no device %d" % (_int(rt["id"]),
                                                            d))
        elsewhere = _elsewhere(_placement(rt), d)
        if elsewhere is not None:
            raise ShmapError("device %d %s: attach gdb to that process to "
                             "see it" % (d, elsewhere))
        dev = rt["devs"][d]
        _release_view()
        if not _is_fibers(rt):
            th = _find_thread(dev, _thread_maps())
            if th is None:
                raise ShmapError("cannot find the thread of device %d" % d)
            gdb.execute("thread %d" % th.num, from_tty)
            return
        sel = gdb.selected_thread()
        running = _fiber_threads(rt)
        if d in running:
            gdb.execute("thread %d" % running[d].num, from_tty)
            return
        if not _arch_ok():
            if sel is not None:
                sel.switch()
            raise ShmapError(
                "device %d is a parked fiber, and reading a fiber's saved "
                "registers is implemented for x86-64 only; run the program "
                "with SHMAP_SCHED=threads to give each device a thread" % d)
        th = _worker_thread(rt, dev, _thread_maps()) or sel
        if th is None:
            raise ShmapError("no thread to show device %d on" % d)
        axes = _mesh_axes(rt["mesh"].dereference())
        try:
            _load_context(th, dev)
        except (ShmapError, gdb.error):
            if sel is not None and sel.is_valid():
                sel.switch()
            raise
        _View.rt_id, _View.dev = _int(rt["id"]), d
        gdb.write("[%s is a parked fiber: thread %d \"%s\" shows its saved "
                  "registers until the program resumes]\n"
                  % (_devname(axes, d)[0].upper() + _devname(axes, d)[1:],
                     th.num, th.name or ""))
        gdb.execute("frame", from_tty)


class ShmapRelease(gdb.Command):
    """Give back the registers of the thread that shows a parked device.

"shmap device DEV" shows a parked fiber by loading its saved registers into
a thread; this puts the thread's own registers back.  It happens by itself
before the program resumes, is killed or detached, and before gdb exits."""

    def __init__(self):
        super().__init__("shmap release", gdb.COMMAND_RUNNING,
                         gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        _run(_release_view)


def _thread_key(th):
    """The pthread_t of gdb thread th (the selected one), or None.  A remote
    target (gdbserver) tells a new thread's handle and name only with its
    next thread list, after a breakpoint condition has been tested in it;
    on x86-64 glibc a pthread_t is the thread's fs_base, which is known."""
    try:
        h = th.handle()
        if h:
            return int.from_bytes(bytes(h), sys.byteorder)
    except (gdb.error, RuntimeError, AttributeError, TypeError, ValueError):
        pass
    try:
        arch = gdb.selected_frame().architecture().name()
        if "x86-64" in arch:
            fs = int(gdb.selected_frame().read_register("fs_base"))
            return fs & 0xFFFFFFFFFFFFFFFF or None
    except (gdb.error, RuntimeError, AttributeError, TypeError, ValueError):
        pass
    return None


class ShmapDeviceFunction(gdb.Function):
    """$shmap_device() - the libshmap device number of the selected thread
(in fiber mode: of the device that thread runs, or of the parked device
"shmap device" shows), or -1 when it runs no device.  For a breakpoint in
one device without calling into the program:
    break body.c:42 if $shmap_device() == 3"""

    def __init__(self):
        super().__init__("shmap_device")

    def invoke(self):
        th = gdb.selected_thread()
        if th is None:
            return -1
        try:
            _device_index()
            if _Cache.ranges:
                sp = int(gdb.selected_frame().read_register("sp"))
                hit = _device_at_sp(sp & 0xFFFFFFFFFFFFFFFF)
                if hit is not None:
                    return hit[1]
            if _Cache.handles:
                key = _thread_key(th)
                if key in _Cache.handles:
                    return _Cache.handles[key]
            # Without a usable handle, the thread's name.
            if th.name:
                for rt in _runtimes():
                    if not _int(rt["devs"]) or _is_fibers(rt):
                        continue
                    for d in range(min(_int(rt["ndev"]), _MAX_DEVICES)):
                        if _str(rt["devs"][d]["name"]) == th.name:
                            return d
        except (ShmapError, gdb.error, RuntimeError, AttributeError,
                TypeError, ValueError):
            pass
        return -1


# Commands that let the program run, or end the session with it: before
# each, a thread showing a parked device gets its own registers back.
# (Not "call" and "print": a function called while a parked device is
# shown runs on that device's stack, below its saved frames, and gdb puts
# the shown registers back when it returns; the other threads run
# meanwhile, so the device may have moved on: "shmap device" shows it
# afresh.)
_RESUMING = ("continue", "next", "step", "stepi", "nexti", "finish", "until",
             "advance", "jump", "signal", "queue-signal", "kill", "detach",
             "disconnect", "run", "start", "starti")


class _Hooks:
    defined = False


def _define_hooks():
    """Define the hooks that release a borrowed view, once, when a device's
    registers are first borrowed.  Not when the file is loaded: gdb
    auto-loads it while the "run" that loaded the library is still in
    progress, and a "define" executed then leaves gdb believing the
    program still runs, so a batch "run" then "bt" never stops at a
    crash."""
    if _Hooks.defined:
        return
    _Hooks.defined = True
    for cmd in _RESUMING:
        try:
            shown = gdb.execute("show user hook-%s" % cmd, to_string=True)
        except gdb.error:
            shown = ""
        if shown.strip() and "shmap release" not in shown:
            continue  # the user's own hook stays
        gdb.execute("define hook-%s\nshmap release\nend" % cmd,
                    to_string=True)


def _install_hooks():
    """Connect the event handlers (through the Python API, which is safe
    while the program runs; the command hooks come later, see
    _define_hooks)."""
    def exiting(_event):
        try:
            _release_view()
        except (gdb.error, ShmapError):
            pass

    def exited(_event):
        _View.thread = _View.regs = _View.rt_id = _View.dev = None
        _Cache.key = None

    # Sourcing the file twice must not connect the handlers twice.
    old = getattr(gdb, "_shmap_event_handlers", None)
    if old is not None:
        if hasattr(gdb.events, "gdb_exiting"):
            gdb.events.gdb_exiting.disconnect(old[0])
        gdb.events.exited.disconnect(old[1])
    if hasattr(gdb.events, "gdb_exiting"):
        gdb.events.gdb_exiting.connect(exiting)
    gdb.events.exited.connect(exited)
    gdb._shmap_event_handlers = (exiting, exited)


class ShmapSetPrefix(gdb.Command):
    """Settings of the libshmap extension."""

    def __init__(self, name):
        super().__init__(name, gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)


class ShmapValues(gdb.Parameter):
    """How many leading values the shmap printers show (unlimited: all)."""

    set_doc = "Set how many leading values the shmap printers show."
    show_doc = "Show how many leading values the shmap printers show."

    def __init__(self):
        super().__init__("shmap values", gdb.COMMAND_DATA,
                         gdb.PARAM_UINTEGER)
        self.value = _Settings.values

    def get_set_string(self):
        _Settings.values = self.value if self.value else None
        return ""

    def get_show_string(self, svalue):
        return "The shmap printers show %s leading values." % svalue


# ---- pretty-printers --------------------------------------------------------

def _dtypes():
    """{dtype: (name, size, class)} from the inferior's table."""
    try:
        table = gdb.parse_and_eval("shmap__dtypes")
        lo, hi = table.type.range()
        rows = {}
        for i in range(lo, hi + 1):
            row = table[i]
            rows[i] = (row["name"].string(), _int(row["size"]),
                       _int(row["cls"]))
        return rows
    except (gdb.error, gdb.MemoryError, RuntimeError):
        return _DTYPES_FALLBACK


def _shape_text(dtype, rank, shape):
    name = _dtypes().get(dtype, ("dtype%d" % dtype,))[0]
    return "%s[%s]" % (name, ",".join(str(s) for s in shape[:rank]))


def _g(v, digits):
    """A float as the library's formatter prints it (%.9g or %.17g)."""
    return "%.*g" % (digits, v)


def _element_text(raw, name, size, cls):
    """One element's bytes, printed as the library prints it."""
    if cls == _CLASS_FLOAT:
        if name == "bf16":
            return _g(struct.unpack("<f", b"\0\0" + raw)[0], 9)
        if size == 2:
            return _g(struct.unpack("<e", raw)[0], 9)
        return _g(struct.unpack("<f" if size == 4 else "<d", raw)[0],
                  9 if size == 4 else 17)
    if cls in (_CLASS_SIGNED, _CLASS_UNSIGNED):
        return str(int.from_bytes(raw, "little",
                                  signed=cls == _CLASS_SIGNED))
    if cls == _CLASS_BOOL:
        b = raw[0]
        return ("true" if b else "false") if b <= 1 else "true (byte %d)" % b
    if cls == _CLASS_COMPLEX:
        half = size // 2
        fmt, digits = ("<f", 9) if half == 4 else ("<d", 17)
        re = struct.unpack(fmt, raw[:half])[0]
        im = struct.unpack(fmt, raw[half:])[0]
        return "%s%+.*gj" % (_g(re, digits), digits, im)
    return "?"


def _values_text(data, dtype, numel):
    """"{0, 1, 2, ...}": the leading values at data (a pointer Value)."""
    table = _dtypes()
    if dtype not in table:
        return "<invalid dtype %d>" % dtype
    name, size, cls = table[dtype]
    addr = _int(data)
    if numel > 0 and addr == 0:
        return "data=NULL"
    limit = _Settings.values
    k = numel if limit is None else min(numel, limit)
    try:
        raw = bytes(gdb.selected_inferior().read_memory(addr, k * size)) \
            if k > 0 else b""
    except (gdb.MemoryError, gdb.error):
        return "<data at 0x%x cannot be read>" % addr
    vals = [_element_text(raw[i * size:(i + 1) * size], name, size, cls)
            for i in range(k)]
    if k < numel:
        vals.append("...")
    return "{" + ", ".join(vals) + "}"


def _block_parts(val):
    dtype = _int(val["dtype"])
    rank = _int(val["rank"])
    if not 0 <= rank <= _MAX_RANK:
        raise ShmapError("rank %d" % rank)
    shape = [_int(val["shape"][d]) for d in range(rank)]
    if any(s < 0 for s in shape):
        raise ShmapError("negative shape %s" % shape)
    numel = 1
    for s in shape:
        numel *= s
    return dtype, rank, shape, numel


class BlockPrinter:
    """shmap_block: f32[2,8] {40, 41, 42, 43, 44, 45, 46, 47, ...}"""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        try:
            dtype, rank, shape, numel = _block_parts(self.val)
            return "%s %s" % (_shape_text(dtype, rank, shape),
                              _values_text(self.val["data"], dtype, numel))
        except ShmapError as e:
            return "<invalid shmap_block: %s>" % e
        except gdb.error as e:
            return "<shmap_block: %s>" % e


def _spec_text(axes, spec, rank):
    """The canonical JAX form of a resolved spec: P('i', None)."""
    ndims = _int(spec["ndims"])
    if not 0 <= ndims <= _MAX_RANK:
        raise ShmapError("spec with %d entries" % ndims)
    parts = []
    for d in range(ndims):
        n = _int(spec["naxes"][d])
        if not 0 <= n <= _MAX_AXES:
            raise ShmapError("spec entry with %d axes" % n)
        names = []
        for k in range(n):
            a = _int(spec["axes"][d][k])
            names.append("'%s'" % (axes[a][0] if 0 <= a < len(axes) else "?"))
        if n == 0:
            parts.append("None")
        elif n == 1:
            parts.append(names[0])
        else:
            parts.append("(" + ", ".join(names) + ")")
    return "P(" + ", ".join(parts) + ")"


class ArrayPrinter:
    """struct shmap_array: on the host, f32[4,16] on the host {0, 1, ...};
    sharded, f32[4,16] sharded on mesh i=2, j=2 by P('i', 'j'), blocks
    f32[2,8]."""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        v = self.val
        try:
            dtype, rank, shape, numel = _block_parts(v)
            text = _shape_text(dtype, rank, shape)
            if _int(v["mesh"]) == 0:
                return "%s on the host %s" % (
                    text, _values_text(v["data"], dtype, numel))
            axes = _mesh_axes(v["mesh"].dereference())
            text += " sharded on mesh %s" % _axes_text(axes)
            try:
                text += " by " + _spec_text(axes, v["spec"], rank)
            except (ShmapError, gdb.error):
                pass
            try:
                bshape = [_int(v["bshape"][d]) for d in range(rank)]
                text += ", blocks " + _shape_text(dtype, rank, bshape)
            except gdb.error:
                pass
            return text
        except ShmapError as e:
            return "<invalid shmap_array: %s>" % e
        except gdb.error as e:
            return "<shmap_array: %s>" % e


class MeshPrinter:
    """struct shmap_mesh: mesh i=2, j=2 (4 devices)"""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        try:
            axes = _mesh_axes(self.val)
            n = _int(self.val["ndev"])
            return "mesh %s (%d device%s)" % (_axes_text(axes), n,
                                              "" if n == 1 else "s")
        except (ShmapError, gdb.error) as e:
            return "<shmap_mesh: %s>" % e


class CtxPrinter:
    """struct shmap_ctx: device 3 (i=1, j=1) of mesh i=2, j=2, 1 collective
    call so far"""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        v = self.val
        try:
            axes = _mesh_axes(v["rt"]["mesh"].dereference())
            dev = _int(v["dev"])
            seq = _int(v["seq"])
            text = "%s of mesh %s, %d collective call%s so far" % (
                _devname(axes, dev), _axes_text(axes), seq,
                "" if seq == 1 else "s")
            if _int(v["err"]):
                text += ", error %d" % _int(v["err"])
            return text
        except (ShmapError, gdb.error) as e:
            return "<shmap_ctx: %s>" % e


_PRINTERS = {"shmap_block": BlockPrinter, "shmap_array": ArrayPrinter,
             "shmap_mesh": MeshPrinter, "shmap_ctx": CtxPrinter}


def shmap_lookup(val):
    """gdb pretty-printer lookup for libshmap's structures."""
    try:
        t = val.type.strip_typedefs().unqualified()
    except gdb.error:
        return None
    if t.code != gdb.TYPE_CODE_STRUCT:
        return None
    cls = _PRINTERS.get(t.tag)
    if cls is None:
        return None
    # An opaque declaration (shmap_array in a user's program) has no fields.
    try:
        if not t.fields():
            return None
    except TypeError:
        return None
    return cls(val)


shmap_lookup.name = "libshmap"
shmap_lookup.enabled = True


# ---- exploring schedules ----------------------------------------------------

def _sym_value(name):
    """The value of one of the library's globals, or None."""
    try:
        sym = gdb.lookup_global_symbol(name) or gdb.lookup_static_symbol(name)
        if sym is None:
            return gdb.parse_and_eval(name)
        return sym.value()
    except gdb.error:
        return None


def _schedule_text():
    """What the exploring schedule does next, or None outside one."""
    text = _sym_value("shmap__explore_text")
    if text is None or _int(text) == 0:
        return None
    name = text.string()
    step = _int(_sym_value("shmap__explore_next_step"))
    nxt = _int(_sym_value("shmap__explore_next_dev"))
    mapno = _int(_sym_value("shmap__explore_mapno"))
    ncand = _int(_sym_value("shmap__explore_ncand"))
    cand = _sym_value("shmap__explore_cand")
    axes = None
    for rt in _runtimes():
        if _exploring(rt):
            axes = _mesh_axes(rt["mesh"].dereference())
    name_of = (lambda d: _devname(axes, d)) if axes else (
        lambda d: "device %d" % d)
    could = [_int(cand[i]) for i in range(min(ncand, _MAX_DEVICES))]
    return ("schedule %s (SHMAP_REPLAY=%s), map %d, step %d: %s runs next; "
            "could run: %s" % (name, name, mapno, step, name_of(nxt),
                               ", ".join(name_of(d) for d in could)))


class ShmapSchedule(gdb.Command):
    """Show an exploring schedule's next choice: shmap schedule

Under an exploring schedule (the program run with SHMAP_REPLAY=TEXT, or
SHMAP_EXPLORE, SHMAP_SCHED=explore, shmap_explore(3)), one device runs at a
time and the schedule picks the next at every wait with more than one
device able to run.  This shows the schedule's text, the map it is in,
the choice's number (its step), the device it picked and the devices that
could have run.  The choice is the one the program stopped at or made
last; "shmap schedule step" runs to the next one."""

    def __init__(self):
        super().__init__("shmap schedule", gdb.COMMAND_RUNNING,
                         gdb.COMPLETE_NONE, True)

    def invoke(self, arg, from_tty):
        def go():
            if arg.strip():
                raise ShmapError("usage: shmap schedule [step [N]]")
            text = _schedule_text()
            if text is None:
                raise ShmapError(
                    "no exploring schedule is choosing now (run the program "
                    "with SHMAP_REPLAY=TEXT or SHMAP_SCHED=explore; "
                    "\"shmap schedule step\" runs to its first choice)")
            gdb.write(text + "\n")
        _run(go)


class ShmapScheduleStep(gdb.Command):
    """Run to an exploring schedule's next choice: shmap schedule step [N]

Lets the program run until the schedule makes its next choice (N: its
N-th next, default 1), stops before the chosen device goes on, and shows
the choice as "shmap schedule" does.  The devices then are all parked but
none runs: "shmap devices" lists them, "shmap device DEV" shows one.
Another breakpoint reached first stops the program there instead; so
does its end."""

    def __init__(self):
        super().__init__("shmap schedule step", gdb.COMMAND_RUNNING,
                         gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        def go():
            nums = _parse_ints(arg, 1, "usage: shmap schedule step [N]")
            n = nums[0] if nums else 1
            if n < 1:
                raise ShmapError("usage: shmap schedule step [N] (N >= 1)")
            if gdb.selected_inferior().pid == 0:
                raise ShmapError("the program is not running (start it "
                                 "first, e.g. with \"start\")")
            bp = gdb.Breakpoint("shmap__explore_step", internal=True)
            bp.silent = True
            try:
                for _ in range(n):
                    before = bp.hit_count
                    out = gdb.execute("continue", to_string=True)
                    if gdb.selected_inferior().pid == 0:
                        gdb.write(out.replace("Continuing.\n", ""))
                        gdb.write("The program ended before the schedule's "
                                  "next choice.\n")
                        return
                    if bp.hit_count == before:
                        # Another breakpoint, or a signal: what gdb said.
                        gdb.write(out.replace("Continuing.\n", ""))
                        return
            finally:
                bp.delete()
            gdb.write(_schedule_text() or "no exploring schedule\n")
            gdb.write("\n")
        _run(go)


def _install():
    # Sourcing the file twice replaces the earlier printer.
    gdb.pretty_printers[:] = [p for p in gdb.pretty_printers
                              if getattr(p, "name", None) != "libshmap"]
    gdb.pretty_printers.append(shmap_lookup)
    ShmapPrefix()
    ShmapMeshes()
    ShmapDevices()
    ShmapDevice("shmap device")
    ShmapDevice("shmap thread")
    ShmapRelease()
    ShmapSchedule()
    ShmapScheduleStep()
    ShmapDeviceFunction()
    ShmapSetPrefix("set shmap")
    ShmapSetPrefix("show shmap")
    ShmapValues()
    _install_hooks()


_install()
