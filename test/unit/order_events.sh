#!/bin/sh
# order_events.sh BUILDDIR: where ncclmpi orders its work after the application's, counted on the
# stand-in driver and NCCL (test/unit/fake_cuda.c counts the events recorded on the legacy stream;
# bench/device_overhead makes N device-buffer calls of one kind on one rank, on the NCCL route):
#   - each nonblocking call outside an explicit group records its own point (automatic coalescing
#     keeps every call's place in the application's stream order): N events for N calls;
#   - an explicit group records one, at ncclmpi_group_end: N / 64 for groups of 64;
#   - a blocking call runs on the legacy stream itself: no ordering event; and at MPI_THREAD_SINGLE
#     (the program's MPI_Init) it completes by querying that stream: no event at all. With
#     NCCLMPI_STREAM_QUERY=0 it completes by an event (one rank's communicator uses events, not
#     flags), recorded there: N in all;
#   - NCCLMPI_STREAM_ORDER=0 records none.
b=$1
d="$b/order_events_test"
fail() { echo "order_events: FAIL: $*"; cat "$d/err" 2>/dev/null | tail -20; exit 1; }
prog="$b/bench/device_overhead"
. "$(dirname "$0")/stand_in.sh"
stand_in order_events "$b" "$d" "$prog"
export NCCLMPI_COALESCE_WINDOW=100000  # (every call of a burst queued)
n=640
events() {  # KIND: the legacy-stream events of n calls
  LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$b/.libs/libncclmpi.so" "$prog" $n "$1" >"$d/out" 2>"$d/err" ||
    fail "$1: the run failed"
  grep -q " ok=1 " "$d/out" || fail "$1: the calls did not take the NCCL route: $(cat "$d/out")"
  sed -n 's/.*legacy_events=\([0-9-]*\).*/\1/p' "$d/out"
}
expect() {  # KIND WANT [SETTING]
  got=$(events "$1")
  [ "$got" = "$2" ] || fail "$1${3:+ with $3}: $got events on the legacy stream for $n calls, expected $2"
}
expect burst $n
expect iallreduce $n
expect group $((n / 64))
expect allreduce 0
NCCLMPI_STREAM_QUERY=0 expect allreduce $n NCCLMPI_STREAM_QUERY=0
NCCLMPI_STREAM_ORDER=0 expect burst 0 NCCLMPI_STREAM_ORDER=0
NCCLMPI_STREAM_ORDER=0 expect group 0 NCCLMPI_STREAM_ORDER=0
echo "order_events: $n nonblocking calls record $n points, $((n / 64)) explicit groups of 64 one each, blocking calls none (their completion event with NCCLMPI_STREAM_QUERY=0)"
