/* MPI-IO with ncclmpi in the process, on host buffers: every data call (explicit offsets,
 * individual and shared file pointers, collective and not, nonblocking, split collective) and
 * the collective file calls ncclmpi intercepts (File_open, set_size, preallocate, set_view,
 * set_info, set_atomicity, seek_shared, sync, close).
 *
 * One file under $TMPDIR (else /tmp) is cut into regions of P blocks of B ints, one region per
 * way of writing; rank r writes block r of a region (aval(r, region, i)), the ranks make the
 * writes visible (sync, barrier, sync) and each rank reads its ring neighbour's block back (with
 * the shared pointer, a block whose owner it checks from the data). Reads are poisoned first and
 * their statuses checked.
 */
#include "common.h"

static int R, P, next;
static const MPI_Comm W = MPI_COMM_WORLD;
enum { B = 16 };
static MPI_File fh;

static MPI_Offset region_at(int region, int rank) { return ((MPI_Offset)region * P + rank) * B * (MPI_Offset)sizeof(int); }
static void fill(int *v, int region, int rank)
{
    for (int i = 0; i < B; i++) v[i] = aval(rank, region, i);
}
static void visible(void)
{
    OK(File_sync, fh);
    OK(Barrier, W);
    OK(File_sync, fh);
}
#define CHECK_BLOCK(got, region, rank, what)                                                  \
    do {                                                                                      \
        int e_[B];                                                                            \
        fill(e_, region, rank);                                                               \
        CHECK_I(got, e_, B, "%s: block of rank %d in region %d", what, rank, region);         \
    } while (0)
#define CHECK_COUNT(st, what)                                                                 \
    do {                                                                                      \
        int c_ = -1;                                                                          \
        MPI_Get_count(&(st), MPI_INT, &c_);                                                   \
        CHECK(c_ == B, "%s: status count %d", what, c_);                                      \
    } while (0)

/* regions of explicit-offset calls: 0 write_at/read_at, 1 _all, 2 iwrite_at/iread_at,
 * 3 iwrite_at_all/iread_at_all, 4 split collectives */
static void t_explicit(void)
{
    int v[B], got[B];
    MPI_Status st;
    MPI_Request q;
    for (int k = 0; k < 5; k++) {
        fill(v, k, R);
        switch (k) {
        case 0: OK(File_write_at, fh, region_at(k, R), v, B, MPI_INT, &st); break;
        case 1: OK(File_write_at_all, fh, region_at(k, R), v, B, MPI_INT, &st); break;
        case 2:
            OK(File_iwrite_at, fh, region_at(k, R), v, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 3:
            OK(File_iwrite_at_all, fh, region_at(k, R), v, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 4:
            OK(File_write_at_all_begin, fh, region_at(k, R), v, B, MPI_INT);
            OK(File_write_at_all_end, fh, v, &st);
            break;
        }
        CHECK_COUNT(st, "write");
    }
    visible();
    static const char *const what[5] = {"File_read_at", "File_read_at_all", "File_iread_at", "File_iread_at_all",
                                        "File_read_at_all_begin/end"};
    for (int k = 0; k < 5; k++) {
        tu_poison(got, sizeof(got));
        tu_poison_status(&st);
        switch (k) {
        case 0: OK(File_read_at, fh, region_at(k, next), got, B, MPI_INT, &st); break;
        case 1: OK(File_read_at_all, fh, region_at(k, next), got, B, MPI_INT, &st); break;
        case 2:
            OK(File_iread_at, fh, region_at(k, next), got, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 3:
            OK(File_iread_at_all, fh, region_at(k, next), got, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 4:
            OK(File_read_at_all_begin, fh, region_at(k, next), got, B, MPI_INT);
            OK(File_read_at_all_end, fh, got, &st);
            break;
        }
        CHECK_BLOCK(got, k, next, what[k]);
        CHECK_COUNT(st, what[k]);
    }
}

/* individual file pointers, through a view that starts at the rank's block (regions 5..9:
 * write/read, _all, iwrite/iread, iwrite_all/iread_all, split collectives); the reads go
 * through a view of the neighbour's block */
static void t_individual(void)
{
    int v[B], got[B];
    MPI_Status st;
    MPI_Request q;
    for (int k = 5; k < 10; k++) {
        OK(File_set_view, fh, region_at(k, R), MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
        fill(v, k, R);
        switch (k) {
        case 5: OK(File_write, fh, v, B, MPI_INT, &st); break;
        case 6: OK(File_write_all, fh, v, B, MPI_INT, &st); break;
        case 7:
            OK(File_iwrite, fh, v, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 8:
            OK(File_iwrite_all, fh, v, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 9:
            OK(File_write_all_begin, fh, v, B, MPI_INT);
            OK(File_write_all_end, fh, v, &st);
            break;
        }
        CHECK_COUNT(st, "write with the individual pointer");
        MPI_Offset pos = -1;
        MPI_File_get_position(fh, &pos);
        CHECK(pos == B, "individual pointer at %lld after writing %d ints", (long long)pos, B);
    }
    visible();
    static const char *const what[5] = {"File_read", "File_read_all", "File_iread", "File_iread_all",
                                        "File_read_all_begin/end"};
    for (int k = 5; k < 10; k++) {
        OK(File_set_view, fh, region_at(k, next), MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
        tu_poison(got, sizeof(got));
        tu_poison_status(&st);
        switch (k) {
        case 5: OK(File_read, fh, got, B, MPI_INT, &st); break;
        case 6: OK(File_read_all, fh, got, B, MPI_INT, &st); break;
        case 7:
            OK(File_iread, fh, got, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 8:
            OK(File_iread_all, fh, got, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 9:
            OK(File_read_all_begin, fh, got, B, MPI_INT);
            OK(File_read_all_end, fh, got, &st);
            break;
        }
        CHECK_BLOCK(got, k, next, what[k - 5]);
        CHECK_COUNT(st, what[k - 5]);
    }
}

/* the shared file pointer over a region seen as one array of ints: regions 10 (write_shared,
 * any order), 11 (iwrite_shared), 12 (write_ordered: rank order), 13 (split ordered) */
static void t_shared(void)
{
    int v[B], got[B], *owners = (int *)malloc(P * sizeof(int));
    MPI_Status st;
    MPI_Request q;
    for (int k = 10; k < 14; k++) {
        OK(File_set_view, fh, region_at(k, 0), MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
        OK(File_seek_shared, fh, 0, MPI_SEEK_SET);
        fill(v, k, R);
        switch (k) {
        case 10: OK(File_write_shared, fh, v, B, MPI_INT, &st); break;
        case 11:
            OK(File_iwrite_shared, fh, v, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 12: OK(File_write_ordered, fh, v, B, MPI_INT, &st); break;
        case 13:
            OK(File_write_ordered_begin, fh, v, B, MPI_INT);
            OK(File_write_ordered_end, fh, v, &st);
            break;
        }
        CHECK_COUNT(st, "write with the shared pointer");
    }
    visible();
    static const char *const what[4] = {"File_read_shared", "File_iread_shared", "File_read_ordered",
                                        "File_read_ordered_begin/end"};
    for (int k = 10; k < 14; k++) {
        OK(File_set_view, fh, region_at(k, 0), MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
        OK(File_seek_shared, fh, 0, MPI_SEEK_SET);
        tu_poison(got, sizeof(got));
        tu_poison_status(&st);
        switch (k) {
        case 10: OK(File_read_shared, fh, got, B, MPI_INT, &st); break;
        case 11:
            OK(File_iread_shared, fh, got, B, MPI_INT, &q);
            OK(Wait, &q, &st);
            break;
        case 12: OK(File_read_ordered, fh, got, B, MPI_INT, &st); break;
        case 13:
            OK(File_read_ordered_begin, fh, got, B, MPI_INT);
            OK(File_read_ordered_end, fh, got, &st);
            break;
        }
        CHECK_COUNT(st, what[k - 10]);
        if (k >= 12) { /* ordered: rank r reads the r-th block, which rank r wrote */
            CHECK_BLOCK(got, k, R, what[k - 10]);
            continue;
        }
        /* any order: the block is whole, and every block is read by exactly one rank */
        int owner = (got[0] - 1 - k * 100000) / 10000000;
        if (owner < 0 || owner >= P) owner = 0;
        CHECK_BLOCK(got, k, owner, what[k - 10]);
        OK(Allgather, &owner, 1, MPI_INT, owners, 1, MPI_INT, W);
        int *seen = (int *)calloc(P, sizeof(int));
        for (int r = 0; r < P; r++)
            CHECK(owners[r] >= 0 && owners[r] < P && !seen[owners[r]]++, "%s: block of rank %d read twice", what[k - 10],
                  owners[r]);
        free(seen);
    }
    free(owners);
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -1);
    tu_ring(&R, &P, &next, NULL);
    char path[512] = "";
    if (R == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/ncclmpi_more_io.%d.dat", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    }
    OK(Bcast, path, sizeof(path), MPI_CHAR, 0, W);
    if (!OK(File_open, W, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh)) return tu_finalize();
    const MPI_Offset total = region_at(14, 0);
    OK(File_set_size, fh, 0);
    OK(File_preallocate, fh, total);
    MPI_Offset size = -1;
    MPI_File_get_size(fh, &size);
    CHECK(size >= total, "File_preallocate: size %lld, asked for %lld", (long long)size, (long long)total);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "access_style", "read_mostly,write_mostly");
    OK(File_set_info, fh, info);
    MPI_Info_free(&info);
    OK(File_set_atomicity, fh, 0);
    int atom = -1;
    MPI_File_get_atomicity(fh, &atom);
    CHECK(atom == 0, "File_set_atomicity(0): %d", atom);
    t_explicit();
    t_individual();
    t_shared();
    OK(File_close, &fh);
    CHECK(fh == MPI_FILE_NULL, "File_close left the handle set");
    OK(Barrier, W);
    if (R == 0) MPI_File_delete(path, MPI_INFO_NULL);
    return tu_finalize();
}
