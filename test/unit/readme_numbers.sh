#!/bin/sh
# readme_numbers.sh SOURCE_DIR: every measured number the README quotes (a number, or a range of
# two, followed by µs, ms, ns, ×, GB/s or "instructions") appears in doc/performance.md's part
# for the current release (above "# The previous release"), on a line with the same unit, and the
# machine the README names next to it (2×H200, 1×H200, 4×H200) is a heading of that part.
S=${1:?usage: readme_numbers.sh SOURCE_DIR}
python3 - "$S/README.md" "$S/doc/performance.md" <<'PY'
import re, sys
readme = open(sys.argv[1], encoding="utf-8").read()
perf = open(sys.argv[2], encoding="utf-8").read()
cut = perf.find("\n# The previous release")
current = perf if cut < 0 else perf[:cut]
lines = current.splitlines()
num = r"\d+(?:\.\d+)?"
unit = r"(µs|ms|ns|×|GB/s|instructions)"
pat = re.compile(r"(%s)(?:\s*[–-]\s*(%s))?\s*(?:extra\s+)?%s" % (num, num, unit))
bad, n = [], 0
def found(x, u):
    tok = re.compile(r"(?<![\d.])%s(?![\d])" % re.escape(x))
    return any(tok.search(l) and u in l for l in lines)
for m in pat.finditer(readme):
    u = m.group(3)
    for x in (m.group(1), m.group(2)):
        if x is None:
            continue
        n += 1
        if not found(x, u):
            bad.append("%s %s (README: ...%s...)" % (x, u, readme[max(0, m.start() - 30):m.end()].replace("\n", " ")))
for mach in set(re.findall(r"\b[1-8]×H[12]00\b", readme)):
    if not re.search(r"^#+ .*%s" % re.escape(mach), current, re.M):
        bad.append("machine %s: no section of the current release names it" % mach)
for b in bad:
    print("readme_numbers: not in doc/performance.md's current release: " + b)
print("readme_numbers: %d numbers with units in README.md, %d not found" % (n, len(bad)))
sys.exit(1 if bad else 0)
PY
