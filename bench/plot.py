#!/usr/bin/env python3
"""Plot coll_bench CSV files: latency and bus bandwidth per collective, ncclmpi vs raw NCCL vs
staged. Usage: bench/plot.py out.png bench_np1.csv [bench_np4.csv ...] (needs matplotlib)."""
import csv
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


if __name__ == "__main__":
    main()
