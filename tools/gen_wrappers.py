#!/usr/bin/env python3
"""Generate ncclmpi's MPI wrappers from src/interpose/mpi_api.def.

Outputs (into the build directory):
  nm_impl.h     prototypes of the nm_impl_<Name> C entry points
  nm_fn.h       the nm_fn_t enum and the per-function table (name, path, op kind, flags)
  wrap_c.c      one C wrapper per row (exported MPI_<Name>, an alias of nm_impl_<Name>)
  wrap_f.c      one Fortran delegate per row plus its manglings: mpi_x, mpi_x_, mpi_x__, MPI_X,
                and ompi_x_f (the symbol Open MPI's mpi_f08 bindings call)
  api_list.txt  every exported entry point, for the coverage test
  coverage.txt  one line per intercepted function: what happens to its device buffers (routed,
                staged, rejected-on-device, unsupported-on-device) or that it has none (flush-only,
                host-only)
  api_absent.txt  the MPI4 rows left out: functions the MPI under us does not provide

Rows flagged MPI4 (FLAGS "NB|MPI4", "0|MPI4", ...) are functions that only MPI-4 libraries have,
MPI41 those of MPI-4.1: they are generated only when named by --have (configure's list of those
the MPI links), and nm_impl.h defines NM_HAVE_FN_<Name> for each.
Rows named <Name>_c are MPI-4's large-count (MPI_Count) forms of the row <Name>: MPI4 rows, C only
(no Fortran entry point: Fortran reaches them through mpi_f08's own names), generated only where
their int form is too.
"""
import os
import re
import sys

ROW = re.compile(r"NM_FN\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*([\w|]+)\s*,(.*)\)\s*$", re.S)
ARG = re.compile(r"ARG\(\s*(\w+)\s*,\s*([^,]+?)\s*,\s*(\w+)\s*\)")
PATHS = {"DATA", "PASS", "SYNC", "PROGRESS", "WAIT", "INIT", "FINALIZE", "COMMNEW", "REJECT", "STAGE", "PERSIST", "PROBE",
         "RMA", "WIN", "LARGE", "PART"}
ROLES = set("""SBUF RBUF BUF CBUF SCOUNT RCOUNT COUNT SCOUNTS RCOUNTS SDISPLS RDISPLS SADISPLS RADISPLS STYPE RTYPE DTYPE
STYPES RTYPES OP ROOT PEER SPEER RPEER TAG STAG RTAG COMM REQ REQIO REQS NREQ STATUS STATUSES FLAG
INDEX INDICES OUTCOUNT MSG MSGOUT NEWCOMM INFO GROUP ARGC ARGV REQUIRED PROVIDED WIN WINOUT FILE
DISP STR TRANK TCOUNT TTYPE ATTR X""".split())
BUF_ROLES = ("SBUF", "RBUF", "BUF", "CBUF")


def read_rows(path):
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    rows, buf, depth = [], "", 0
    for line in text.splitlines():
        if not buf and not line.strip().startswith("NM_FN("):
            continue
        buf += line + "\n"
        depth += line.count("(") - line.count(")")
        if depth == 0:
            m = ROW.match(buf.strip())
            if not m:
                sys.exit("gen_wrappers: cannot parse row: " + buf)
            name, path, kind, flags, args = m.groups()
            flags, _, avail = flags.partition("|")
            if avail not in ("", "MPI4", "MPI41"):
                sys.exit("gen_wrappers: %s: unknown flag %s (only MPI4 or MPI41 follows a |)" % (name, avail))
            args = [dict(role=r, ctype=t.strip(), name=n) for r, t, n in ARG.findall(args)]
            if path not in PATHS:
                sys.exit("gen_wrappers: %s: unknown path %s" % (name, path))
            if flags not in ("0", "NB", "PERS", "CORE") or (flags == "CORE" and path != "WIN"):
                sys.exit("gen_wrappers: %s: unknown flags %s (CORE: WIN rows only)" % (name, flags))
            for a in args:
                if a["role"] not in ROLES:
                    sys.exit("gen_wrappers: %s: unknown role %s" % (name, a["role"]))
            roles = [a["role"] for a in args]
            if path in ("REJECT", "STAGE", "RMA", "PART") and not any(r in BUF_ROLES for r in roles):
                sys.exit("gen_wrappers: %s: a %s row needs a buffer" % (name, path))
            if path == "STAGE" and sum(r in BUF_ROLES for r in roles) > 2:
                sys.exit("gen_wrappers: %s: a STAGE row has at most two buffers" % name)
            if path == "DATA" and any(r in ("CBUF", "WIN", "WINOUT", "FILE", "STR") for r in roles):
                sys.exit("gen_wrappers: %s: role not describable on the DATA path" % name)
            if (path == "LARGE" or name.endswith("_c")) and not (name.endswith("_c") and avail == "MPI4"):
                sys.exit("gen_wrappers: %s: a LARGE row is an MPI4 row named <Name>_c, and such a row is MPI4" % name)
            rows.append(dict(name=name, path=path, kind=kind, flags=flags, args=args, mpi4=avail in ("MPI4", "MPI41")))
            buf = ""
    return rows


def formals(r):
    return ", ".join("%s %s" % (a["ctype"], a["name"]) for a in r["args"]) or "void"


def actuals(r):
    return ", ".join(a["name"] for a in r["args"])


def flags_expr(r):
    return {"0": "0", "NB": "NM_OPF_NB", "PERS": "NM_OPF_PERS", "CORE": "0"}[r["flags"]]


# ---------------------------------------------------------------------------------------------
# C wrappers
# ---------------------------------------------------------------------------------------------
DESCRIBE = {
    "SBUF": "o.sbuf = {n};", "RBUF": "o.rbuf = {n};", "BUF": "o.sbuf = o.rbuf = {n};",
    "SCOUNT": "o.scount = {n};", "RCOUNT": "o.rcount = {n};", "COUNT": "o.scount = o.rcount = {n};",
    "SCOUNTS": "o.scounts = {n};", "RCOUNTS": "o.rcounts = {n};",
    "SDISPLS": "o.sdispls = {n};", "RDISPLS": "o.rdispls = {n};",
    "SADISPLS": "o.sadispls = {n};", "RADISPLS": "o.radispls = {n};",
    "STYPE": "o.stype = {n};", "RTYPE": "o.rtype = {n};", "DTYPE": "o.stype = o.rtype = {n};",
    "STYPES": "o.stypes = {n};", "RTYPES": "o.rtypes = {n};", "OP": "o.op = {n};",
    "ROOT": "o.root = {n};", "PEER": "o.peer = o.rpeer = {n};", "SPEER": "o.peer = {n};",
    "RPEER": "o.rpeer = {n};", "TAG": "o.tag = o.rtag = {n};", "STAG": "o.tag = {n};",
    "RTAG": "o.rtag = {n};", "COMM": "o.comm = {n};", "REQ": "o.req = {n};",
    "STATUS": "o.status = {n};", "MSG": "o.msg = {n};", "INFO": "o.info = {n};",
}
# The real MPI call of a DATA row made from its descriptor alone (nm_real_<Name>): the core calls
# it when it runs the call itself (staged shadows, a replaced op, a receive it decodes). Every
# DATA role has its field, so the core never needs the wrapper's arguments.
REAL = {"SBUF": "o->sbuf", "RBUF": "o->rbuf", "BUF": "o->rbuf", "SCOUNT": "o->scount", "RCOUNT": "o->rcount",
        "COUNT": "o->scount", "SCOUNTS": "o->scounts", "RCOUNTS": "o->rcounts", "SDISPLS": "o->sdispls",
        "RDISPLS": "o->rdispls", "SADISPLS": "o->sadispls", "RADISPLS": "o->radispls", "STYPE": "o->stype",
        "RTYPE": "o->rtype", "DTYPE": "o->stype", "STYPES": "o->stypes", "RTYPES": "o->rtypes", "OP": "o->op",
        "ROOT": "o->root", "PEER": "o->peer", "SPEER": "o->peer", "RPEER": "o->rpeer", "TAG": "o->tag",
        "STAG": "o->tag", "RTAG": "o->rtag", "COMM": "o->comm", "REQ": "o->req", "STATUS": "o->status",
        "MSG": "o->msg", "INFO": "o->info"}
assert set(REAL) == set(DESCRIBE), "every described role is read back by nm_real_"
assert all("o.%s =" % REAL[k][3:] in v for k, v in DESCRIBE.items()), "nm_real_ reads the field DESCRIBE sets"


# REJECT rows: each buffer with the count and datatype that say which of its bytes the call
# touches. SBUF pairs with SCOUNT/STYPE (else COUNT/DTYPE), RBUF with RCOUNT/RTYPE (else
# COUNT/DTYPE), BUF and CBUF (a third buffer: Compare_and_swap) with COUNT/DTYPE. Without a count
# role the buffer holds one element (Fetch_and_op), with per-neighbour counts (SCOUNTS/RCOUNTS)
# its size is not known here (-1: significant); without a datatype the count is in bytes.
REJECT_PAIRS = {"SBUF": (("SCOUNT", "COUNT"), ("SCOUNTS",), ("STYPE", "DTYPE")),
                "RBUF": (("RCOUNT", "COUNT"), ("RCOUNTS",), ("RTYPE", "DTYPE")),
                "BUF": (("COUNT",), (), ("DTYPE",)),
                "CBUF": (("COUNT",), (), ("DTYPE",))}
F_HANDLE = {"FILE": "PMPI_File_f2c", "WIN": "PMPI_Win_f2c", "COMM": "PMPI_Comm_f2c"}


def first_roles(r):
    roles = {}
    for a in r["args"]:
        roles.setdefault(a["role"], a["name"])
    return roles


def reject_bufs(r, fortran):
    """nm_rbuf_t initializers {pointer, element count, datatype} of a REJECT row, as C
    expressions over the C arguments or (fortran) over the Fortran delegate's arguments."""
    roles = first_roles(r)
    val = (lambda n: "*" + n) if fortran else (lambda n: n)
    typ = (lambda n: "PMPI_Type_f2c(*%s)" % n) if fortran else (lambda n: n)
    out = []
    for a in r["args"]:
        if a["role"] not in BUF_ROLES:
            continue
        counts, arrays, types = REJECT_PAIRS[a["role"]]
        c = next((val(roles[x]) for x in counts if x in roles), None)
        if c is None:
            c = "-1" if any(x in roles for x in arrays) else "1"
        t = next((typ(roles[x]) for x in types if x in roles), "MPI_DATATYPE_NULL")
        if a["role"] == "SBUF" and "OP" in roles:  # MPI_NO_OP: the origin buffer is not read
            op = "PMPI_Op_f2c(*%s)" % roles["OP"] if fortran else roles["OP"]
            c = "%s == MPI_NO_OP ? 0 : (long long)%s" % (op, c)
        p = "nm_f2c_buf(%s)" % a["name"] if fortran else a["name"]
        out.append("{%s, %s, %s}" % (p, c, t))
    return out


# RMA rows: one-sided data calls. Where the core keeps windows' records, or the call has a device
# buffer, the call is described (nm_rma_t) and the core takes it (src/core/tl/rma/window.cc): a
# target whose window memory is on a GPU through CUDA IPC, device buffers with a host window
# staged; otherwise the real MPI's call as it is.
RMA_DESC = {"SBUF": "a.obuf = {n};", "SCOUNT": "a.ocount = {n};", "STYPE": "a.otype = {n};",
            "RBUF": "a.rbuf = {n};", "RCOUNT": "a.rcount = {n};", "RTYPE": "a.rtype = {n};",
            "DTYPE": "a.otype = a.rtype = a.ttype = {n};", "CBUF": "a.cbuf = {n};", "TRANK": "a.trank = {n};",
            "DISP": "a.tdisp = {n};", "TCOUNT": "a.tcount = {n};", "TTYPE": "a.ttype = {n};", "OP": "a.op = {n};",
            "WIN": "a.win = {n};", "REQ": "a.req = {n};"}


def rma_prefix(r):
    """The C RMA wrapper's first lines: the core takes the call where it keeps windows' records
    (a window may have device memory) or a buffer is device memory."""
    desc = " ".join(RMA_DESC[a["role"]].format(n=a["name"]) for a in r["args"] if a["role"] in RMA_DESC)
    bufs = reject_bufs(r, False)
    return ["const nm_rbuf_t b[%d] = {%s};" % (len(bufs), ", ".join(bufs)),
            "if (NM_UNLIKELY(nm_win_state & NM_WIN_TRACKED) || NM_UNLIKELY(nm_reject_device(b, %d))) {" % len(bufs),
            "    nm_rma_t a;",
            "    nm_rma_init(&a, NM_FN_%s);" % r["name"],
            "    " + desc,
            "    int rc;",
            "    if (nm_rma(&a, &rc)) return rc;",
            "}"]


# WIN rows: window creation and the synchronizations ncclmpi joins for windows with device memory.
# The core's nm_win_<Name> (same arguments) makes the whole call, the real MPI's included, when
# win_cond holds; otherwise the row behaves as the SYNC row it was (queued work launched first).
def win_cond(r, fortran=False):
    if r["flags"] == "CORE":  # every call, wherever ncclmpi is on (MPI_Win_create: decided together)
        return "nm_win_state"
    attr = first_roles(r).get("ATTR")
    if fortran and attr:  # a predefined attribute's value, which the C call gives by reference
        return "(nm_win_state & NM_WIN_TRACKED) && nm_win_attr_predefined(*%s)" % first_roles(r)["X"]
    return "(nm_win_state & NM_WIN_TRACKED)"


def reject_raise(r, fortran):
    """The call that raises MPI_ERR_BUFFER on the call's object (file, window, communicator;
    MPI_COMM_WORLD when it has none) and returns the error code. A persistent (PERS) REJECT row
    (MPI-4 persistent neighbourhood collectives) raises MPI_ERR_UNSUPPORTED_OPERATION on its
    communicator instead: a device route is to come."""
    roles = first_roles(r)
    fn = "NM_FN_%s" % r["name"]
    if r["flags"] == "PERS":
        return "nm_unsupported_comm(%s, %s)" % (fn, "PMPI_Comm_f2c(*%s)" % roles["COMM"] if fortran else roles["COMM"])
    for role, helper in (("FILE", "nm_reject_file"), ("WIN", "nm_reject_win"), ("COMM", "nm_reject_comm")):
        if role in roles:
            h = "%s(*%s)" % (F_HANDLE[role], roles[role]) if fortran else roles[role]
            return "%s(%s, %s)" % (helper, fn, h)
    return "nm_reject_comm(%s, MPI_COMM_NULL)" % fn


def reject_resets(r, fortran):
    """A rejected call still leaves its output handles defined (a program that ignores the
    error code and waits on the request gets MPI_REQUEST_NULL, not garbage)."""
    out = []
    for a in r["args"]:
        if a["role"] == "REQ":
            out.append("*%s = %s;" % (a["name"], "PMPI_Request_c2f(MPI_REQUEST_NULL)" if fortran else "MPI_REQUEST_NULL"))
        elif a["role"] == "WINOUT":
            out.append("*%s = %s;" % (a["name"], "PMPI_Win_c2f(MPI_WIN_NULL)" if fortran else "MPI_WIN_NULL"))
    return out


# STAGE rows: local calls (packing, MPI_Reduce_local, MPI-IO data calls) whose device buffers are
# copied to host shadows around the real MPI's call (src/core/tl/staged/local.cc). The buffers are
# REJECT's, each with its direction: SBUF is read, RBUF read and written (MPI_Reduce_local's
# inoutbuf; packing writes only part of it, the rest must stay), BUF read by a write and read and
# written by a read (a short read at the end of the file, or a datatype with gaps, leaves bytes
# alone). A split collective's _begin stages, its _end finds the shadows by file handle.
def stage_bufs(r, fortran):
    bufs = reject_bufs(r, fortran)
    dirs = []
    for a in r["args"]:
        if a["role"] in BUF_ROLES:
            # 2: a read's buffer, written from its start up to what the status counts
            dirs.append(2 if a["role"] == "BUF" and "read" in r["name"].lower() else 1 if a["role"] == "RBUF" else 0)
    return ["%s, %d}" % (b[:-1], d) for b, d in zip(bufs, dirs)]


def stage_how(r):
    n = r["name"]
    return "NM_STAGE_BEGIN" if n.endswith("_begin") else "NM_STAGE_END" if n.endswith("_end") else "0"


def stage_objs(r, fortran):
    """The call's file and communicator (their error handlers report a failed staging)."""
    roles = first_roles(r)
    fh = ("PMPI_File_f2c(*%s)" if fortran else "%s") % roles["FILE"] if "FILE" in roles else "MPI_FILE_NULL"
    comm = ("PMPI_Comm_f2c(*%s)" if fortran else "%s") % roles["COMM"] if "COMM" in roles else "MPI_COMM_NULL"
    return fh, comm


def stage_coll(r):
    """A collective file call (every rank of the file's group makes it)."""
    return r["name"].startswith("File_") and ("_all" in r["name"] or "_ordered" in r["name"])


def stage_body(r, fortran, call, req_get, req_put, ret, resets):
    """The staging block of a STAGE wrapper (C or Fortran): stage, the real call on the shadows,
    the copies back or the request's task. call(subst, result): the statement that makes the real
    call with the arguments named in subst replaced, its result into `result` (C) or the ierr
    variable `result` (Fortran). ret(v): the lines that end the wrapper with result v.
    A rank that cannot stage (no pinned memory, a failed copy) reports the error; in a collective
    file call it first takes part in the real MPI's call with a count of 0, so that the other ranks
    do not wait for it."""
    bufs = stage_bufs(r, fortran)
    names = [a["name"] for a in r["args"] if a["role"] in BUF_ROLES]
    fh, comm = stage_objs(r, fortran)
    fn = "NM_FN_%s" % r["name"]
    roles = first_roles(r)
    # the C forms hand the core the status the real call fills (stp: the caller's, or one of the
    # core's where the caller ignores it), so that a read copies back only what it read (and need
    # not copy in); the Fortran forms' statuses are Fortran's: their reads copy in and back whole
    how = stage_how(r)
    if stage_coll(r) and "REQ" not in roles:  # a blocking collective call: its wait is watched
        how = "NM_STAGE_WAITS" if how == "0" else how + " | NM_STAGE_WAITS"
    stp = "NULL"
    if not fortran and ("STATUS" in roles or "REQ" in roles or r["name"].endswith("_begin")):
        how = "NM_STAGE_COUNTS" if how == "0" else how + " | NM_STAGE_COUNTS"
    out = ["const nm_sbuf_t b[%d] = {%s};" % (len(bufs), ", ".join(bufs)),
           "void *sh[%d];" % len(bufs),
           "void *tok = NULL;",
           "int rc = MPI_SUCCESS;"]
    if not fortran and "STATUS" in roles:
        out.append("MPI_Status *stp = %s;" % roles["STATUS"])
        stp = "&stp"
    out += ["const int e = nm_stage_local(%s, b, %d, %s, %s, %s, sh, &tok, %s, &rc);" % (fn, len(bufs), how, fh, comm, stp),
            "if (NM_UNLIKELY(e == NM_STAGE_FAILED)) {"]
    if stage_coll(r) and "COUNT" in roles:
        if fortran:
            out += ["    MPI_Fint zero = 0, ierr2 = 0;",
                    "    " + call({roles["COUNT"]: "&zero"}, "&ierr2"),
                    "    (void)ierr2;"]
        else:
            out += ["    int rc2;", "    " + call({roles["COUNT"]: "0"}, "rc2"), "    (void)rc2;"]
        out += ["    " + s for s in ret("rc")]
    else:
        out += ["    " + s for s in resets + ret("rc")]
    out += ["}", "if (e == NM_STAGE_STAGED) {"]
    shadows = {n: ("sh[%d]" if fortran else "(%s)sh[%%d]" % next(a["ctype"] for a in r["args"] if a["name"] == n)) % i
               for i, n in enumerate(names)}
    if stp != "NULL":
        shadows[roles["STATUS"]] = "stp"
    out += ["    " + s for s in [call(shadows, "ierr" if fortran else "rc")] + req_get]
    out += ["    rc = nm_stage_local_done(%s, tok, %s, %s, %s, %s, %s);" % (
        fn, "*ierr" if fortran else "rc", "stp" if stp != "NULL" else "NULL", "&c_req" if req_get else "NULL", fh, comm)]
    out += ["    " + s for s in req_put + ret("rc")]
    out += ["}"]
    return out


def device_check_wrapper(n, f, act, fn, body, first=()):
    """A REJECT, STAGE or LARGE wrapper: the host fast path (count, two loads, tail jump) and, in
    its own non-inlined function, `body` (which ends the call when a buffer is device memory)
    followed by the real MPI as it is. `first`: lines the wrapper runs before all that (a LARGE
    row's call of its int form)."""
    return ["static NM_NOINLINE int nm_slow_%s(%s)" % (n, f), "{"] + \
           ["    " + x for x in body] + \
           ["    nm_trace_call(%s);" % fn,
            "    if (NM_UNLIKELY(nm_hot.queued)) nm_flush();",
            "    return PMPI_%s(%s);" % (n, act),
            "}",
            "int nm_impl_%s(%s)" % (n, f), "{"] + \
           ["    " + x for x in first] + \
           ["    NM_COUNT_CALL(%s);" % fn,
            "    if (NM_LIKELY(nm_host_fast())) return PMPI_%s(%s);" % (n, act),
            "    return nm_slow_%s(%s);" % (n, act)]


def refusal_body(r, raise_call):
    """The REJECT and LARGE rows' device check: when one of the call's buffers is device memory,
    its outputs are reset and `raise_call` ends the call (the real MPI never sees the pointer)."""
    bufs = reject_bufs(r, False)
    body = ["const nm_rbuf_t b[%d] = {%s};" % (len(bufs), ", ".join(bufs)),
            "if (NM_UNLIKELY(nm_reject_device(b, %d))) {" % len(bufs)]
    body += ["    " + s for s in reject_resets(r, False)]
    return body + ["    return %s;" % raise_call, "}"]


def slow_split(n, f, act, fn, cond, slow_body):
    """A wrapper whose work happens only when cond holds: that work and the PMPI call live in a
    non-inlined nm_slow_ function, so that both branches of nm_impl_ end in a tail call and the
    fast path saves no registers (a count, the test, a jump)."""
    return ["static NM_NOINLINE int nm_slow_%s(%s)" % (n, f), "{"] + \
           ["    " + x for x in slow_body] + \
           ["    return PMPI_%s(%s);" % (n, act), "}",
            "int nm_impl_%s(%s)" % (n, f), "{",
            "    NM_COUNT_CALL(%s);" % fn,
            "    if (NM_UNLIKELY(%s)) return nm_slow_%s(%s);" % (cond, n, act),
            "    return PMPI_%s(%s);" % (n, act)]


def large_scalars(r):
    """The arguments of a LARGE row (MPI_<Name>_c) that are MPI_Count or MPI_Aint scalars where its
    int form (r["base"]) has an int; every other argument must be the int form's."""
    base = r["base"]
    if [a["role"] for a in r["args"]] != [a["role"] for a in base["args"]]:
        sys.exit("gen_wrappers: %s: its arguments' roles differ from %s's" % (r["name"], base["name"]))
    out = []
    for a, b in zip(r["args"], base["args"]):
        if a["ctype"] in ("MPI_Count", "MPI_Aint") and b["ctype"] == "int":
            out.append(a["name"])
        elif a["ctype"] != b["ctype"]:
            sys.exit("gen_wrappers: %s: %s is %s, %s's %s: not a scalar count (a REJECT or STAGE row, then)"
                     % (r["name"], a["name"], a["ctype"], base["name"], b["ctype"]))
    if not out:
        sys.exit("gen_wrappers: %s: a LARGE row with no count to narrow" % r["name"])
    return out


def large_raise(r):
    """The call that raises MPI_ERR_COUNT (a count above INT_MAX on a device buffer) through the
    error handler of the call's file, window or communicator (MPI_COMM_WORLD when it has none)."""
    roles = first_roles(r)
    return "nm_count_error(NM_FN_%s, %s, %s, %s)" % (r["name"], roles.get("COMM", "MPI_COMM_NULL"),
                                                     roles.get("WIN", "MPI_WIN_NULL"), roles.get("FILE", "MPI_FILE_NULL"))


def c_wrapper(r, recv_kinds):
    n, f, act = r["name"], formals(r), actuals(r)
    out = ["int nm_impl_%s(%s)" % (n, f), "{"]
    fn = "NM_FN_%s" % n
    p = r["path"]
    if p == "DATA":
        # The slow path lives in its own non-inlined function so that the host fast path
        # compiles to a count, two loads and a tail jump (no register saves).
        # The wrapper only describes the call and submits it: nm_enter() either runs it (NCCL,
        # staged, envelopes: the core calls the real MPI itself through nm_real_<Name>) or hands
        # it back untouched for the real MPI.
        real = ", ".join(REAL[a["role"]] for a in r["args"])
        out = ["static int nm_real_%s(const nm_op_t *o)" % n, "{",
               "    return PMPI_%s(%s);" % (n, real), "}",
               "static NM_NOINLINE int nm_slow_%s(%s)" % (n, f), "{",
               "    nm_op_t o;",
               "    nm_op_init(&o, %s, NM_OPK_%s, %s);" % (fn, r["kind"], flags_expr(r))]
        body = " ".join(DESCRIBE[a["role"]].format(n=a["name"]) for a in r["args"] if a["role"] in DESCRIBE)
        out += ["    " + body,
                "    int rc;",
                "    if (nm_enter(&o, &rc)) return rc;",
                "    return PMPI_%s(%s);" % (n, act),
                "}",
                "int nm_impl_%s(%s)" % (n, f), "{",
                "    NM_COUNT_CALL(%s);" % fn]
        # a receive (NM_KF_RECV) may get a point-to-point envelope (NCCLMPI_P2P_ENVELOPE),
        # which ncclmpi decodes also where no CUDA driver is loaded, and a neighbourhood
        # collective (NM_KF_NEIGH) then runs as point-to-point on every rank; a persistent v/w
        # collective restarts on every rank (route.h, nm_pers_coll_everywhere): no fast path; no
        # other call has anything to do there
        if not r.get("everywhere"):
            out += ["    if (NM_LIKELY(nm_host_fast()%s)) return PMPI_%s(%s);" % (
                " && !nm_envelopes_configured" if r["kind"] in recv_kinds else "", n, act)]
        out += ["    return nm_slow_%s(%s);" % (n, act)]
    elif p == "RMA":
        out = device_check_wrapper(n, f, act, fn, rma_prefix(r))
    elif p == "LARGE":
        # MPI-4 large counts: while every count fits an int the call is its int form's, made
        # through ncclmpi's own wrapper of it (routed, staged or refused as that one is, and
        # counted as that one: no count here on that path). A count above INT_MAX goes to the real
        # MPI's _c form with host buffers; on a device buffer the call fails with MPI_ERR_COUNT
        # (pointers only are looked at: nothing of the data is touched) and the real MPI never
        # sees the pointer.
        big = large_scalars(r)
        narrow = ", ".join("(int)" + a["name"] if a["name"] in big else a["name"] for a in r["args"])
        fits = "if (NM_LIKELY(%s)) return nm_impl_%s(%s);" % (" && ".join("NM_FITS_INT(%s)" % b for b in big),
                                                             r["base"]["name"], narrow)
        out = device_check_wrapper(n, f, act, fn, refusal_body(r, large_raise(r)), [fits])
    elif p == "REJECT":
        # Buffers ncclmpi cannot run on device memory: the real MPI must never see a device
        # pointer here, so such a call fails with MPI_ERR_BUFFER. The host fast path is the
        # DATA path's: count, two loads, tail jump; the check lives in its own function.
        out = device_check_wrapper(n, f, act, fn, refusal_body(r, reject_raise(r, False)))
    elif p == "PART":
        # MPI-4 partitioned communication: a device buffer makes the call through the core, on a
        # pinned host shadow whose partitions MPI_Pready* and MPI_Parrived copy
        # (core/tl/staged/partitioned.cc); host buffers as the REJECT path's: count, two loads,
        # tail jump.
        bufs = reject_bufs(r, False)
        body = ["const nm_rbuf_t b[%d] = {%s};" % (len(bufs), ", ".join(bufs)),
                "if (NM_UNLIKELY(nm_reject_device(b, %d))) return nm_part_%s(%s);" % (len(bufs), n.lower(), act)]
        out = device_check_wrapper(n, f, act, fn, body)
    elif p == "STAGE":
        # Device buffers go to the real MPI as host shadows (stage_body); host buffers as the
        # REJECT path's: count, two loads, tail jump.
        req = first_roles(r).get("REQ")
        call = lambda subst, res: "%s = PMPI_%s(%s);" % (res, n, ", ".join(subst.get(a["name"], a["name"]) for a in r["args"]))
        body = stage_body(r, False, call,
                          ["MPI_Request c_req = *%s;" % req] if req else [],
                          ["*%s = c_req;" % req] if req else [],
                          lambda v: ["return %s;" % v], reject_resets(r, False))
        out = device_check_wrapper(n, f, act, fn, body)
    elif p == "PASS":
        # may wait, or be polled while waiting: nothing may stay queued behind it
        out = slow_split(n, f, act, fn, "nm_hot.queued", ["nm_flush_fn(%s);" % fn])
    elif p == "SYNC":
        # a synchronizing call on a communicator (a barrier): flush, and a blocking one may make
        # the communicator's pending NCCL communicator (every rank is in it)
        roles = {a["role"]: a["name"] for a in r["args"]}
        blocking = "0" if r["flags"] == "NB" else "1"
        out = slow_split(n, f, act, fn, "nm_hot.slow",
                         ["nm_sync(%s, %s, %s);" % (fn, roles.get("COMM", "MPI_COMM_NULL"), blocking)])
    elif p == "WIN":
        # (a window in device memory sets nm_hot.slow: the other rows' fast path is SYNC's)
        out = slow_split(n, f, act, fn, "nm_win_state" if r["flags"] == "CORE" else "nm_hot.slow",
                         ["nm_trace_call(%s);" % fn,
                          "if (NM_UNLIKELY(nm_hot.queued)) nm_flush();",
                          "if (%s) return nm_win_%s(%s);" % (win_cond(r), n, act)])
    elif p == "PROGRESS":
        out = slow_split(n, f, act, fn, "nm_work_pending()", ["nm_progress_fn(%s);" % fn])
    elif p == "PERSIST":
        # calls on a persistent request (MPI_Start, MPI_Startall, MPI_Request_free,
        # MPI_Request_get_status): ncclmpi's hook runs first while it has work (staged persistent
        # requests count as work); it returns 1 when it made the call itself
        out = slow_split(n, f, act, fn, "nm_work_pending()",
                         ["nm_trace_call(%s);" % fn,
                          "int rc;",
                          "if (nm_pers_%s(%s, &rc)) return rc;" % (n.lower(), act)])
    elif p == "PROBE":
        # probes: like PASS (nothing stays queued behind them), and with point-to-point envelopes
        # ncclmpi's hook runs first (a probe must see through them); it returns 1 when it made
        # the call itself
        out = slow_split(n, f, act, fn, "nm_hot.queued | nm_envelopes_configured",
                         ["nm_trace_call(%s);" % fn,
                          "if (NM_UNLIKELY(nm_hot.queued)) nm_flush();",
                          "int rc;",
                          "if (nm_envelopes_configured && nm_probe_%s(%s, &rc)) return rc;" % (n.lower(), act)])
    elif p == "WAIT":
        roles = {a["role"]: a["name"] for a in r["args"]}
        if "NREQ" in roles:
            reqs, nreq = roles["REQS"], roles["NREQ"]
        else:
            reqs, nreq = roles["REQIO"], "1"
        # a Test form that is not ncclmpi's still moves ncclmpi's tasks along (the Wait forms
        # block in the real MPI on the application's own requests)
        out = slow_split(n, f, act, fn, "nm_work_pending()",
                         ["nm_trace_call(%s);" % fn,
                          "if (nm_tasks_owns(%s, %s)) return nm_wait_%s(%s);" % (nreq, reqs, n.lower(), act),
                          "nm_progress();" if r["kind"] == "TEST" else "nm_flush();"])
    elif p == "INIT":
        out += ["    NM_COUNT_CALL(%s);" % fn,
                "    int rc = PMPI_%s(%s);" % (n, act),
                "    if (rc == MPI_SUCCESS) nm_after_init();",
                "    nm_trace_call(%s);" % fn,
                "    return rc;"]
    elif p == "FINALIZE":
        out += ["    NM_COUNT_CALL(%s);" % fn,
                "    nm_trace_call(%s);" % fn,
                "    nm_before_finalize();",
                "    return PMPI_%s(%s);" % (n, act)]
    elif p == "COMMNEW":
        roles = {a["role"]: a["name"] for a in r["args"]}
        out += ["    NM_COUNT_CALL(%s);" % fn,
                "    if (NM_UNLIKELY(nm_hot.slow)) nm_sync(%s, %s, 1);" % (fn, roles["COMM"]),
                "    int rc = PMPI_%s(%s);" % (n, act),
                "    if (rc == MPI_SUCCESS) nm_comm_created(%s, *%s);" % (roles["COMM"], roles["NEWCOMM"]),
                "    return rc;"]
    out += ["}",
            "int MPI_%s(%s) NM_ALIAS(nm_impl_%s);" % (n, f, n), ""]
    return "\n".join(out)


def gen_c(rows, recv_kinds):
    out = ["/* Generated by tools/gen_wrappers.py from src/interpose/mpi_api.def. Do not edit. */",
           '#include "interpose/interpose.h"', ""]
    out += [c_wrapper(r, recv_kinds) for r in rows]
    out += ["const nm_real_fn_t nm_real_fns[NM_FN_COUNT] = {"]
    out += ["    [NM_FN_%s] = nm_real_%s," % (r["name"], r["name"]) for r in rows if r["path"] == "DATA"]
    out += ["};"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Fortran delegates
# ---------------------------------------------------------------------------------------------
HANDLE_F2C = {"MPI_Datatype": "PMPI_Type_f2c", "MPI_Op": "PMPI_Op_f2c", "MPI_Comm": "PMPI_Comm_f2c", "MPI_Win": "PMPI_Win_f2c",
              "MPI_Info": "PMPI_Info_f2c", "MPI_Group": "PMPI_Group_f2c",
              "MPI_Request": "PMPI_Request_f2c"}


def f_formal(a):
    t = a["ctype"]
    if t in ("const void *", "void *"):
        return "void *" + a["name"]
    if a["role"] == "STR":  # CHARACTER: its length comes as a hidden argument (f_hidden)
        return "char *" + a["name"]
    base = t.replace("const", "").replace("*", "").strip()
    if base in ("MPI_Aint", "MPI_Offset", "MPI_Count"):  # INTEGER(KIND=MPI_ADDRESS_KIND / _OFFSET_ / _COUNT_)
        return "%s *%s" % (base, a["name"])
    return "MPI_Fint *" + a["name"]


def f_hidden(r):
    """The hidden length arguments of CHARACTER arguments, after ierr, in argument order: how
    gfortran calls mpi_x_ and how Open MPI declares its own bindings (an int per string; the
    mpi_f08 module passes them by value to ompi_x_f). Forwarded unchanged."""
    return ["%s_len" % a["name"] for a in r["args"] if a["role"] == "STR"]


def f_args(r):
    """Fortran-side arguments: MPI_INIT has no argc/argv."""
    return [a for a in r["args"] if a["role"] not in ("ARGC", "ARGV")]


def f_convert(r):
    """(pre statements, C actual expressions, post statements) for the call into nm_impl_."""
    pre, acts, post = [], [], []
    roles = {a["role"]: a["name"] for a in r["args"]}
    for a in r["args"]:
        role, t, n = a["role"], a["ctype"], a["name"]
        if role in ("SBUF", "RBUF", "BUF", "CBUF"):
            acts.append("nm_f2c_buf(%s)" % n)
        elif t in ("MPI_Aint", "MPI_Offset", "MPI_Count"):
            acts.append("*" + n)
        elif role == "ATTR":  # a window attribute's value: by reference in C, the value in Fortran
            pre.append("void *c_%s = NULL;" % n)
            acts.append("&c_" + n)
            post.append("if (*ierr == MPI_SUCCESS && c_%s) *(MPI_Aint *)%s = nm_win_attr_f(*%s, c_%s);"
                        % (roles["FLAG"], n, roles["X"], n))
        elif t == "MPI_Win *":  # (WINOUT: out; Win_free: in and out)
            pre.append("MPI_Win c_%s = %s;" % (n, "MPI_WIN_NULL" if role == "WINOUT" else "PMPI_Win_f2c(*%s)" % n))
            acts.append("&c_" + n)
            post.append("*%s = PMPI_Win_c2f(c_%s);" % (n, n))
        elif t in HANDLE_F2C:
            acts.append("%s(*%s)" % (HANDLE_F2C[t], n))
        elif t == "int":
            acts.append("*" + n)
        elif t == "const int *":
            acts.append("(const int *)" + n)
        elif t == "NM_PREADY_LIST_CONST int *":  # MPI_Pready_list's partitions (0-based in Fortran too)
            acts.append("(int *)" + n)
        elif t == "const MPI_Aint *":  # INTEGER(KIND=MPI_ADDRESS_KIND) arrays: the same bits
            acts.append(n)
        elif role in ("STYPES", "RTYPES") and r["kind"].startswith("NEIGHBOR"):  # one per neighbour
            pre.append("MPI_Datatype *c_%s = nm_f2c_neighbor_types(%s, PMPI_Comm_f2c(*%s), %d);"
                       % (n, n, roles["COMM"], role == "STYPES"))
            acts.append("c_" + n)
            post.append("free(c_%s);" % n)
        elif role in ("STYPES", "RTYPES"):
            pre.append("MPI_Datatype *c_%s = nm_f2c_types(%s, PMPI_Comm_f2c(*%s));" % (n, n, roles["COMM"]))
            acts.append("c_" + n)
            post.append("free(c_%s);" % n)
        elif role == "REQ":
            pre.append("MPI_Request c_%s = MPI_REQUEST_NULL;" % n)
            acts.append("&c_" + n)
            post.append("*%s = PMPI_Request_c2f(c_%s);" % (n, n))
        elif role == "REQIO":
            pre.append("MPI_Request c_%s = PMPI_Request_f2c(*%s);" % (n, n))
            acts.append("&c_" + n)
            post.append("*%s = PMPI_Request_c2f(c_%s);" % (n, n))
        elif role == "REQS":
            nreq = "*" + roles["NREQ"]
            pre.append("MPI_Request *c_%s = nm_f2c_reqs(%s, %s);" % (n, n, nreq))
            acts.append("c_" + n)
            post.append("nm_c2f_reqs(c_%s, %s, %s);" % (n, n, nreq))
        elif role == "STATUS":
            pre.append("MPI_Status c_%s, *p_%s = nm_f_status_ignored(%s) ? MPI_STATUS_IGNORE : &c_%s;" % (n, n, n, n))
            acts.append("p_" + n)
            post.append("if (p_%s != MPI_STATUS_IGNORE) PMPI_Status_c2f(&c_%s, %s);" % (n, n, n))
        elif role == "STATUSES":
            nreq = "*" + roles["NREQ"]
            pre.append("MPI_Status *c_%s = nm_f_statuses_alloc(%s, %s);" % (n, n, nreq))
            acts.append("c_" + n)
            post.append("nm_c2f_statuses(c_%s, %s, %s);" % (n, n, nreq))
        elif role == "FLAG":
            pre.append("int c_%s = 0;" % n)
            acts.append("&c_" + n)
            post.append("*%s = nm_f_logical(c_%s);" % (n, n))
        elif role == "INDEX":
            pre.append("int c_%s = MPI_UNDEFINED;" % n)
            acts.append("&c_" + n)
            post.append("*%s = c_%s == MPI_UNDEFINED ? c_%s : c_%s + 1;" % (n, n, n, n))
        elif role == "INDICES":
            acts.append("(int *)" + n)
            post.append("nm_f_indices_c2f(%s, *%s);" % (n, roles["OUTCOUNT"]))
        elif role in ("OUTCOUNT", "PROVIDED"):
            acts.append("(int *)" + n)
        elif role in ("MSG", "MSGOUT"):
            init = "PMPI_Message_f2c(*%s)" % n if role == "MSG" else "MPI_MESSAGE_NULL"
            pre.append("MPI_Message c_%s = %s;" % (n, init))
            acts.append("&c_" + n)
            post.append("*%s = PMPI_Message_c2f(c_%s);" % (n, n))
        elif role == "NEWCOMM":
            pre.append("MPI_Comm c_%s = MPI_COMM_NULL;" % n)
            acts.append("&c_" + n)
            post.append("*%s = PMPI_Comm_c2f(c_%s);" % (n, n))
        else:
            sys.exit("gen_wrappers: %s: no Fortran conversion for %s %s" % (r["name"], role, t))
    return pre, acts, post


def f_through_c(r, cond):
    """Where cond holds, the Fortran call is the C call: its arguments converted, through the C
    wrapper (where ncclmpi has work: a device buffer, its requests, a window it joins)."""
    pre, acts, post = f_convert(r)
    out = ["    if (NM_UNLIKELY(%s)) {" % cond,
           "        NM_STAT_INC(nm_stats.fcalls_c[NM_FN_%s]);" % r["name"]]
    out += ["        " + s for s in pre]
    out += ["        *ierr = nm_impl_%s(%s);" % (r["name"], ", ".join(acts))]
    out += ["        " + s for s in post]
    return out + ["        return;", "    }"]


def f_wrapper(r):
    n, low = r["name"], r["name"].lower()
    fa = f_args(r)
    ff = ", ".join([f_formal(a) for a in fa] + ["MPI_Fint *ierr"] + ["int " + h for h in f_hidden(r)])
    fact = ", ".join([a["name"] for a in fa] + ["ierr"] + f_hidden(r))
    fn = "NM_FN_%s" % n
    p = r["path"]
    proto = "void pmpi_%s_(%s)" % (low, ff)
    out = ["extern %s NM_WEAK;" % proto,
           "static void nm_f_%s(%s)" % (low, ff), "{",
           "    NM_COUNT_FCALL(%s);" % fn]
    forward = "NM_F_FORWARD(pmpi_%s_, \"%s\", %s);" % (low, n, fact)
    roles = {a["role"]: a["name"] for a in r["args"]}
    if p == "PASS":
        out += ["    if (NM_UNLIKELY(nm_hot.queued)) nm_flush_fn(%s);" % fn, "    " + forward]
    elif p == "SYNC":
        blocking = "0" if r["flags"] == "NB" else "1"
        out += ["    if (NM_UNLIKELY(nm_hot.slow)) nm_sync(%s, PMPI_Comm_f2c(*%s), %s);" % (fn, roles["COMM"], blocking),
                "    " + forward]
    elif p == "WIN":
        out += f_through_c(r, win_cond(r, True))
        out += ["    if (NM_UNLIKELY(nm_hot.queued)) nm_flush_fn(%s);" % fn, "    " + forward]
    elif p in ("RMA", "PART"):  # off the host fast path: the C wrapper decides
        out += f_through_c(r, "!nm_host_fast()")
        out += ["    " + forward]
    elif p == "REJECT":
        bufs = reject_bufs(r, True)
        out += ["    if (NM_UNLIKELY(!nm_host_fast())) {",
                "        const nm_rbuf_t b[%d] = {%s};" % (len(bufs), ", ".join(bufs)),
                "        if (NM_UNLIKELY(nm_reject_device(b, %d))) {" % len(bufs)]
        out += ["            " + s for s in reject_resets(r, True)]
        out += ["            *ierr = %s;" % reject_raise(r, True),
                "            return;",
                "        }",
                "        nm_trace_call(%s);" % fn,
                "        if (NM_UNLIKELY(nm_hot.queued)) nm_flush();",
                "    }",
                "    " + forward]
    elif p == "STAGE":
        req = first_roles(r).get("REQ")
        call = lambda subst, res: "NM_F_FORWARD(pmpi_%s_, \"%s\", %s);" % (
            low, n, ", ".join([subst.get(a["name"], a["name"]) for a in fa] + [res] + f_hidden(r)))
        body = stage_body(r, True, call,
                          ["MPI_Request c_req = PMPI_Request_f2c(*%s);" % req] if req else [],
                          ["*%s = PMPI_Request_c2f(c_req);" % req] if req else [],
                          lambda v: ["*ierr = %s;" % v, "return;"], reject_resets(r, True))
        out += ["    if (NM_UNLIKELY(!nm_host_fast())) {"]
        out += ["        " + x for x in body]
        out += ["        nm_trace_call(%s);" % fn,
                "        if (NM_UNLIKELY(nm_hot.queued)) nm_flush();",
                "    }",
                "    " + forward]
    elif p == "INIT":
        out += ["    " + forward, "    if (*ierr == MPI_SUCCESS) nm_after_init();", "    nm_trace_call(%s);" % fn]
    elif p == "FINALIZE":
        out += ["    nm_trace_call(%s);" % fn, "    nm_before_finalize();", "    " + forward]
    elif p == "COMMNEW":
        c, nc = roles["COMM"], roles["NEWCOMM"]
        out += ["    if (NM_UNLIKELY(nm_hot.slow)) nm_sync(%s, PMPI_Comm_f2c(*%s), 1);" % (fn, c),
                "    " + forward,
                "    if (*ierr == MPI_SUCCESS) nm_comm_created(PMPI_Comm_f2c(*%s), PMPI_Comm_f2c(*%s));" % (c, nc)]
    else:
        if p == "DATA":
            bufs = [a["name"] for a in r["args"] if a["role"] in ("SBUF", "RBUF", "BUF")]
            cond = "nm_host_fast() || !nm_f_maybe_device(%s, %s)" % (
                bufs[0], bufs[1] if len(bufs) > 1 else "NULL")
            if r.get("everywhere"):  # (through the C wrapper on every rank: c_wrapper)
                cond = "0"
        elif p == "PROBE":  # (with a flush when something is queued)
            cond = "!(nm_hot.queued | nm_envelopes_configured)"
        else:
            cond = "!nm_work_pending()"
        out += f_through_c(r, "!(%s)" % cond)
        if p == "DATA":  # a host call still ends any run of queued nonblocking operations
            out += ["    if (NM_UNLIKELY(nm_hot.queued)) nm_flush_fn(%s);" % fn]
        out += ["    " + forward]
    out += ["}"]
    for sym in ("mpi_%s" % low, "mpi_%s_" % low, "mpi_%s__" % low, "MPI_%s" % n.upper(), "ompi_%s_f" % low):
        out.append("void %s(%s) NM_ALIAS(nm_f_%s);" % (sym, ff, low))
    if n in F08_DIRECT:
        # Open MPI's mpi_f08 module implements these (their LOGICAL argument) by calling the
        # Fortran PMPI symbol directly, past every wrapper: its module procedure is replaced here
        # (the same arguments by reference; ierror is OPTIONAL, so it may be absent)
        out += ["NM_EXPORT void mpi_%s_f08_(%s)" % (low, ff), "{",
                "    MPI_Fint nm_ierr_;",
                "    nm_f_%s(%s);" % (low, fact.replace("ierr", "ierr ? ierr : &nm_ierr_")),
                "}"]
    return "\n".join(out) + "\n"


# Calls that Open MPI's mpi_f08 binding sends straight to pmpi_<name>_ (`nm -D
# libmpi_usempif08.so | grep " U pmpi_"`: the functions with a LOGICAL argument), where they are
# rows of the table. ncclmpi must see them: the tests and probes to move its requests along and to
# see through point-to-point envelopes; the communicator constructors and File_set_atomicity
# (blocking collectives) to launch queued operations first, since a peer may wait for them while
# this rank waits in the real MPI for that peer; Win_test to launch them before it is polled.
F08_DIRECT = {"Test", "Testall", "Testany", "Testsome", "Iprobe", "Improbe", "Request_get_status",
              "Cart_create", "Cart_sub", "Graph_create", "Dist_graph_create", "Dist_graph_create_adjacent",
              "Intercomm_merge", "File_set_atomicity", "Win_test"}


def gen_f(rows):
    out = ["/* Generated by tools/gen_wrappers.py from src/interpose/mpi_api.def. Do not edit. */",
           '#include "interpose/interpose.h"', '#include "interpose/fortran.h"', ""]
    missing = F08_DIRECT - {r["name"] for r in rows}
    if missing:
        sys.exit("gen_wrappers: F08_DIRECT names no row: " + ", ".join(sorted(missing)))
    out += [f_wrapper(r) for r in rows if not r["name"].endswith("_c")]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Coverage: what happens to each intercepted function's device buffers
# ---------------------------------------------------------------------------------------------
COVERAGE_DOC = """\
# ncclmpi coverage: one line per intercepted MPI function (generated by tools/gen_wrappers.py
# from src/interpose/mpi_api.def and src/route/nm_op.h). Columns: function, category, wrapper
# path, operation kind. Host buffers always go to the real MPI. Categories:
#   routed              device buffers run on NCCL where NCCL can (else the staged path); a
#                       persistent collective's (MPI-4 _init) starts each run its nonblocking form
#   point-to-point      device buffers: where envelopes are on (NCCLMPI_P2P_ENVELOPE: ranks on
#                       one node), a contiguous send of NCCLMPI_P2P_ENVELOPE_MIN bytes or more
#                       goes as an envelope through the real MPI and its receiver copies the
#                       payload from the sender's GPU (CUDA IPC); every receive decodes what it
#                       gets; other messages are staged; persistent requests start the call's
#                       nonblocking form there, and neighbourhood collectives run as such
#                       messages (where envelopes reach device memory)
#   staged              device buffers are copied to host and back around the real MPI call
#   staged              (buffered sends, and persistent ones, copied at each MPI_Start;
#                       partitioned communication, a partition copied at MPI_Pready* and at the
#                       MPI_Parrived that finds it, the whole buffer at the completion)
#   rejected-on-device  device buffers fail with MPI_ERR_BUFFER; never passed to the MPI
#   unsupported-on-device  device buffers fail with MPI_ERR_UNSUPPORTED_OPERATION; never passed
#                       to the MPI (the MPI-4 large-count persistent collectives with count
#                       arrays)
#   device-window       one-sided data calls: a target window in device memory is read and
#                       written through CUDA IPC (ranks on one node); device origin buffers with
#                       a host-memory target window are copied through host memory
#   flush-only          no buffer: queued nonblocking device work is launched first (a blocking
#                       collective or constructor may also make its communicator's pending NCCL
#                       communicator), then the real MPI
#   host-only           no buffer: lifecycle and completion calls; ncclmpi completes its own
#                       requests (and copies back staged persistent receives), everything else
#                       goes to the real MPI
# MPI_<Name>_c, MPI-4's large-count forms: on the LARGE path, the category of MPI_<Name>, whose
# call it is while every count fits an int (counted as MPI_<Name>); a count above INT_MAX on a
# device buffer fails with MPI_ERR_COUNT, never passed to the MPI. The forms with per-rank count
# and displacement arrays (v, w) are on the REJECT path.
"""


def op_kinds(nm_op_h):
    """The operation kinds of NM_OPK_TABLE: those whose facts include NM_KF_NCCL, those that
    envelopes concern where no CUDA driver is loaded (NM_KF_RECV, NM_KF_NEIGH), and all of them."""
    text = open(nm_op_h).read()
    table = text[text.index("#define NM_OPK_TABLE"):]
    table = table[:table.index("\n\n")]
    kinds = re.findall(r"X\(\s*(\w+)\s*,\s*\w+\s*,([^)]*)\)", table)
    if not kinds:
        sys.exit("gen_wrappers: no NM_OPK_TABLE rows in " + nm_op_h)
    with_fact = lambda fact: {k for k, facts in kinds if fact in facts}
    return (with_fact("NM_KF_NCCL"), with_fact("NM_KF_RECV") | with_fact("NM_KF_NEIGH"), {k for k, _ in kinds},
            with_fact("NM_KF_COLL"), with_fact("NM_KF_AMBIG"), with_fact("NM_KF_NEIGH"))


def category(r, nccl, coll=(), ambig=()):
    if r["path"] == "LARGE":  # its int form's, while the counts fit an int
        return category(r["base"], nccl, coll, ambig)
    p = r["path"]
    # persistent neighbourhood collectives (PERS REJECT rows); the persistent collectives' starts
    # run their nonblocking form (NM_WHY_PERSISTENT_START): that form's category
    if r["flags"] == "PERS" and p == "REJECT":
        return "unsupported-on-device"
    if p == "REJECT":
        return "rejected-on-device"
    if p == "RMA":
        return "device-window"
    if p in ("STAGE", "PART"):
        return "staged"
    if p == "DATA":
        if r["kind"] in nccl:
            return "routed"
        # the calls env_send.cc sends envelopes from (not buffered; a persistent one restarts
        # its nonblocking form: persistent.cc), and every receive, which decodes what it gets
        receive = r["kind"] in ("RECV", "SENDRECV", "SENDRECV_REPLACE", "MRECV") or r["kind"].startswith("NEIGHBOR_")
        envelope_send = r["kind"] == "SEND" and r["name"] not in ("Bsend", "Ibsend", "Bsend_init")
        return "point-to-point" if receive or envelope_send else "staged"
    if p == "WIN" and r["flags"] == "CORE":
        return "device-window"
    if p in ("PASS", "SYNC", "COMMNEW", "PROBE", "WIN") or (p == "PERSIST" and r["kind"] != "TEST"):
        return "flush-only"
    return "host-only"


def gen_coverage(rows, nccl, coll, ambig=()):
    out = [COVERAGE_DOC.rstrip("\n")]
    w = max(len(r["name"]) for r in rows) + 4
    out += ["%-*s %-21s %-8s %s" % (w, "MPI_" + r["name"], category(r, nccl, coll, ambig), r["path"], r["kind"]) for r in rows]
    return "\n".join(out) + "\n"


def gen_h(rows, nccl, coll, ambig=()):
    out = ["/* Generated by tools/gen_wrappers.py from src/interpose/mpi_api.def. Do not edit. */",
           "#ifndef NM_FN_H", "#define NM_FN_H", "", "typedef enum {"]
    out += ["    NM_FN_%s," % r["name"] for r in rows]
    out += ["    NM_FN_COUNT", "} nm_fn_t;", "",
            "/* X-macro over the table: NM_FN_ROW(Name, PATH, OPKIND, FLAGS) */",
            "#define NM_FN_TABLE(NM_FN_ROW) \\"]
    out += ["    NM_FN_ROW(%s, %s, %s, %s) \\" % (r["name"], r["path"], r["kind"], r["flags"]) for r in rows]
    out += ["", "/* X-macro over the coverage list (coverage.txt): NM_FN_COV(Name, \"category\") */",
            "#define NM_FN_COVERAGE(NM_FN_COV) \\"]
    out += ["    NM_FN_COV(%s, \"%s\") \\" % (r["name"], category(r, nccl, coll, ambig)) for r in rows]
    out += ["", "#endif", ""]
    return "\n".join(out)


def gen_impl_h(rows):
    out = ["/* Generated by tools/gen_wrappers.py from src/interpose/mpi_api.def. Do not edit. */",
           "#ifndef NM_IMPL_H", "#define NM_IMPL_H", "#include <mpi.h>", "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    out += ["int nm_impl_%s(%s);" % (r["name"], formals(r)) for r in rows]
    out += ["", "/* the core's window calls (src/core/tl/rma/window.cc): the whole call where the WIN row's"
            " condition holds */"]
    out += ["int nm_win_%s(%s);" % (r["name"], formals(r)) for r in rows if r["path"] == "WIN"]
    out += ["", "/* the core's hooks of the PERSIST rows (src/core/tl/staged/persistent.cc): 1 when the hook made"
            " the call (*rc its result), 0 when the wrapper calls the real MPI */"]
    out += ["int nm_pers_%s(%s, int *rc);" % (r["name"].lower(), formals(r)) for r in rows if r["path"] == "PERSIST"]
    out += ["", "/* the core's partitioned calls on device buffers (PART rows: src/core/tl/staged/partitioned.cc) */"]
    out += ["int nm_part_%s(%s);" % (r["name"].lower(), formals(r)) for r in rows if r["path"] == "PART"]
    out += ["", "/* the MPI-4 and MPI-4.1 functions of the table that the MPI under us provides */"]
    out += ["#define NM_HAVE_FN_%s 1" % r["name"] for r in rows if r["mpi4"]]
    out += ["", "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    return "\n".join(out)


def gen_list(rows):
    syms = []
    for r in rows:
        n, low = r["name"], r["name"].lower()
        if n.endswith("_c"):  # C only
            syms.append("MPI_" + n)
            continue
        syms += ["MPI_" + n, "mpi_" + low, "mpi_%s_" % low, "mpi_%s__" % low, "MPI_" + n.upper(),
                 "ompi_%s_f" % low]
    return "\n".join(syms) + "\n"


def main():
    argv = sys.argv[1:]
    have = set()
    for a in [a for a in argv if a.startswith("--have=")]:  # the MPI4 rows the MPI under us provides
        have |= set(a[len("--have="):].split())
        argv.remove(a)
    if len(argv) not in (2, 3):
        sys.exit("usage: gen_wrappers.py [--have='Name ...'] mpi_api.def OUTDIR [nm_op.h]")
    rows = read_rows(argv[0])
    unknown = have - {r["name"] for r in rows if r["mpi4"]}
    if unknown:
        sys.exit("gen_wrappers: --have names no MPI4 row: " + " ".join(sorted(unknown)))
    by_name = {r["name"]: r for r in rows}
    for r in rows:
        if r["name"].endswith("_c"):
            r["base"] = by_name.get(r["name"][:-2])
            if r["base"] is None:
                sys.exit("gen_wrappers: %s: no row %s (its int form)" % (r["name"], r["name"][:-2]))
    keep = lambda r: (not r["mpi4"] or r["name"] in have) and (not r["name"].endswith("_c") or keep(r["base"]))
    absent = [r["name"] for r in rows if not keep(r)]
    rows = [r for r in rows if keep(r)]
    outdir = argv[1]
    op_h = argv[2] if len(argv) == 3 else os.path.join(os.path.dirname(os.path.abspath(argv[0])), "..", "route", "nm_op.h")
    nccl, recv_kinds, kinds, coll, ambig, neigh = op_kinds(op_h)
    for r in rows:  # persistent v/w and neighbourhood collectives: ncclmpi's on every rank (route.h, nm_pers_coll_everywhere)
        r["everywhere"] = r["path"] == "DATA" and r["flags"] == "PERS" and (r["kind"] in coll and r["kind"] in ambig or r["kind"] in neigh)
    for r in rows:
        if r["kind"] not in kinds:
            sys.exit("gen_wrappers: %s: unknown operation kind %s" % (r["name"], r["kind"]))
    for name, text in (("nm_fn.h", gen_h(rows, nccl, coll, ambig)), ("nm_impl.h", gen_impl_h(rows)), ("wrap_c.c", gen_c(rows, recv_kinds)),
                       ("wrap_f.c", gen_f(rows)), ("api_list.txt", gen_list(rows)),
                       ("coverage.txt", gen_coverage(rows, nccl, coll, ambig)),
                       ("api_absent.txt", "".join(n + "\n" for n in absent))):
        with open("%s/%s" % (outdir, name), "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
