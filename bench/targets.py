#!/usr/bin/env python3
"""The measured values behind the open performance targets, from one benchmark job's CSV files.

Usage: bench/targets.py ENGINE.csv COLL.csv P2P.csv
  (tools/gpu_check.sh bench writes them as $OUT/engine_npN.csv, bench_npN.csv, p2p_npN.csv)

Prints one line per target: the value, the limit and "met" or "not met". The targets:
  execution engine: 64 x MPI_Iallreduce of 4 KiB + MPI_Waitall (automatic coalescing, and inside
    ncclmpi_group_begin/end) at most 1.2x the same 64 ncclAllReduce in one raw NCCL group and at
    least 4x faster than 64 blocking calls; 20 x Comm_dup+Comm_free after device use at most 2x
    the loop before; bus bandwidth of every collective at least 0.99x raw NCCL's from 1 MiB.
  point-to-point: exchange and one-way stream at least 0.9x raw NCCL's bandwidth from 1 MiB;
    8 B at most 1.5x raw NCCL's time; ring and 6-neighbour halo at most 1.3x raw NCCL's time
    from 64 KiB to 16 MiB.
Rows whose raw NCCL column is missing (ranks sharing a GPU) are left out. Exit status 0."""
import csv
import sys

MIB = 1 << 20


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def verdict(name, value, limit, ok, unit="x"):
    print("%-72s %9.3f%s  (limit %s)  %s" % (name, value, unit, limit, "met" if ok else "NOT MET"))


def engine_rows(path):
    """engine_bench's rows by case; its case names hold commas (quoted since, not in older files):
    the five numeric fields are split off from the right."""
    with open(path) as f:
        lines = f.read().splitlines()[1:]
    out = {}
    for line in lines:
        case, ranks, k, nbytes, us, ratio = line.rsplit(",", 5)
        out[case.strip('"')] = {"us": us, "ratio_to_raw": ratio}
    return out


def engine(path):
    r = engine_rows(path)
    raw = float(r["raw NCCL: 64 allreduce in one group"]["us"])
    blocking = float(r["MPI_Allreduce x64 (blocking)"]["us"])
    for case, what in (("MPI_Iallreduce x64 + MPI_Waitall", "automatic coalescing"),
                       ("ncclmpi_group_begin/end, x64 + Waitall", "ncclmpi_group_begin/end")):
        t = float(r[case]["us"])
        verdict("64 x Iallreduce 4 KiB + Waitall, %s / raw NCCL group" % what, t / raw, "<= 1.2", t / raw <= 1.2)
        verdict("64 blocking Allreduce / the same, %s" % what, blocking / t, ">= 4", blocking / t >= 4)
    churn = r.get("churn ratio")
    if churn:
        c = float(churn["us"])
        verdict("20 x Comm_dup+free after device use / before", c, "<= 2", c <= 2)


def coll(path):
    worst = {}
    for x in rows(path):
        if int(x["bytes"]) < MIB or float(x["nccl_us"]) <= 0:
            continue
        bw = float(x["ratio_bw"])
        if x["coll"] not in worst or bw < worst[x["coll"]][0]:
            worst[x["coll"]] = (bw, int(x["bytes"]))
    for c, (bw, b) in sorted(worst.items()):
        verdict("%s bus bandwidth / raw NCCL, lowest from 1 MiB (at %d B)" % (c, b), bw, ">= 0.99", bw >= 0.99)


def p2p(path):
    by = {}
    for x in rows(path):
        if float(x["nccl_us"]) > 0:
            by.setdefault(x["pattern"], []).append((int(x["bytes"]), float(x["mpi_us"]) / float(x["nccl_us"])))
    for pat in ("exchange", "oneway"):
        big = [(r, b) for b, r in by.get(pat, []) if b >= MIB]
        if big:
            r, b = max(big)
            verdict("%s bandwidth / raw NCCL, lowest from 1 MiB (at %d B)" % (pat, b), 1 / r, ">= 0.9", 1 / r >= 0.9)
    for pat, v in sorted(by.items()):
        small = [r for b, r in v if b == 8]
        if small:
            verdict("%s 8 B time / raw NCCL" % pat, small[0], "<= 1.5", small[0] <= 1.5)
    for pat in ("ring", "halo3d"):
        mid = [(r, b) for b, r in by.get(pat, []) if 64 << 10 <= b <= 16 * MIB]
        if mid:
            r, b = max(mid)
            verdict("%s time / raw NCCL, highest from 64 KiB to 16 MiB (at %d B)" % (pat, b), r, "<= 1.3", r <= 1.3)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    for f, path in zip((engine, coll, p2p), sys.argv[1:]):
        try:
            f(path)
        except (OSError, KeyError, ValueError) as e:
            print("%s: not read (%s)" % (path, e))


if __name__ == "__main__":
    main()
