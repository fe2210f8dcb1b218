! ncclmpi Fortran integration test on host buffers, built three times from this file:
!   f_mpif    (default)     include 'mpif.h'
!   f_usempi  -DUSE_MPI     use mpi
!   f_f08     -DUSE_F08     use mpi_f08: handles are derived types, statuses type(MPI_Status),
!                           ierror optional (omitted on one call)
!
! Collectives, point-to-point and communicator splitting on host buffers, every result checked
! against a value computed in closed form from rank and size; outputs are poisoned before each
! call. When libncclmpi is in the process, the Fortran-entry counters of the functions called
! (ncclmpi_get_stats(...).fortran_calls, read through stats_helper.c) must have grown by exactly
! the number of calls made, which proves ncclmpi saw the Fortran calls.
!
! usage: f_<binding> [--expect-ncclmpi]   (or NCCLMPI_TEST_EXPECT=1): libncclmpi absent is a failure
program f_host
#if defined(USE_F08)
  use mpi_f08
#elif defined(USE_MPI)
  use mpi
#endif
  use, intrinsic :: iso_c_binding, only: c_char, c_long_long, c_int, c_null_char
  implicit none
#if !defined(USE_F08) && !defined(USE_MPI)
  include 'mpif.h'
#endif

#include "nmt_stats.inc"

#if defined(USE_F08)
  character(len=*), parameter :: PROG = 'f_f08'
#elif defined(USE_MPI)
  character(len=*), parameter :: PROG = 'f_usempi'
#else
  character(len=*), parameter :: PROG = 'f_mpif'
#endif
  integer, parameter :: POISON = -999
  double precision, parameter :: DPOISON = -1.0d300
  ! counted functions: K_* index into FN, NCALL counts the calls this program makes
  integer, parameter :: NF = 16
  integer, parameter :: K_INIT = 1, K_ALLREDUCE = 2, K_REDUCE = 3, K_BCAST = 4, K_ALLGATHER = 5, &
       K_ALLTOALL = 6, K_GATHERV = 7, K_SCATTER = 8, K_ISEND = 9, K_IRECV = 10, K_WAITALL = 11, &
       K_SENDRECV = 12, K_IALLREDUCE = 13, K_WAIT = 14, K_COMM_SPLIT = 15, K_BARRIER = 16
  character(len=12), parameter :: FN(NF) = [character(len=12) :: 'Init', 'Allreduce', 'Reduce', &
       'Bcast', 'Allgather', 'Alltoall', 'Gatherv', 'Scatter', 'Isend', 'Irecv', 'Waitall', &
       'Sendrecv', 'Iallreduce', 'Wait', 'Comm_split', 'Barrier']
  integer(c_long_long) :: base(NF), ncall(NF), now, cnow

  integer :: ierr, rank, nproc, i, j, k, root, left, right, nerr, gerr, cnt
  integer :: color, key, subrank, subsize, want
#ifdef USE_F08
  type(MPI_Comm) :: sub
#else
  integer :: sub
#endif
  integer :: ibuf(8), sbuf(8), rbuf(8)
  integer, allocatable :: sa(:), ra(:), counts(:), displs(:)
  double precision :: dsend(3), drecv(3)
#ifdef USE_F08
  type(MPI_Request) :: reqs(2), req
  type(MPI_Status) :: sts(2), st
#else
  integer :: reqs(2), req, sts(MPI_STATUS_SIZE, 2), st(MPI_STATUS_SIZE)
#endif
  logical :: expect, have, flag
  integer, allocatable :: pa(:), pb(:)
#ifdef USE_F08
  type(MPI_Message) :: msg
#else
  integer :: msg
#endif

  nerr = 0
  rank = -1
  ncall = 0
  expect = expect_requested()

  call MPI_Init(ierr)
  call chk_rc(ierr, K_INIT, 'MPI_Init')
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc, ierr)
  left = mod(rank - 1 + nproc, nproc)
  right = mod(rank + 1, nproc)

  have = nmt_have_ncclmpi() /= 0
  if (expect .and. .not. have) then
    call fail('libncclmpi is not in the process but --expect-ncclmpi/NCCLMPI_TEST_EXPECT=1 was given')
  end if
  do k = 1, NF
    base(k) = nmt_fortran_calls(trim(FN(k))//c_null_char)
  end do
  if (have) then
    ! MPI_Init was entered once, through the Fortran entry point, before the baseline
    call chk_i8(base(K_INIT), 1_c_long_long, 'fortran_calls(Init) after MPI_Init')
  end if
  ncall(K_INIT) = 0
  allocate(sa(max(2 * nproc, 8)), ra(max(2 * nproc, 8)), counts(nproc), displs(nproc))

  ! ---- Allreduce: integer SUM, double SUM, then MAX and SUM in place ----
  do i = 1, 4
    sbuf(i) = rank + i
  end do
  rbuf = POISON
  call MPI_Allreduce(sbuf, rbuf, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_ALLREDUCE, 'MPI_Allreduce int sum')
  do i = 1, 4
    call chk(rbuf(i), nproc * i + nproc * (nproc - 1) / 2, 'Allreduce int sum')
  end do
  call chk(rbuf(5), POISON, 'Allreduce wrote past count')

  do i = 1, 3
    dsend(i) = 0.5d0 * i * (rank + 1)
  end do
  drecv = DPOISON
  call MPI_Allreduce(dsend, drecv, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_ALLREDUCE, 'MPI_Allreduce double sum')
  do i = 1, 3
    call chk_d(drecv(i), 0.5d0 * i * (nproc * (nproc + 1) / 2), 'Allreduce double sum')
  end do

  ibuf = POISON
  ibuf(1) = 3 * rank
  ibuf(2) = -rank
  call MPI_Allreduce(MPI_IN_PLACE, ibuf, 2, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_ALLREDUCE, 'MPI_Allreduce in place max')
  call chk(ibuf(1), 3 * (nproc - 1), 'Allreduce in place max (1)')
  call chk(ibuf(2), 0, 'Allreduce in place max (2)')
  call chk(ibuf(3), POISON, 'Allreduce in place wrote past count')
  ibuf(1) = 2 * rank + 1
  call MPI_Allreduce(MPI_IN_PLACE, ibuf, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_ALLREDUCE, 'MPI_Allreduce in place sum')
  call chk(ibuf(1), nproc * nproc, 'Allreduce in place sum')

  ! ---- Reduce SUM to root size-1 ----
  root = nproc - 1
  do i = 1, 4
    sbuf(i) = (rank + 1) * i
  end do
  rbuf = POISON
  call MPI_Reduce(sbuf, rbuf, 4, MPI_INTEGER, MPI_SUM, root, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_REDUCE, 'MPI_Reduce')
  if (rank == root) then
    do i = 1, 4
      call chk(rbuf(i), i * nproc * (nproc + 1) / 2, 'Reduce sum at root')
    end do
  end if

  ! ---- Bcast from a non-zero root (rank 1; rank 0 when alone) ----
  root = mod(1, nproc)
  ibuf = POISON
  if (rank == root) then
    do i = 1, 5
      ibuf(i) = 1000 * root + 7 + i
    end do
  end if
  call MPI_Bcast(ibuf, 5, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_BCAST, 'MPI_Bcast')
  do i = 1, 5
    call chk(ibuf(i), 1000 * root + 7 + i, 'Bcast')
  end do
  call chk(ibuf(6), POISON, 'Bcast wrote past count')

  ! ---- Allgather: 2 integers per rank ----
  sbuf(1) = 10 * rank
  sbuf(2) = 10 * rank + 1
  ra = POISON
  call MPI_Allgather(sbuf, 2, MPI_INTEGER, ra, 2, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_ALLGATHER, 'MPI_Allgather')
  do j = 0, nproc - 1
    call chk(ra(2 * j + 1), 10 * j, 'Allgather (1)')
    call chk(ra(2 * j + 2), 10 * j + 1, 'Allgather (2)')
  end do

  ! ---- Alltoall: one integer to each rank ----
  do j = 0, nproc - 1
    sa(j + 1) = 100 * rank + j
  end do
  ra = POISON
  call MPI_Alltoall(sa, 1, MPI_INTEGER, ra, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_ALLTOALL, 'MPI_Alltoall')
  do j = 0, nproc - 1
    call chk(ra(j + 1), 100 * j + rank, 'Alltoall')
  end do

  ! ---- Gatherv to root 0: rank j sends j+1 integers; blocks one slot apart at the root ----
  do j = 0, nproc - 1
    counts(j + 1) = j + 1
    displs(j + 1) = j * (j + 1) / 2 + j
  end do
  deallocate(ra)
  allocate(ra(displs(nproc) + counts(nproc) + 1))
  do k = 1, rank + 1
    sa(k) = 1000 * rank + k
  end do
  ra = POISON
  call MPI_Gatherv(sa, rank + 1, MPI_INTEGER, ra, counts, displs, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_GATHERV, 'MPI_Gatherv')
  if (rank == 0) then
    do j = 0, nproc - 1
      do k = 1, j + 1
        call chk(ra(displs(j + 1) + k), 1000 * j + k, 'Gatherv block')
      end do
      call chk(ra(displs(j + 1) + j + 2), POISON, 'Gatherv wrote into a gap')
    end do
  end if
  deallocate(ra)
  allocate(ra(max(2 * nproc, 8)))

  ! ---- Scatter from root size-1: 2 integers per rank ----
  root = nproc - 1
  sa = POISON
  if (rank == root) then
    do j = 0, nproc - 1
      sa(2 * j + 1) = 7 * j + 1
      sa(2 * j + 2) = 7 * j + 2
    end do
  end if
  rbuf = POISON
  call MPI_Scatter(sa, 2, MPI_INTEGER, rbuf, 2, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_SCATTER, 'MPI_Scatter')
  call chk(rbuf(1), 7 * rank + 1, 'Scatter (1)')
  call chk(rbuf(2), 7 * rank + 2, 'Scatter (2)')
  call chk(rbuf(3), POISON, 'Scatter wrote past count')

  ! ---- Isend/Irecv ring + Waitall with statuses ----
  rbuf = POISON
  sbuf(1) = rank
  sbuf(2) = rank * rank
  sbuf(3) = 42
#ifdef USE_F08
  sts(:)%MPI_SOURCE = POISON
  sts(:)%MPI_TAG = POISON
#else
  sts = POISON
#endif
  call MPI_Irecv(rbuf, 3, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, reqs(1), ierr)
  call chk_rc(ierr, K_IRECV, 'MPI_Irecv')
  call MPI_Isend(sbuf, 3, MPI_INTEGER, right, 100 + rank, MPI_COMM_WORLD, reqs(2), ierr)
  call chk_rc(ierr, K_ISEND, 'MPI_Isend')
  call MPI_Waitall(2, reqs, sts, ierr)
  call chk_rc(ierr, K_WAITALL, 'MPI_Waitall')
  call chk(rbuf(1), left, 'Irecv data (1)')
  call chk(rbuf(2), left * left, 'Irecv data (2)')
  call chk(rbuf(3), 42, 'Irecv data (3)')
  call chk(rbuf(4), POISON, 'Irecv wrote past count')
#ifdef USE_F08
  call chk(sts(1)%MPI_SOURCE, left, 'Waitall status MPI_SOURCE')
  call chk(sts(1)%MPI_TAG, 100 + left, 'Waitall status MPI_TAG')
  call MPI_Get_count(sts(1), MPI_INTEGER, cnt, ierr)
#else
  call chk(sts(MPI_SOURCE, 1), left, 'Waitall status MPI_SOURCE')
  call chk(sts(MPI_TAG, 1), 100 + left, 'Waitall status MPI_TAG')
  call MPI_Get_count(sts(:, 1), MPI_INTEGER, cnt, ierr)
#endif
  call chk(cnt, 3, 'Get_count of the Waitall status')
#ifdef USE_F08
  call chk(reqs(1)%MPI_VAL, MPI_REQUEST_NULL%MPI_VAL, 'Waitall freed the receive request')
  call chk(reqs(2)%MPI_VAL, MPI_REQUEST_NULL%MPI_VAL, 'Waitall freed the send request')
#else
  call chk(reqs(1), MPI_REQUEST_NULL, 'Waitall freed the receive request')
  call chk(reqs(2), MPI_REQUEST_NULL, 'Waitall freed the send request')
#endif

  ! again with explicit source/tag and MPI_STATUSES_IGNORE
  rbuf = POISON
  sbuf(1) = 5 * rank + 3
  call MPI_Irecv(rbuf, 1, MPI_INTEGER, left, 200 + left, MPI_COMM_WORLD, reqs(1), ierr)
  call chk_rc(ierr, K_IRECV, 'MPI_Irecv (2)')
  call MPI_Isend(sbuf, 1, MPI_INTEGER, right, 200 + rank, MPI_COMM_WORLD, reqs(2), ierr)
  call chk_rc(ierr, K_ISEND, 'MPI_Isend (2)')
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  call chk_rc(ierr, K_WAITALL, 'MPI_Waitall (statuses ignored)')
  call chk(rbuf(1), 5 * left + 3, 'Irecv data, statuses ignored')
#ifdef USE_F08
  call chk(reqs(1)%MPI_VAL, MPI_REQUEST_NULL%MPI_VAL, 'Waitall (2) freed the receive request')
#else
  call chk(reqs(1), MPI_REQUEST_NULL, 'Waitall (2) freed the receive request')
#endif

  ! ---- Sendrecv: right-shift with status ----
  sbuf(1) = rank + 5
  sbuf(2) = -rank
  rbuf = POISON
#ifdef USE_F08
  st%MPI_SOURCE = POISON
  st%MPI_TAG = POISON
#else
  st = POISON
#endif
  call MPI_Sendrecv(sbuf, 2, MPI_INTEGER, right, 300 + rank, rbuf, 2, MPI_INTEGER, left, MPI_ANY_TAG, &
       MPI_COMM_WORLD, st, ierr)
  call chk_rc(ierr, K_SENDRECV, 'MPI_Sendrecv')
  call chk(rbuf(1), left + 5, 'Sendrecv data (1)')
  call chk(rbuf(2), -left, 'Sendrecv data (2)')
  call chk(rbuf(3), POISON, 'Sendrecv wrote past count')
#ifdef USE_F08
  call chk(st%MPI_SOURCE, left, 'Sendrecv status MPI_SOURCE')
  call chk(st%MPI_TAG, 300 + left, 'Sendrecv status MPI_TAG')
#else
  call chk(st(MPI_SOURCE), left, 'Sendrecv status MPI_SOURCE')
  call chk(st(MPI_TAG), 300 + left, 'Sendrecv status MPI_TAG')
#endif

  ! ---- Probe, Mprobe, Iprobe from the left: a large message (tag 31), then a small one (tag 32);
  !      probing the small one first must not let it overtake the large one for MPI_ANY_TAG ----
  allocate(pa(2000), pb(2000))
  do i = 1, 2000
    pa(i) = rank * 10000 + i
  end do
  call MPI_Isend(pa, 2000, MPI_INTEGER, right, 31, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(pa, 3, MPI_INTEGER, right, 32, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Probe(left, 32, MPI_COMM_WORLD, st, ierr)
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call chk(cnt, 3, 'Probe count of the small message')
  pb = POISON
  call MPI_Recv(pb, 2000, MPI_INTEGER, left, MPI_ANY_TAG, MPI_COMM_WORLD, st, ierr)
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call chk(cnt, 2000, 'MPI_ANY_TAG after Probe gets the older, large message: count')
  call chk(pb(2000), left * 10000 + 2000, 'large message data')
  call MPI_Mprobe(left, 32, MPI_COMM_WORLD, msg, st, ierr)
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call chk(cnt, 3, 'Mprobe count')
  pb = POISON
  call MPI_Mrecv(pb, 2000, MPI_INTEGER, msg, st, ierr)
  call chk(pb(3), left * 10000 + 3, 'Mrecv data')
  call chk(pb(4), POISON, 'Mrecv wrote past the message')
  call MPI_Waitall(2, reqs, sts, ierr)
  call MPI_Isend(pa, 2000, MPI_INTEGER, right, 33, MPI_COMM_WORLD, reqs(1), ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Iprobe(left, 33, MPI_COMM_WORLD, flag, st, ierr)
  end do
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call chk(cnt, 2000, 'Iprobe count of a large message')
  call MPI_Recv(pb, 2000, MPI_INTEGER, left, 33, MPI_COMM_WORLD, st, ierr)
  call chk(pb(1000), left * 10000 + 1000, 'Recv after Iprobe data')
  ! an Irecv completed by an MPI_Test loop (with mpi_f08, Open MPI's MPI_Test goes to its PMPI
  ! layer directly: ncclmpi replaces that module procedure so that its own requests move on)
  call MPI_Irecv(pb, 2000, MPI_INTEGER, left, 34, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Send(pa, 2000, MPI_INTEGER, right, 34, MPI_COMM_WORLD, ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Test(reqs(2), flag, st, ierr)
  end do
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call chk(cnt, 2000, 'Test loop count')
  call chk(pb(2000), left * 10000 + 2000, 'Test loop data')
  call MPI_Wait(reqs(1), st, ierr)
  deallocate(pa, pb)
  ! (counted functions this section called)
  ncall(K_ISEND) = ncall(K_ISEND) + 3
  ncall(K_IRECV) = ncall(K_IRECV) + 1
  ncall(K_WAITALL) = ncall(K_WAITALL) + 1
  ncall(K_WAIT) = ncall(K_WAIT) + 1

  ! ---- Iallreduce + Wait ----
  sbuf(1) = rank + 1
  sbuf(2) = 1
  rbuf = POISON
  call MPI_Iallreduce(sbuf, rbuf, 2, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, req, ierr)
  call chk_rc(ierr, K_IALLREDUCE, 'MPI_Iallreduce')
  call MPI_Wait(req, st, ierr)
  call chk_rc(ierr, K_WAIT, 'MPI_Wait')
  call chk(rbuf(1), nproc, 'Iallreduce max (1)')
  call chk(rbuf(2), 1, 'Iallreduce max (2)')
  call chk(rbuf(3), POISON, 'Iallreduce wrote past count')
#ifdef USE_F08
  call chk(req%MPI_VAL, MPI_REQUEST_NULL%MPI_VAL, 'Wait freed the Iallreduce request')
#else
  call chk(req, MPI_REQUEST_NULL, 'Wait freed the Iallreduce request')
#endif

  ! ---- Comm_split by parity, reversed key; collectives on the new communicator ----
  color = mod(rank, 2)
  key = nproc - rank
  call MPI_Comm_split(MPI_COMM_WORLD, color, key, sub, ierr)
  call chk_rc(ierr, K_COMM_SPLIT, 'MPI_Comm_split')
  call MPI_Comm_rank(sub, subrank, ierr)
  call MPI_Comm_size(sub, subsize, ierr)
  call chk(subsize, (nproc - color + 1) / 2, 'Comm_split size')
  call chk(subrank, (nproc - 1 - rank) / 2, 'Comm_split rank (reverse key order)')
  want = 0
  do j = color, nproc - 1, 2
    want = want + j
  end do
  ibuf = POISON
  call MPI_Allreduce(rank, ibuf, 1, MPI_INTEGER, MPI_SUM, sub, ierr)
  call chk_rc(ierr, K_ALLREDUCE, 'MPI_Allreduce on split comm')
  call chk(ibuf(1), want, 'Allreduce on split comm')
  ! sub-rank 0 is the highest world rank of this parity
  ibuf = POISON
  if (subrank == 0) ibuf(1) = 50 + rank
  call MPI_Bcast(ibuf, 1, MPI_INTEGER, 0, sub, ierr)
  call chk_rc(ierr, K_BCAST, 'MPI_Bcast on split comm')
  call chk(ibuf(1), 50 + color + 2 * ((nproc - 1 - color) / 2), 'Bcast on split comm')
  call MPI_Comm_free(sub, ierr)

#ifdef USE_F08
  call MPI_Barrier(MPI_COMM_WORLD) ! ierror omitted
  call chk_rc(MPI_SUCCESS, K_BARRIER, 'MPI_Barrier')
#else
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call chk_rc(ierr, K_BARRIER, 'MPI_Barrier')
#endif

  ! ---- ncclmpi saw every Fortran call exactly once ----
  if (have) then
    do k = 1, NF
      now = nmt_fortran_calls(trim(FN(k))//c_null_char)
      call chk_i8(now - base(k), ncall(k), 'fortran_calls('//trim(FN(k))//') increase')
    end do
    if (rank == 0) then
      now = nmt_fortran_calls('Allreduce'//c_null_char)
      cnow = nmt_c_calls('Allreduce'//c_null_char)
      write(*, '(a,a,i0,a,i0)') PROG, ': ncclmpi counters: Allreduce fortran_calls=', now, ' calls(C)=', cnow
    end if
  else if (rank == 0) then
    write(*, '(a,a)') PROG, ': libncclmpi not loaded; counter checks skipped'
  end if

  call MPI_Allreduce(nerr, gerr, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) gerr = max(nerr, 1)
  if (rank == 0) then
    if (gerr == 0) then
      write(*, '(a,a,i0,a)') PROG, ': PASS (', nproc, ' ranks)'
    else
      write(*, '(a,a,i0,a)') PROG, ': FAIL (', gerr, ' failed checks)'
    end if
  end if
  call MPI_Finalize(ierr)
  if (gerr /= 0 .or. nerr /= 0) stop 1

contains

  logical function expect_requested()
    character(len=64) :: arg
    integer :: n, stat
    expect_requested = .false.
    do n = 1, command_argument_count()
      call get_command_argument(n, arg)
      if (trim(arg) == '--expect-ncclmpi') expect_requested = .true.
    end do
    call get_environment_variable('NCCLMPI_TEST_EXPECT', arg, status=stat)
    if (stat == 0 .and. trim(arg) /= '' .and. trim(arg) /= '0') expect_requested = .true.
  end function expect_requested

  subroutine fail(msg)
    character(len=*), intent(in) :: msg
    nerr = nerr + 1
    write(*, '(a,a,i0,a,a)') PROG, ' [rank ', rank, '] FAIL: ', msg
  end subroutine fail

  subroutine chk(got, expected, msg)
    integer, intent(in) :: got, expected
    character(len=*), intent(in) :: msg
    character(len=64) :: detail
    if (got /= expected) then
      write(detail, '(a,i0,a,i0,a)') ' (got ', got, ', expected ', expected, ')'
      call fail(msg//trim(detail))
    end if
  end subroutine chk

  subroutine chk_i8(got, expected, msg)
    integer(c_long_long), intent(in) :: got, expected
    character(len=*), intent(in) :: msg
    character(len=64) :: detail
    if (got /= expected) then
      write(detail, '(a,i0,a,i0,a)') ' (got ', got, ', expected ', expected, ')'
      call fail(msg//trim(detail))
    end if
  end subroutine chk_i8

  subroutine chk_d(got, expected, msg)
    double precision, intent(in) :: got, expected
    character(len=*), intent(in) :: msg
    character(len=80) :: detail
    if (got /= expected) then
      write(detail, '(a,es14.6,a,es14.6,a)') ' (got ', got, ', expected ', expected, ')'
      call fail(msg//trim(detail))
    end if
  end subroutine chk_d

  ! ierror of an MPI call; also counts the call against the Fortran-entry counter of FN(kfn)
  subroutine chk_rc(rc, kfn, msg)
    integer, intent(in) :: rc, kfn
    character(len=*), intent(in) :: msg
    ncall(kfn) = ncall(kfn) + 1
    call chk(rc, MPI_SUCCESS, msg//' ierror')
  end subroutine chk_rc

end program f_host
