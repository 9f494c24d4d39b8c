/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for tests/interpose/nomem_pack.c: shaddr_test_fail_malloc(bytes) makes the
 * next malloc() of exactly @bytes in this process return NULL, once. Everything else goes to
 * the C library's malloc.
 */
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t size);

static size_t armed[4];

void shaddr_test_fail_malloc(size_t bytes)
{
	for (int i = 0; i < 4; i++)
		if (!armed[i]) {
			armed[i] = bytes;
			return;
		}
}

void *malloc(size_t size)
{
	for (int i = 0; i < 4; i++)
		if (armed[i] && armed[i] == size) {
			armed[i] = 0;
			errno = ENOMEM;
			return NULL;
		}
	return __libc_malloc(size);
}
