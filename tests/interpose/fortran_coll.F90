! SPDX-License-Identifier: MIT
! Every collective the interposer takes, called from Fortran through one of the MPI's bindings
! (chosen when compiled: -DBINDING_MPIFH, -DBINDING_MPI or -DBINDING_F08), with Fortran's
! predefined types in the reductions, MPI_IN_PLACE, MPI_BOTTOM and derived types. Every result
! is checked against the value computed here (integer-valued operands: exact in any order),
! and the interposer's counters (fortran_stats.c) must show every call run by libshaddr once:
! none forwarded, none counted twice. Run under shaddr-run with SHADDR_MIN=0 on one node.
! Exit: 0, or MPI_Abort(1) on a wrong value or count.
program fortran_coll
#if defined(BINDING_F08)
  use mpi_f08
#elif defined(BINDING_MPI)
  use mpi
#endif
  use, intrinsic :: iso_c_binding, only: c_int, c_int64_t
  implicit none
#if defined(BINDING_MPIFH)
  include 'mpif.h'
#endif
#if defined(BINDING_F08)
#define COMM_T type(MPI_Comm)
#define DTYPE_T type(MPI_Datatype)
#else
#define COMM_T integer
#define DTYPE_T integer
#endif
  interface
    integer(c_int) function shaddr_test_stats(accel, fwd, lib) bind(C, name='shaddr_test_stats')
      import :: c_int, c_int64_t
      integer(c_int64_t) :: accel(0:11), fwd(0:11), lib
    end function
  end interface
  integer, parameter :: BARRIER = 0, BCAST = 1, REDUCE = 2, ALLREDUCE = 3, GATHER = 4, &
                        GATHERV = 5, SCATTER = 6, SCATTERV = 7, ALLGATHER = 8, &
                        ALLGATHERV = 9, ALLTOALL = 10, ALLTOALLV = 11
  character(len=10), parameter :: names(0:11) = [character(len=10) :: 'Barrier', 'Bcast', &
      'Reduce', 'Allreduce', 'Gather', 'Gatherv', 'Scatter', 'Scatterv', 'Allgather', &
      'Allgatherv', 'Alltoall', 'Alltoallv']
  integer, parameter :: n = 3000, m = 700
  integer :: rank, nproc, ierr, i, r, errors, total
  integer(c_int64_t) :: calls(0:11), accel(0:11), fwd(0:11), lib
  COMM_T :: comm
  DTYPE_T :: vec, abs_t
  integer(kind=MPI_ADDRESS_KIND) :: addr(1)
  integer :: blen(1)
  double precision :: d(n), e(n), d2(2 * m), dall(m * 16)
  real :: s(n), se(n)
  integer :: k(n), ke(n), kall(m * 16), kv(m * 16), cnts(16), dsps(16), kblk(m * 16)
  integer(kind=2) :: h(n), he(n)
  integer(kind=8) :: l8(n), l8e(n)
  complex :: c(n), ce(n)
  complex(kind(0d0)) :: z(n), ze(n)
  logical :: b(n), band(n), bor(n), bxor(n)
  double precision :: p2(2, n), p2e(2, n)
  real :: q2(2, n), q2e(2, n)
  integer :: k2(2, n), k2e(2, n)

  call MPI_Init(ierr)
  comm = MPI_COMM_WORLD
  call MPI_Comm_rank(comm, rank, ierr)
  call MPI_Comm_size(comm, nproc, ierr)
  if (nproc > 16) call MPI_Abort(comm, 2, ierr)
  calls = 0
  errors = 0

  call MPI_Barrier(comm, ierr)
  calls(BARRIER) = calls(BARRIER) + 1

  ! Bcast: DOUBLE PRECISION from the last rank; a vector type (every other element).
  d = -1
  if (rank == nproc - 1) d = [(dble(i), i = 1, n)]
  call MPI_Bcast(d, n, MPI_DOUBLE_PRECISION, nproc - 1, comm, ierr)
  call check('Bcast DOUBLE PRECISION', all(d == [(dble(i), i = 1, n)]))
  call MPI_Type_vector(m, 1, 2, MPI_DOUBLE_PRECISION, vec, ierr)
  call MPI_Type_commit(vec, ierr)
  d2 = -5
  if (rank == 0) d2(1:2 * m:2) = [(dble(3 * i), i = 1, m)]
  call MPI_Bcast(d2, 1, vec, 0, comm, ierr)
  call check('Bcast vector', all(d2(1:2 * m:2) == [(dble(3 * i), i = 1, m)]) .and. &
             all(d2(2:2 * m:2) == -5))
  ! MPI_BOTTOM with absolute addresses.
  call MPI_Get_address(e, addr(1), ierr)
  blen(1) = n
  call MPI_Type_create_hindexed(1, blen, addr, MPI_DOUBLE_PRECISION, abs_t, ierr)
  call MPI_Type_commit(abs_t, ierr)
  e = 0
  if (rank == 0) e = [(dble(7 * i), i = 1, n)]
  call MPI_Bcast(MPI_BOTTOM, 1, abs_t, 0, comm, ierr)
  call check('Bcast MPI_BOTTOM', all(e == [(dble(7 * i), i = 1, n)]))
  calls(BCAST) = calls(BCAST) + 3

  ! Reductions: operand of rank r at i is f(i, r), small integers.
  d = [(f(i, rank), i = 1, n)]
  call MPI_Allreduce(d, e, n, MPI_DOUBLE_PRECISION, MPI_SUM, comm, ierr)
  call check('Allreduce DOUBLE PRECISION SUM', all(e == [(dble(fsum(i)), i = 1, n)]))
  call MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_DOUBLE_PRECISION, MPI_MAX, comm, ierr)
  call check('Allreduce in place MAX', all(d == [(dble(fmax(i)), i = 1, n)]))
  s = [(real(f(i, rank)), i = 1, n)]
  se = 0
  call MPI_Reduce(s, se, n, MPI_REAL, MPI_SUM, 1, comm, ierr)
  if (rank == 1) call check('Reduce REAL SUM', all(se == [(real(fsum(i)), i = 1, n)]))
  ! In place at root 0: Debian's MPICH 4.0.2 faults on it at another root (stock, from C too).
  k = [(f(i, rank), i = 1, n)]
  if (rank == 0) then
    call MPI_Reduce(MPI_IN_PLACE, k, n, MPI_INTEGER, MPI_SUM, 0, comm, ierr)
    call check('Reduce in place INTEGER SUM', all(k == [(fsum(i), i = 1, n)]))
  else
    call MPI_Reduce(k, ke, n, MPI_INTEGER, MPI_SUM, 0, comm, ierr)
  end if
  h = [(int(f(i, rank), 2), i = 1, n)]
  call MPI_Allreduce(h, he, n, MPI_INTEGER2, MPI_MIN, comm, ierr)
  call check('Allreduce INTEGER2 MIN', all(he == [(int(fmin(i), 2), i = 1, n)]))
  l8 = [(int(f(i, rank), 8) * 4000000000_8, i = 1, n)]
  call MPI_Allreduce(l8, l8e, n, MPI_INTEGER8, MPI_SUM, comm, ierr)
  call check('Allreduce INTEGER8 SUM', all(l8e == [(int(fsum(i), 8) * 4000000000_8, i = 1, n)]))
  d = [(f(i, rank), i = 1, n)]
  call MPI_Allreduce(d, e, n, MPI_REAL8, MPI_MIN, comm, ierr)
  call check('Allreduce REAL8 MIN', all(e == [(dble(fmin(i)), i = 1, n)]))
  c = [(cmplx(f(i, rank), 1), i = 1, n)]
  call MPI_Allreduce(c, ce, n, MPI_COMPLEX, MPI_SUM, comm, ierr)
  call check('Allreduce COMPLEX SUM', all(ce == [(cmplx(fsum(i), nproc), i = 1, n)]))
  z = [(cmplx(f(i, rank), 1, kind(0d0)), i = 1, n)]
  call MPI_Allreduce(z, ze, n, MPI_DOUBLE_COMPLEX, MPI_PROD, comm, ierr)
  call check('Allreduce DOUBLE COMPLEX PROD', all(ze == [(zprod(i), i = 1, n)]))
  b = [(mod(i + rank, 3) /= 0, i = 1, n)]
  call MPI_Allreduce(b, band, n, MPI_LOGICAL, MPI_LAND, comm, ierr)
  call MPI_Allreduce(b, bor, n, MPI_LOGICAL, MPI_LOR, comm, ierr)
  call MPI_Allreduce(b, bxor, n, MPI_LOGICAL, MPI_LXOR, comm, ierr)
  call check('Allreduce LOGICAL LAND', all(band .eqv. [(lcount(i) == nproc, i = 1, n)]))
  call check('Allreduce LOGICAL LOR', all(bor .eqv. [(lcount(i) > 0, i = 1, n)]))
  call check('Allreduce LOGICAL LXOR', all(bxor .eqv. [(mod(lcount(i), 2) == 1, i = 1, n)]))
  do i = 1, n
    p2(1, i) = f(i, rank)
    p2(2, i) = rank
    q2(1, i) = real(f(i, rank))
    q2(2, i) = real(rank)
    k2(1, i) = f(i, rank)
    k2(2, i) = rank
  end do
  call MPI_Allreduce(p2, p2e, n, MPI_2DOUBLE_PRECISION, MPI_MAXLOC, comm, ierr)
  call MPI_Allreduce(q2, q2e, n, MPI_2REAL, MPI_MINLOC, comm, ierr)
  call MPI_Allreduce(k2, k2e, n, MPI_2INTEGER, MPI_MINLOC, comm, ierr)
  call check('Allreduce 2DOUBLE_PRECISION MAXLOC', &
             all(p2e(1, :) == [(dble(fmax(i)), i = 1, n)]) .and. &
             all(p2e(2, :) == [(dble(argbest(i, 1)), i = 1, n)]))
  call check('Allreduce 2REAL MINLOC', all(q2e(1, :) == [(real(fmin(i)), i = 1, n)]) .and. &
             all(q2e(2, :) == [(real(argbest(i, -1)), i = 1, n)]))
  call check('Allreduce 2INTEGER MINLOC', all(k2e(1, :) == [(fmin(i), i = 1, n)]) .and. &
             all(k2e(2, :) == [(argbest(i, -1), i = 1, n)]))
  calls(ALLREDUCE) = calls(ALLREDUCE) + 13
  calls(REDUCE) = calls(REDUCE) + 2

  ! Gather(v), Scatter(v), Allgather(v), Alltoall(v): blocks of rank r hold 1000 r + j.
  k(1:m) = [(1000 * rank + i, i = 1, m)]
  call MPI_Gather(k, m, MPI_INTEGER, kall, m, MPI_INTEGER, 0, comm, ierr)
  if (rank == 0) call check('Gather', all(kall(1:m * nproc) == blocks(m)))
  kall = 0
  kall(rank * m + 1:(rank + 1) * m) = k(1:m)
  if (rank == 1) then
    call MPI_Gather(MPI_IN_PLACE, m, MPI_INTEGER, kall, m, MPI_INTEGER, 1, comm, ierr)
    call check('Gather in place', all(kall(1:m * nproc) == blocks(m)))
  else
    call MPI_Gather(k, m, MPI_INTEGER, kall, m, MPI_INTEGER, 1, comm, ierr)
  end if
  calls(GATHER) = calls(GATHER) + 2
  total = 0
  do r = 0, nproc - 1
    cnts(r + 1) = m - 50 * r
    dsps(r + 1) = total + 3 * r
    total = total + cnts(r + 1) + 3 * r
  end do
  kv = -1
  call MPI_Gatherv(k, cnts(rank + 1), MPI_INTEGER, kv, cnts, dsps, MPI_INTEGER, 0, comm, ierr)
  if (rank == 0) call check('Gatherv', vblocks(kv))
  calls(GATHERV) = calls(GATHERV) + 1
  kblk = 0
  if (rank == 0) kblk(1:m * nproc) = blocks(m)
  k = 0
  call MPI_Scatter(kblk, m, MPI_INTEGER, k, m, MPI_INTEGER, 0, comm, ierr)
  call check('Scatter', all(k(1:m) == [(1000 * rank + i, i = 1, m)]))
  calls(SCATTER) = calls(SCATTER) + 1
  if (rank == 0) then
    kv = -1
    do r = 0, nproc - 1
      kv(dsps(r + 1) + 1:dsps(r + 1) + cnts(r + 1)) = [(1000 * r + i, i = 1, cnts(r + 1))]
    end do
  end if
  k = 0
  call MPI_Scatterv(kv, cnts, dsps, MPI_INTEGER, k, cnts(rank + 1), MPI_INTEGER, 0, comm, ierr)
  call check('Scatterv', all(k(1:cnts(rank + 1)) == [(1000 * rank + i, i = 1, cnts(rank + 1))]))
  calls(SCATTERV) = calls(SCATTERV) + 1
  k(1:m) = [(1000 * rank + i, i = 1, m)]
  kall = 0
  call MPI_Allgather(k, m, MPI_INTEGER, kall, m, MPI_INTEGER, comm, ierr)
  call check('Allgather', all(kall(1:m * nproc) == blocks(m)))
  kall = 0
  kall(rank * m + 1:(rank + 1) * m) = k(1:m)
  call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, kall, m, MPI_INTEGER, comm, ierr)
  call check('Allgather in place', all(kall(1:m * nproc) == blocks(m)))
  ! A vector type on the send side, DOUBLE PRECISION on the receive side.
  d2 = -5
  d2(1:2 * m:2) = [(dble(1000 * rank + i), i = 1, m)]
  dall = 0
  call MPI_Allgather(d2, 1, vec, dall, m, MPI_DOUBLE_PRECISION, comm, ierr)
  call check('Allgather vector', all(dall(1:m * nproc) == dble(blocks(m))))
  calls(ALLGATHER) = calls(ALLGATHER) + 3
  kv = -1
  call MPI_Allgatherv(k, cnts(rank + 1), MPI_INTEGER, kv, cnts, dsps, MPI_INTEGER, comm, ierr)
  call check('Allgatherv', vblocks(kv))
  calls(ALLGATHERV) = calls(ALLGATHERV) + 1
  do r = 0, nproc - 1  ! block for rank r: 1000 * rank + 100 * r + j
    kblk(r * 40 + 1:(r + 1) * 40) = [(1000 * rank + 100 * r + i, i = 1, 40)]
  end do
  kall = 0
  call MPI_Alltoall(kblk, 40, MPI_INTEGER, kall, 40, MPI_INTEGER, comm, ierr)
  call check('Alltoall', all([((kall(r * 40 + i) == 1000 * r + 100 * rank + i, i = 1, 40), &
                              r = 0, nproc - 1)]))
  cnts(1:nproc) = 40
  dsps(1:nproc) = [(40 * r, r = 0, nproc - 1)]
  kall = 0
  call MPI_Alltoallv(kblk, cnts, dsps, MPI_INTEGER, kall, cnts, dsps, MPI_INTEGER, comm, ierr)
  call check('Alltoallv', all([((kall(r * 40 + i) == 1000 * r + 100 * rank + i, i = 1, 40), &
                               r = 0, nproc - 1)]))
  calls(ALLTOALL) = calls(ALLTOALL) + 1
  calls(ALLTOALLV) = calls(ALLTOALLV) + 1

  call MPI_Type_free(vec, ierr)
  call MPI_Type_free(abs_t, ierr)
  if (shaddr_test_stats(accel, fwd, lib) /= 0) then
    print '(a)', 'fortran_coll: no interposer counters (not run under shaddr-run?)'
    errors = errors + 1
  else
    do i = 0, 11
      if (accel(i) /= calls(i)) then
        print '(a,i0,3a,i0,a,i0,a,i0,a)', 'fortran_coll rank ', rank, ': ', trim(names(i)), &
            ': ', calls(i), ' calls, ', accel(i), ' run by libshaddr, ', fwd(i), ' forwarded'
        errors = errors + 1
      end if
    end do
    if (lib <= 0) then
      print '(a,i0,a)', 'fortran_coll rank ', rank, ': libshaddr ran no collective'
      errors = errors + 1
    end if
  end if
  if (errors > 0) call MPI_Abort(comm, 1, ierr)
  if (rank == 0) print '(a,i0,a)', 'fortran_coll: ok on ', nproc, ' ranks'
  call MPI_Finalize(ierr)

contains

  subroutine check(what, ok)
    character(len=*), intent(in) :: what
    logical, intent(in) :: ok
    if (ok) return
    print '(a,i0,2a)', 'fortran_coll rank ', rank, ': wrong result: ', what
    errors = errors + 1
  end subroutine

  integer function f(i, r)
    integer, intent(in) :: i, r
    f = mod(i * 7 + r * 3, 11) - 5
  end function

  integer function fsum(i)
    integer, intent(in) :: i
    integer :: q
    fsum = 0
    do q = 0, nproc - 1
      fsum = fsum + f(i, q)
    end do
  end function

  integer function fmax(i)
    integer, intent(in) :: i
    fmax = f(i, argbest(i, 1))
  end function

  integer function fmin(i)
    integer, intent(in) :: i
    fmin = f(i, argbest(i, -1))
  end function

  ! The lowest rank whose operand is the largest (dir 1) or the smallest (dir -1): MAXLOC's
  ! (MINLOC's) index.
  integer function argbest(i, dir)
    integer, intent(in) :: i, dir
    integer :: q
    argbest = 0
    do q = 1, nproc - 1
      if (dir * f(i, q) > dir * f(i, argbest)) argbest = q
    end do
  end function

  complex(kind(0d0)) function zprod(i)
    integer, intent(in) :: i
    integer :: q
    zprod = (1d0, 0d0)
    do q = 0, nproc - 1
      zprod = zprod * cmplx(f(i, q), 1, kind(0d0))
    end do
  end function

  integer function lcount(i)  ! ranks whose logical operand at i is true
    integer, intent(in) :: i
    integer :: q
    lcount = 0
    do q = 0, nproc - 1
      if (mod(i + q, 3) /= 0) lcount = lcount + 1
    end do
  end function

  function blocks(len) result(v)  ! every rank's block of len, in rank order
    integer, intent(in) :: len
    integer :: v(len * nproc)
    integer :: q, j
    v = [((1000 * q + j, j = 1, len), q = 0, nproc - 1)]
  end function

  logical function vblocks(v)  ! the v-layout of cnts/dsps, gaps untouched (-1)
    integer, intent(in) :: v(:)
    integer :: q, j, at
    vblocks = .true.
    at = 0
    do q = 0, nproc - 1
      do j = at + 1, dsps(q + 1)
        vblocks = vblocks .and. v(j) == -1
      end do
      do j = 1, cnts(q + 1)
        vblocks = vblocks .and. v(dsps(q + 1) + j) == 1000 * q + j
      end do
      at = dsps(q + 1) + cnts(q + 1)
    end do
  end function

end program fortran_coll
