! ncclmpi Fortran test on CUDA device buffers: the C path of the Fortran entry points (handle,
! status, request, MPI_IN_PLACE conversion), through NCCL or the staged path. Built twice from
! this file: with -DUSE_F08 (use mpi_f08, which Open MPI routes through ompi_*_f) and without
! (include 'mpif.h', the mpi_*_ manglings). Device memory comes from dev_helper.c; the
! program holds it as Fortran arrays (c_f_pointer) and never reads it on the host.
! Exit 77 (skip) without a GPU.
program f_device
#ifdef USE_F08
  use mpi_f08
#endif
  use, intrinsic :: iso_c_binding
  implicit none
#ifndef USE_F08
  include 'mpif.h'
#endif
  interface
    function nmt_dev_select() bind(C, name='nmt_dev_select') result(n)
      import :: c_int
      integer(c_int) :: n
    end function
    function nmt_dev_alloc(bytes) bind(C, name='nmt_dev_alloc') result(p)
      import :: c_ptr, c_long_long
      integer(c_long_long), value :: bytes
      type(c_ptr) :: p
    end function
    function nmt_dev_put(dev, host, bytes) bind(C, name='nmt_dev_put') result(rc)
      import :: c_ptr, c_long_long, c_int
      type(c_ptr), value :: dev, host
      integer(c_long_long), value :: bytes
      integer(c_int) :: rc
    end function
    function nmt_dev_get(host, dev, bytes) bind(C, name='nmt_dev_get') result(rc)
      import :: c_ptr, c_long_long, c_int
      type(c_ptr), value :: host, dev
      integer(c_long_long), value :: bytes
      integer(c_int) :: rc
    end function
  end interface
#include "nmt_stats.inc"
  integer, parameter :: N = 4099
  integer, target :: h(N), g(N)
  integer, pointer :: da(:), db(:)
  type(c_ptr) :: pa, pb
  integer :: rank, nranks, i, ierr, fails, total, next, prev, cnt
  integer(c_long_long) :: bytes, before
  integer :: half, wc(2)
  logical :: tflag
  integer(kind=MPI_ADDRESS_KIND) :: wd(2)
#ifdef USE_F08
  type(MPI_Request) :: req, reqs(2)
  type(MPI_Status) :: st, sts(2)
  type(MPI_Datatype) :: wt(2)
  type(MPI_Comm) :: ring
#else
  integer :: req, reqs(2)
  integer :: st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 2)
  integer :: wt(2), ring
#endif

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  if (nmt_dev_select() == 0) then
    if (rank == 0) print *, 'f_device: no GPU, skipped'
    call MPI_Finalize(ierr)
    call exit(77)
  end if
  fails = 0
  bytes = int(N, c_long_long) * 4
  pa = nmt_dev_alloc(bytes)
  pb = nmt_dev_alloc(bytes)
  call c_f_pointer(pa, da, [N])
  call c_f_pointer(pb, db, [N])
  next = mod(rank + 1, nranks)
  prev = mod(rank + nranks - 1, nranks)

  ! Allreduce, device to device
  do i = 1, N
    h(i) = rank * 3 + i
  end do
  call put(pa, h)
  g = -7
  call put(pb, g)
  before = nmt_fortran_calls('Allreduce' // c_null_char)
  call MPI_Allreduce(da, db, N, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call get(g, pb)
  do i = 1, N
    if (g(i) /= 3 * nranks * (nranks - 1) / 2 + nranks * i) then
      call fail('Allreduce', i, g(i))
      exit
    end if
  end do
  if (before >= 0 .and. nmt_fortran_calls('Allreduce' // c_null_char) /= before + 1) call fail('Allreduce count', 0, 0)

  ! Allreduce MPI_IN_PLACE (the Fortran sentinel must become the C one), MAX
  call put(pa, h)
  call MPI_Allreduce(MPI_IN_PLACE, da, N, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  call get(g, pa)
  do i = 1, N
    if (g(i) /= (nranks - 1) * 3 + i) then
      call fail('Allreduce in place', i, g(i))
      exit
    end if
  end do

  ! Bcast from the last rank
  if (rank == nranks - 1) then
    h = [(i * 11, i = 1, N)]
  else
    h = -5
  end if
  call put(pa, h)
  call MPI_Bcast(da, N, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD, ierr)
  call get(g, pa)
  if (any(g /= [(i * 11, i = 1, N)])) call fail('Bcast', 0, 0)

  ! Iallreduce + Wait (request and status conversion, task progress)
  h = rank + 1
  call put(pa, h)
  call MPI_Iallreduce(da, db, N, MPI_INTEGER, MPI_PROD, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, st, ierr)
  call get(g, pb)
  cnt = 1
  do i = 1, nranks
    cnt = cnt * i
  end do
  if (any(g /= cnt)) call fail('Iallreduce', 1, g(1))

  ! Iallreduce completed by an MPI_Test loop (with mpi_f08, Open MPI's MPI_Test calls its PMPI layer
  ! directly; ncclmpi replaces that module procedure, or its request would never complete)
  call put(pa, h)
  call MPI_Iallreduce(da, db, N, MPI_INTEGER, MPI_PROD, MPI_COMM_WORLD, req, ierr)
  tflag = .false.
  do while (.not. tflag)
    call MPI_Test(req, tflag, st, ierr)
  end do
  call get(g, pb)
  if (any(g /= cnt)) call fail('Iallreduce + Test loop', 1, g(1))

  ! Sendrecv ring on device buffers, status checked
  h = [(rank * 100000 + i, i = 1, N)]
  call put(pa, h)
  call MPI_Sendrecv(da, N, MPI_INTEGER, next, 21, db, N, MPI_INTEGER, prev, 21, MPI_COMM_WORLD, st, ierr)
  call get(g, pb)
  if (any(g /= [(prev * 100000 + i, i = 1, N)])) call fail('Sendrecv', 0, 0)
#ifdef USE_F08
  if (st%MPI_SOURCE /= prev .or. st%MPI_TAG /= 21) call fail('Sendrecv status', st%MPI_SOURCE, st%MPI_TAG)
#else
  if (st(MPI_SOURCE) /= prev .or. st(MPI_TAG) /= 21) call fail('Sendrecv status', st(MPI_SOURCE), st(MPI_TAG))
#endif

  ! Irecv + Isend on device buffers, Waitall with statuses
  g = -1
  call put(pb, g)
  call MPI_Irecv(db, N, MPI_INTEGER, prev, 22, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(da, N, MPI_INTEGER, next, 22, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, sts, ierr)
  call get(g, pb)
  if (any(g /= [(prev * 100000 + i, i = 1, N)])) call fail('Irecv/Waitall', 0, 0)
#ifdef USE_F08
  call MPI_Get_count(sts(1), MPI_INTEGER, cnt, ierr)
  if (sts(1)%MPI_SOURCE /= prev .or. cnt /= N) call fail('Waitall status', sts(1)%MPI_SOURCE, cnt)
#else
  call MPI_Get_count(sts(:, 1), MPI_INTEGER, cnt, ierr)
  if (sts(MPI_SOURCE, 1) /= prev .or. cnt /= N) call fail('Waitall status', sts(MPI_SOURCE, 1), cnt)
#endif

  ! Neighbor_alltoallw on a periodic ring (a datatype and a byte displacement per neighbour: the
  ! types array has one entry per neighbour, not per rank): the block from the previous rank is
  ! the one it sent forward, the block from the next rank the one it sent back
  half = N / 2
  call MPI_Cart_create(MPI_COMM_WORLD, 1, [nranks], [.true.], .false., ring, ierr)
  h = [(rank * 100000 + i, i = 1, N)]
  call put(pa, h)
  g = -3
  call put(pb, g)
  wc = half
  wd = [0_MPI_ADDRESS_KIND, int(half, MPI_ADDRESS_KIND) * 4]
  wt = MPI_INTEGER
  call MPI_Neighbor_alltoallw(da, wc, wd, wt, db, wc, wd, wt, ring, ierr)
  call get(g, pb)
  if (ierr /= MPI_SUCCESS) call fail('Neighbor_alltoallw rc', ierr, 0)
  if (any(g(1:half) /= [(prev * 100000 + half + i, i = 1, half)])) call fail('Neighbor_alltoallw from prev', g(1), 0)
  if (any(g(half + 1:2 * half) /= [(next * 100000 + i, i = 1, half)])) call fail('Neighbor_alltoallw from next', g(half + 1), 0)
  if (g(N) /= -3) call fail('Neighbor_alltoallw wrote past its blocks', g(N), 0)
  call MPI_Comm_free(ring, ierr)

  call MPI_Allreduce(fails, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a,i0,a)', 'f_device: ', nranks, ' ranks, ', total, ' failure(s)'
  call MPI_Finalize(ierr)
  if (total /= 0) call exit(1)

contains
  subroutine put(dptr, host)
    type(c_ptr), intent(in) :: dptr
    integer, target, intent(in) :: host(N)
    if (nmt_dev_put(dptr, c_loc(host), bytes) /= 0) call fail('cudaMemcpy H2D', 0, 0)
  end subroutine
  subroutine get(host, dptr)
    integer, target, intent(inout) :: host(N)
    type(c_ptr), intent(in) :: dptr
    if (nmt_dev_get(c_loc(host), dptr, bytes) /= 0) call fail('cudaMemcpy D2H', 0, 0)
  end subroutine
  subroutine fail(what, a, b)
    character(len=*), intent(in) :: what
    integer, intent(in) :: a, b
    print '(a,i0,3a,i0,a,i0)', '[rank ', rank, '] FAIL ', what, ': ', a, ' ', b
    fails = fails + 1
  end subroutine
end program
