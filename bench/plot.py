#!/usr/bin/env python3
"""Plot benchmark CSV files (needs matplotlib).
coll_bench CSVs: latency and bus bandwidth per collective, ncclmpi vs raw NCCL vs staged; the ratio
to raw NCCL's time under the latency. p2p_bench CSVs: latency per pattern, and the time as a ratio
to raw NCCL's. Usage: bench/plot.py out.png file.csv [file.csv ...]"""
import csv
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[2].rsplit("=", 1)[-1]) as f:
        if "pattern" in f.readline().split(","):
            return plot_p2p(plt, sys.argv[1], sys.argv[2:])
    rows = defaultdict(list)  # (coll, ranks) -> rows
    for path in sys.argv[2:]:
        with open(path) as f:
            for r in csv.DictReader(f):
                rows[(r["coll"], int(r["ranks"]))].append(r)
    colls = sorted({c for c, _ in rows})
    fig, axes = plt.subplots(2, len(colls), figsize=(4.2 * len(colls), 7.5), squeeze=False)
    for j, coll in enumerate(colls):
        for (c, ranks), rs in sorted(rows.items()):
            if c != coll:
                continue
            x = [int(r["bytes"]) for r in rs]
            for key, style, label in (("mpi", "-o", "ncclmpi"), ("nccl", "--", "raw NCCL"), ("staged", ":", "staged")):
                lat = [float(r[key + "_us"]) for r in rs]
                bw = [float(r[key + "_busbw_GBs"]) for r in rs]
                pts = [(a, b, c2) for a, b, c2 in zip(x, lat, bw) if b > 0]
                if not pts:
                    continue
                axes[0][j].plot([p[0] for p in pts], [p[1] for p in pts], style, ms=3, label="%s np=%d" % (label, ranks))
                if ranks > 1:
                    axes[1][j].plot([p[0] for p in pts], [p[2] for p in pts], style, ms=3,
                                    label="%s np=%d" % (label, ranks))
        axes[0][j].set_title(coll)
        for i in range(2):
            axes[i][j].set_xscale("log", base=2)
            axes[i][j].grid(True, alpha=0.3)
            axes[i][j].set_xlabel("bytes")
        axes[0][j].set_yscale("log")
        axes[0][j].set_ylabel("latency (us, median)")
        axes[1][j].set_ylabel("bus bandwidth (GB/s)")
        axes[0][j].legend(fontsize=7)
        if axes[1][j].lines:
            axes[1][j].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)
    print("wrote", sys.argv[1])


def plot_p2p(plt, out, paths):
    """p2p_bench: one column per pattern; latency on top, time / raw NCCL's below. A file given as
    LABEL=file.csv adds only its ncclmpi series, named LABEL (another setting in the same job)."""
    rows = defaultdict(list)  # pattern -> rows (later files add the sizes the earlier ones lack)
    extra = []  # (label, pattern -> rows)
    for path in paths:
        if "=" in path:
            label, path = path.rsplit("=", 1)
            e = defaultdict(list)
            with open(path) as f:
                for r in csv.DictReader(f):
                    e[r["pattern"]].append(r)
            extra.append((label, e))
            continue
        with open(path) as f:
            for r in csv.DictReader(f):
                if not any(int(o["bytes"]) == int(r["bytes"]) for o in rows[r["pattern"]]):
                    rows[r["pattern"]].append(r)
    pats = [p for p in ("exchange", "oneway", "ring", "halo3d") if p in rows]
    fig, axes = plt.subplots(2, len(pats), figsize=(4.4 * len(pats), 7.5), squeeze=False)
    ways = (("mpi", "-o", "ncclmpi", "C0"), ("nccl", "--", "raw NCCL", "C1"), ("staged", ":", "staged by hand", "C2"),
            ("ipc", "-.", "CUDA IPC pull (reference)", "C3"))
    for j, pat in enumerate(pats):
        rs = sorted(rows[pat], key=lambda r: int(r["bytes"]))
        x = [int(r["bytes"]) for r in rs]
        for key, style, label, color in ways:
            y = [float(r[key + "_us"]) for r in rs]
            axes[0][j].plot(x, y, style, ms=3, label=label, color=color)
            if key != "nccl":
                axes[1][j].plot(x, [a / float(r["nccl_us"]) for a, r in zip(y, rs)], style, ms=3, label=label,
                                color=color)
        for k, (label, e) in enumerate(extra):
            es = sorted(e.get(pat, []), key=lambda r: int(r["bytes"]))
            if not es:
                continue
            y = [float(r["mpi_us"]) for r in es]
            color = "C%d" % (4 + k)
            axes[0][j].plot([int(r["bytes"]) for r in es], y, "-s", ms=3, label=label, color=color)
            axes[1][j].plot([int(r["bytes"]) for r in es], [a / float(r["nccl_us"]) for a, r in zip(y, es)], "-s", ms=3,
                            label=label, color=color)
        axes[1][j].axhline(1.0, color="grey", lw=0.8)
        axes[0][j].set_title("%s, %s ranks" % (pat, rs[0]["ranks"]))
        for i in range(2):
            axes[i][j].set_xscale("log", base=2)
            axes[i][j].set_yscale("log")
            axes[i][j].grid(True, alpha=0.3)
            axes[i][j].set_xlabel("bytes per message")
            axes[i][j].legend(fontsize=7)
        axes[0][j].set_ylabel("latency (us, median)")
        axes[1][j].set_ylabel("time / raw NCCL's")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
