! SPDX-License-Identifier: MIT
! shaddr-fortran-bench: a 1 MiB MPI_Allreduce (DOUBLE PRECISION, MPI_SUM) and MPI_Bcast from
! Fortran, through the binding chosen when compiled (-DBINDING_MPIFH, -DBINDING_MPI,
! -DBINDING_F08), against the same calls from C in the same process, on the same buffers
! (fortran_bench_c.c): rounds of ITERS calls, C and Fortran alternating, each call's time the
! slowest rank's mean over a round, the best round reported. Run stock and under shaddr-run
! (tools/shaddr_bench/fortran.py). Prints (rank 0, fortran_bench_c.c's fbench_report) a line
!   fortran_bench: BINDING N ranks: allreduce C X us, Fortran Y us; bcast C X us, Fortran Y us; ok
! and the same as one line of JSON: {"tool": "fortran_bench", "binding": ..., "ar_c": X, ...}.
program fortran_bench
#if defined(BINDING_F08)
  use mpi_f08
#elif defined(BINDING_MPI)
  use mpi
#endif
  use, intrinsic :: iso_c_binding, only: c_char, c_int, c_double, c_null_char
  implicit none
#if defined(BINDING_MPIFH)
  include 'mpif.h'
  character(len=*), parameter :: binding = 'mpif.h'
#elif defined(BINDING_MPI)
  character(len=*), parameter :: binding = 'use-mpi'
#else
  character(len=*), parameter :: binding = 'use-mpi_f08'
#endif
  interface
    real(c_double) function fbench_c(which, a, b, n, iters) bind(C, name='fbench_c')
      import :: c_int, c_double
      integer(c_int), value :: which, n, iters
      real(c_double) :: a(*), b(*)
    end function
    subroutine fbench_report(binding, nproc, best, ok) bind(C, name='fbench_report')
      import :: c_char, c_int, c_double
      character(kind=c_char) :: binding(*)
      integer(c_int), value :: nproc, ok
      real(c_double) :: best(*)
    end subroutine
  end interface
  integer, parameter :: n = 131072, iters = 20, rounds = 7
  double precision, allocatable :: a(:), b(:)
  double precision :: best(2, 2), t, t0
  integer :: rank, nproc, ierr, i, r, k, lang
  logical :: ok

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nproc, ierr)
  allocate(a(n), b(n))
  a = [(dble(mod(i, 97) + rank), i = 1, n)]
  best = huge(1d0)
  do r = 0, rounds  ! round 0 warms up
    do k = 1, 2  ! 1: Allreduce, 2: Bcast
      do lang = 1, 2  ! 1: C, 2: Fortran
        if (lang == 1) then
          t = fbench_c(k - 1, a, b, n, iters)
        else
          call MPI_Barrier(MPI_COMM_WORLD, ierr)
          t0 = MPI_Wtime()
          do i = 1, iters
            if (k == 1) then
              call MPI_Allreduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
            else
              call MPI_Bcast(b, n, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
            end if
          end do
          t = (MPI_Wtime() - t0) / iters
          call MPI_Allreduce(MPI_IN_PLACE, t, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, &
                             ierr)
        end if
        if (r > 0) best(k, lang) = min(best(k, lang), t)
      end do
    end do
  end do
  call MPI_Allreduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  ok = all(b == [(dble(nproc * mod(i, 97) + nproc * (nproc - 1) / 2), i = 1, n)])
  call MPI_Allreduce(MPI_IN_PLACE, ok, 1, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
  if (rank == 0) call fbench_report(binding // c_null_char, nproc, best, merge(1, 0, ok))
  call MPI_Finalize(ierr)
end program fortran_bench
