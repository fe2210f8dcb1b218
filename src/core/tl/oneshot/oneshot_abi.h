/* ncclmpi: what the one-shot kernels (oneshot_kernels.cuh, built by nvcc into the library's fatbin) and their host side
 * (oneshot.cc) share. Plain C: the kernels see it through nvcc, the library through the host
 * compiler.
 *
 * The window. Every rank of a process group owns one device allocation that every other rank
 * maps (CUDA IPC). For each parity p (calls alternate between two halves, so a call never
 * overwrites data a slow peer may still read from the call before) it holds one slot per rank,
 * and one flag per rank and block:
 *
 *   slot(p, q)     at (p * n + q) * slot_bytes                    rank q's contribution
 *   flag(p, q, b)  at flags_off + ((p * n + q) * NM_OS_MAX_BLOCKS + b) * 8
 *   done counter   at flags_off + 2 * n * NM_OS_MAX_BLOCKS * 8      blocks of this rank's kernel
 *                                                                  that finished (last one resets it)
 *
 * A call with sequence number seq (the same on every rank: one-shot calls are counted per group
 * in issue order) and parity seq & 1 runs one kernel per rank. Block b of rank r writes its share
 * of what each peer needs from it into slot(p, r) of that peer's window (Allreduce, Allgather: its
 * input, to every peer; Reduce: its input, to the root; Reduce_scatter_block: block q of its input
 * to peer q; Bcast: the root's buffer, from the root), then sets flag(p, r, b) = seq in every
 * peer's window (release, system scope), whatever it sent; it waits until its own window's
 * flag(p, q, b) >= seq for every peer q (acquire), and builds its output from its slots and its
 * own input: reductions combine ranks 0, 1, ..., n-1 in that order, so every rank computes the
 * same bits. When done_flag is set, the kernel's last block to finish writes
 * done_ticket there (host-mapped memory: the call's completion, with no stream operation after
 * the kernel). */
#ifndef NM_ONESHOT_ABI_H
#define NM_ONESHOT_ABI_H

#define NM_OS_MAX_RANKS 8
#define NM_OS_MAX_BLOCKS 32
#define NM_OS_THREADS 256

/* element kinds: one kernel each */
enum {
    NM_OS_I8, NM_OS_U8, NM_OS_I16, NM_OS_U16, NM_OS_I32, NM_OS_U32, NM_OS_I64, NM_OS_U64,
    NM_OS_F32, NM_OS_F64,
    /* value-index pairs for MINLOC/MAXLOC, packed: the value, then an int (MPI's packed form) */
    NM_OS_PAIR_F32, NM_OS_PAIR_F64, NM_OS_PAIR_I64, NM_OS_PAIR_I32, NM_OS_PAIR_I16,
    NM_OS_NTYPES
};

/* collectives (nm_os_args_t.coll) */
enum { NM_OS_ALLREDUCE, NM_OS_REDUCE, NM_OS_REDUCE_SCATTER_BLOCK, NM_OS_BCAST, NM_OS_ALLGATHER };

/* ops */
enum {
    NM_OS_SUM, NM_OS_PROD, NM_OS_MIN, NM_OS_MAX, NM_OS_LAND, NM_OS_LOR, NM_OS_LXOR,
    NM_OS_BAND, NM_OS_BOR, NM_OS_BXOR, NM_OS_MINLOC, NM_OS_MAXLOC, NM_OS_NOPS
};

typedef struct nm_os_args {
    char *win[NM_OS_MAX_RANKS];        /* every rank's window as mapped in this process */
    const char *in;                    /* this rank's contribution (dense) */
    char *out;                         /* the result (dense); may equal in */
    unsigned long long seq;            /* this call's number (>= 1) */
    unsigned long long count;          /* elements */
    unsigned long long slot_bytes;     /* bytes of one slot */
    unsigned long long flags_off;      /* where the flags start in a window */
    volatile unsigned int *abort_word; /* host-mapped: nonzero makes waiting blocks give up */
    unsigned long long *done_flag;     /* host-mapped completion flag, or NULL */
    unsigned long long done_ticket;
    int n, rank, op, esize;            /* esize: bytes of one element (1 for data movement) */
    int coll, root;                    /* NM_OS_ALLREDUCE...; the root of Reduce and Bcast */
} nm_os_args_t;

/* kernel names, indexed by element kind */
#define NM_OS_KERNEL_NAMES                                                                      \
    "nm_os_allreduce_i8", "nm_os_allreduce_u8", "nm_os_allreduce_i16", "nm_os_allreduce_u16", \
    "nm_os_allreduce_i32", "nm_os_allreduce_u32", "nm_os_allreduce_i64", "nm_os_allreduce_u64", \
    "nm_os_allreduce_f32", "nm_os_allreduce_f64", "nm_os_allreduce_pair_f32",                   \
    "nm_os_allreduce_pair_f64", "nm_os_allreduce_pair_i64", "nm_os_allreduce_pair_i32",         \
    "nm_os_allreduce_pair_i16"
#define NM_OS_MOVE_KERNEL "nm_os_move" /* Bcast and Allgather: bytes */

/* Ranks sharing a GPU (src/core/tl/shared/shared_gpu.cc): one kernel per rank combines the n
 * contributions in[0], ..., in[n-1] (in that order: the same bits on every rank) into out. No
 * flags: the host orders the contributions before the launch. A communicator of at most
 * NM_SH_MAX_RANKS ranks (several ranks on each of a node's GPUs). */
#define NM_SH_MAX_RANKS 32
typedef struct nm_sh_args {
    const char *in[NM_SH_MAX_RANKS];
    char *out;
    unsigned long long count; /* elements */
    int n, op, esize;
} nm_sh_args_t;

#define NM_SH_KERNEL_NAMES                                                                      \
    "nm_sh_reduce_i8", "nm_sh_reduce_u8", "nm_sh_reduce_i16", "nm_sh_reduce_u16",               \
    "nm_sh_reduce_i32", "nm_sh_reduce_u32", "nm_sh_reduce_i64", "nm_sh_reduce_u64",             \
    "nm_sh_reduce_f32", "nm_sh_reduce_f64", "nm_sh_reduce_pair_f32", "nm_sh_reduce_pair_f64",   \
    "nm_sh_reduce_pair_i64", "nm_sh_reduce_pair_i32", "nm_sh_reduce_pair_i16"

#endif
