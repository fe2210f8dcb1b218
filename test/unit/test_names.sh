#!/bin/sh
# test_names.sh BUILD_DIR: every CTest test's name starts with one of its labels and an underscore
# (unit_, mpi_, fortran_, gpu_: test/CTestTestfile.cmake.in), so that `ctest -L unit` runs every
# unit_* test and nothing else.
B=${1:?usage: test_names.sh BUILD_DIR}
cd "$B" || exit 1
ctest --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
tests = json.load(sys.stdin)["tests"]
bad = []
for t in tests:
    labels = next((p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"), [])
    prefix = t["name"].split("_", 1)[0]
    if prefix not in labels:
        bad.append("%s (labels: %s)" % (t["name"], ", ".join(labels) or "none"))
for b in bad:
    print("test_names: %s: the name must start with one of its labels and _" % b)
print("test_names: %d tests, %d named against their labels" % (len(tests), len(bad)))
sys.exit(1 if bad or not tests else 0)'
