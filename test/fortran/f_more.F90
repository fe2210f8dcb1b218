! ncclmpi Fortran test of the entry points added for full MPI-3.1 coverage, on host buffers, built
! for the three bindings like f_host.F90 (f_more_mpif, f_more_usempi -DUSE_MPI, f_more_f08
! -DUSE_F08). It calls functions whose Fortran form has CHARACTER arguments (File_open and
! File_set_view: a file name and a data representation; Pack_external/Unpack_external): gfortran
! passes each string's length as a hidden argument after ierror, which ncclmpi's entry points
! must forward to Open MPI's, or the name arrives with a wrong length. It also calls REJECT-path
! entry points (File_write_at, File_read_at, Put, Get, Reduce_local, Pack_external) and PASS-path
! ones (Win_fence, File_sync, Win_free, File_close) and checks every value and, with ncclmpi in
! the process, that the Fortran-entry counters grew by the number of calls made. The communicator
! constructors with a LOGICAL argument, File_set_atomicity and Win_test are here because Open
! MPI's mpi_f08 module sends them to its Fortran PMPI layer directly: ncclmpi replaces their f08
! procedures (a blocking constructor must launch queued device operations before it waits).
!
! usage: f_more_<binding> [--expect-ncclmpi]
program f_more
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

  integer, parameter :: N = 6, POISON = -999
  integer, parameter :: NF = 21
  character(len=28), parameter :: FN(NF) = [character(len=28) :: 'File_open', 'File_set_view', &
       'File_write_at', 'File_read_at', 'File_sync', 'File_close', 'Pack_external', &
       'Unpack_external', 'Win_create', 'Win_fence', 'Put', 'Get', 'Reduce_local', &
       'File_set_atomicity', 'Win_test', 'Cart_create', 'Cart_sub', 'Graph_create', &
       'Dist_graph_create', 'Dist_graph_create_adjacent', 'Intercomm_merge']
  integer(c_long_long) :: base(NF), ncall(NF), now
  integer :: ierr, rank, nproc, nxt, prv, i, k, nerr, gerr, cnt, pid
  integer :: v(N), got(N), ext(N), back(N), winmem(N), red(N)
  integer :: gidx(4096), gedges(4096), one(1), srcs(1), dsts(1), wts(1), nin, nout, csize, half
  logical :: flag, weighted
  integer(kind=MPI_OFFSET_KIND) :: off
  integer(kind=MPI_ADDRESS_KIND) :: wsize, disp, esize, pos
  character(len=256) :: path, dir
  character(len=16) :: arg
  logical :: expect, have
#ifdef USE_F08
  type(MPI_File) :: fh
  type(MPI_Win) :: win
  type(MPI_Status) :: st
  type(MPI_Comm) :: cart, sub, graph, dgraph, dadj, halfc, inter, merged
  type(MPI_Group) :: wgroup
#else
  integer :: fh, win, st(MPI_STATUS_SIZE)
  integer :: cart, sub, graph, dgraph, dadj, halfc, inter, merged, wgroup
#endif

  nerr = 0
  ncall = 0
  expect = .false.
  do i = 1, command_argument_count()
    call get_command_argument(i, arg)
    if (arg == '--expect-ncclmpi') expect = .true.
  end do
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc, ierr)
  nxt = mod(rank + 1, nproc)
  prv = mod(rank - 1 + nproc, nproc)
  have = nmt_have_ncclmpi() /= 0
  if (expect .and. .not. have) call fail('libncclmpi is not in the process but --expect-ncclmpi was given')
  do k = 1, NF
    base(k) = nmt_fortran_calls(trim(FN(k))//c_null_char)
  end do

  ! ---- MPI-IO: a file name and a data representation (hidden lengths), then rank blocks ----
  call get_environment_variable('TMPDIR', dir, cnt)
  if (cnt == 0) dir = '/tmp'
  ! named after rank 0's process: jobs that run at once (ctest -j) never share the file
  pid = nmt_getpid()
  call MPI_Bcast(pid, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  write (path, '(A,A,I0,A,I0,A)') trim(dir), '/ncclmpi_f_more.', nproc, '.', pid, '.dat'
  call MPI_File_open(MPI_COMM_WORLD, trim(path), ior(MPI_MODE_CREATE, MPI_MODE_RDWR), MPI_INFO_NULL, fh, ierr)
  call rc(ierr, 1, 'MPI_File_open '//trim(path))
  off = 0
  call MPI_File_set_view(fh, off, MPI_INTEGER, MPI_INTEGER, 'native', MPI_INFO_NULL, ierr)
  call rc(ierr, 2, 'MPI_File_set_view native')
  do i = 1, N
    v(i) = 1000 * rank + i
  end do
  off = rank * N
  call MPI_File_write_at(fh, off, v, N, MPI_INTEGER, st, ierr)
  call rc(ierr, 3, 'MPI_File_write_at')
  call MPI_File_sync(fh, ierr)
  call rc(ierr, 5, 'MPI_File_sync')
  call MPI_File_set_atomicity(fh, .false., ierr)
  call rc(ierr, 14, 'MPI_File_set_atomicity')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_File_sync(fh, ierr)
  call rc(ierr, 5, 'MPI_File_sync')
  got = POISON
  off = nxt * N
  call MPI_File_read_at(fh, off, got, N, MPI_INTEGER, st, ierr)
  call rc(ierr, 4, 'MPI_File_read_at')
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call chk(cnt, N, 'File_read_at count')
  do i = 1, N
    call chk(got(i), 1000 * nxt + i, 'File_read_at of the next rank''s block')
  end do
  call MPI_File_close(fh, ierr)
  call rc(ierr, 6, 'MPI_File_close')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) call MPI_File_delete(trim(path), MPI_INFO_NULL, ierr)

  ! ---- external32: a data representation (hidden length) ----
  esize = 4 * N
  pos = 0
  ext = POISON
  call MPI_Pack_external('external32', v, N, MPI_INTEGER, ext, esize, pos, ierr)
  call rc(ierr, 7, 'MPI_Pack_external external32')
  if (pos /= esize) call fail('Pack_external position')
  pos = 0
  back = POISON
  call MPI_Unpack_external('external32', ext, esize, pos, back, N, MPI_INTEGER, ierr)
  call rc(ierr, 8, 'MPI_Unpack_external external32')
  do i = 1, N
    call chk(back(i), v(i), 'Unpack_external round trip')
  end do

  ! ---- one-sided: Put to the next rank, Get from it ----
  winmem = POISON
  wsize = 4 * N
  call MPI_Win_create(winmem, wsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  call rc(ierr, 9, 'MPI_Win_create')
  call MPI_Win_fence(0, win, ierr)
  call rc(ierr, 10, 'MPI_Win_fence')
  disp = 0
  call MPI_Put(v, N, MPI_INTEGER, nxt, disp, N, MPI_INTEGER, win, ierr)
  call rc(ierr, 11, 'MPI_Put')
  call MPI_Win_fence(0, win, ierr)
  call rc(ierr, 10, 'MPI_Win_fence')
  do i = 1, N
    call chk(winmem(i), 1000 * prv + i, 'window after Put from the previous rank')
  end do
  got = POISON
  call MPI_Get(got, N, MPI_INTEGER, nxt, disp, N, MPI_INTEGER, win, ierr)
  call rc(ierr, 12, 'MPI_Get')
  call MPI_Win_fence(0, win, ierr)
  call rc(ierr, 10, 'MPI_Win_fence')
  do i = 1, N
    call chk(got(i), 1000 * rank + i, 'Get of the own Put from the next rank')
  end do
  ! general active-target synchronization over every rank, completed by polling Win_test
  call MPI_Comm_group(MPI_COMM_WORLD, wgroup, ierr)
  call MPI_Win_post(wgroup, 0, win, ierr)
  call MPI_Win_start(wgroup, 0, win, ierr)
  call MPI_Win_complete(win, ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Win_test(win, flag, ierr)
    call rc(ierr, 15, 'MPI_Win_test')
  end do
  call MPI_Group_free(wgroup, ierr)
  call MPI_Win_free(win, ierr)

  ! ---- communicator constructors with a LOGICAL argument (topologies, Intercomm_merge) ----
  call MPI_Cart_create(MPI_COMM_WORLD, 1, [nproc], [.true.], .false., cart, ierr)
  call rc(ierr, 16, 'MPI_Cart_create')
  call MPI_Comm_size(cart, csize, ierr)
  call chk(csize, nproc, 'size of the Cartesian communicator')
  call MPI_Cart_sub(cart, [.true.], sub, ierr)
  call rc(ierr, 17, 'MPI_Cart_sub')
  call MPI_Comm_size(sub, csize, ierr)
  call chk(csize, nproc, 'size of the Cart_sub communicator')
  do i = 1, nproc  ! a ring: node i-1 is joined to its next and previous node
    gidx(i) = 2 * i
    gedges(2 * i - 1) = mod(i, nproc)
    gedges(2 * i) = mod(i - 2 + nproc, nproc)
  end do
  call MPI_Graph_create(MPI_COMM_WORLD, nproc, gidx, gedges, .false., graph, ierr)
  call rc(ierr, 18, 'MPI_Graph_create')
  call MPI_Comm_size(graph, csize, ierr)
  call chk(csize, nproc, 'size of the graph communicator')
  one(1) = 1
  srcs(1) = rank
  dsts(1) = nxt
  call MPI_Dist_graph_create(MPI_COMM_WORLD, 1, srcs, one, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, .false., &
       dgraph, ierr)
  call rc(ierr, 19, 'MPI_Dist_graph_create')
  call MPI_Dist_graph_neighbors_count(dgraph, nin, nout, weighted, ierr)
  call chk(nin, 1, 'Dist_graph_create in-degree')
  call chk(nout, 1, 'Dist_graph_create out-degree')
  srcs(1) = prv
  wts(1) = 1
  call MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, srcs, wts, 1, dsts, wts, MPI_INFO_NULL, .false., &
       dadj, ierr)
  call rc(ierr, 20, 'MPI_Dist_graph_create_adjacent')
  call MPI_Dist_graph_neighbors_count(dadj, nin, nout, weighted, ierr)
  call chk(nin + nout, 2, 'Dist_graph_create_adjacent degrees')
  call MPI_Comm_free(cart, ierr)
  call MPI_Comm_free(sub, ierr)
  call MPI_Comm_free(graph, ierr)
  call MPI_Comm_free(dgraph, ierr)
  call MPI_Comm_free(dadj, ierr)
  if (nproc >= 2) then  ! the lower and upper halves of the ranks, as an intercommunicator, merged
    half = merge(1, 0, 2 * rank >= nproc)
    call MPI_Comm_split(MPI_COMM_WORLD, half, rank, halfc, ierr)
    call MPI_Intercomm_create(halfc, 0, MPI_COMM_WORLD, merge(0, (nproc + 1) / 2, half == 1), 7, inter, ierr)
    call MPI_Intercomm_merge(inter, half == 1, merged, ierr)
    call rc(ierr, 21, 'MPI_Intercomm_merge')
    call MPI_Comm_size(merged, csize, ierr)
    call chk(csize, nproc, 'size of the merged intercommunicator')
    call MPI_Comm_free(merged, ierr)
    call MPI_Comm_free(inter, ierr)
    call MPI_Comm_free(halfc, ierr)
  end if

  ! ---- Reduce_local ----
  red = 7
  call MPI_Reduce_local(v, red, N, MPI_INTEGER, MPI_SUM, ierr)
  call rc(ierr, 13, 'MPI_Reduce_local')
  do i = 1, N
    call chk(red(i), v(i) + 7, 'Reduce_local')
  end do

  ! ---- every call entered ncclmpi's Fortran entry point once ----
  if (have) then
    do k = 1, NF
      now = nmt_fortran_calls(trim(FN(k))//c_null_char)
      if (now - base(k) /= ncall(k)) then
        write (*, '(A,I0,A,A,A,I0,A,I0)') '[f_more ', rank, '] FAILED: fortran_calls(', trim(FN(k)), ') grew by ', &
             now - base(k), ', calls made ', ncall(k)
        nerr = nerr + 1
      end if
    end do
  end if
  call MPI_Allreduce(nerr, gerr, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
  if (gerr /= 0) then
    if (rank == 0) write (*, '(A,I0,A)') '[f_more] FAIL: ', gerr, ' failure(s)'
    stop 1
  end if
  if (rank == 0) write (*, '(A,I0,A,L1,A)') '[f_more] PASS (np=', nproc, ', ncclmpi ', have, ')'

contains

  subroutine rc(code, k, what)
    integer, intent(in) :: code, k
    character(len=*), intent(in) :: what
    ncall(k) = ncall(k) + 1
    if (code /= MPI_SUCCESS) then
      write (*, '(A,I0,A,A,A,I0)') '[f_more ', rank, '] FAILED: ', what, ' returned ', code
      nerr = nerr + 1
    end if
  end subroutine rc

  subroutine chk(got, want, what)
    integer, intent(in) :: got, want
    character(len=*), intent(in) :: what
    if (got /= want) then
      write (*, '(A,I0,A,A,A,I0,A,I0)') '[f_more ', rank, '] FAILED: ', what, ': got ', got, ', expected ', want
      nerr = nerr + 1
    end if
  end subroutine chk

  subroutine fail(what)
    character(len=*), intent(in) :: what
    write (*, '(A,I0,A,A)') '[f_more ', rank, '] FAILED: ', what
    nerr = nerr + 1
  end subroutine fail

end program f_more
