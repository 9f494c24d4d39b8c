/* SPDX-License-Identifier: MIT */
/*
 * What MPICH's test/mpi/configure finds on Debian 12 (x86-64) for both Debian's MPICH and Open
 * MPI (the two generated headers differ only in HAVE_MPI_INTEGER16, a Fortran type no coll test
 * uses). tests/interpose/run-mpich-coll compiles the coll tests straight with mpicc against this
 * header: configure plus the suite's libtool build would cost about 8 minutes per MPI here,
 * the direct build of the programs this project runs well under one.
 */
#ifndef MPITESTCONF_H_INCLUDED
#define MPITESTCONF_H_INCLUDED

#define HAVE_DLFCN_H 1
#define HAVE_DOUBLE__COMPLEX 1
#define HAVE_FLOAT__COMPLEX 1
#define HAVE_GETRUSAGE 1
#define HAVE_INTTYPES_H 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_DOUBLE__COMPLEX 1
#define HAVE_LONG_LONG 1
#define HAVE_MEMORY_H 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_PTHREAD_H 1
#define HAVE_STDARG_H 1
#define HAVE_STDINT_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRDUP 1
#define HAVE_STRINGS_H 1
#define HAVE_STRING_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_UNISTD_H 1
#define HAVE_USLEEP 1
#define HAVE__BOOL 1
#define PACKAGE "mpich-testsuite"
#define PACKAGE_VERSION "4.0.2"
#define POINTERINT_t long
#define SIZEOF_INT 4
#define SIZEOF_LONG 8
#define SIZEOF_LONG_LONG 8
#define SIZEOF_SHORT 2
#define SIZEOF_VOID_P 8
#define STDC_HEADERS 1
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
#define USE_LONG_DOUBLE_COMPLEX 1
#define VERSION "4.0.2"

#endif
