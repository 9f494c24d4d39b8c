/* SPDX-License-Identifier: MIT */
/*
 * A program written only against XPMEM's documented public API (xpmem.h, -lxpmem): it knows
 * nothing of shaddr. Exercises make/get/attach/detach/release/remove across fork, read-only
 * access, memory the owner protected read-only, whole-address-space export and XPMEM's error
 * conventions. Exit 0 = all checks
 * passed; it prints each failed check.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xpmem.h>

static int failures;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d)\n",  \
				__FILE__, __LINE__, #cond, errno);               \
			failures++;                                              \
		}                                                                \
	} while (0)

#define SIZE (64 * 4096)

static int run_child(xpmem_segid_t segid, off_t offset, int flags, char expect, int write)
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		struct xpmem_addr addr;
		char *p;
		xpmem_apid_t apid = xpmem_get(segid, flags, XPMEM_PERMIT_MODE, NULL);

		if (apid <= 0)
			_exit(10);
		addr.apid = apid;
		addr.offset = offset;
		p = xpmem_attach(addr, SIZE, NULL);
		if (p == (void *)-1)
			_exit(11);
		if (p[0] != expect || p[SIZE - 1] != expect)
			_exit(12);
		if (write)
			p[100] = 'W';
		if (xpmem_detach(p) != 0)
			_exit(13);
		if (xpmem_release(apid) != 0)
			_exit(14);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

int main(void)
{
	struct xpmem_addr bad = { 0, 0 };
	xpmem_segid_t segid, whole;
	char *buf;

	CHECK(xpmem_version() > 0);

	buf = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 'a', SIZE);

	segid = xpmem_make(buf, SIZE, XPMEM_PERMIT_MODE, (void *)0600);
	CHECK(segid > 0);
	CHECK(run_child(segid, 0, XPMEM_RDWR, 'a', 1) == 0);
	CHECK(buf[100] == 'W');
	buf[0] = 'b';
	buf[SIZE - 1] = 'b';
	CHECK(run_child(segid, 0, XPMEM_RDONLY, 'b', 0) == 0);

	/* The whole address space, as MPI libraries export it: offset = address. */
	whole = xpmem_make(0, XPMEM_MAXADDR_SIZE, XPMEM_PERMIT_MODE, (void *)0600);
	CHECK(whole > 0);
	CHECK(run_child(whole, (off_t)(uintptr_t)buf, XPMEM_RDWR, 'b', 0) == 0);

	/* Memory the owner protected read-only: read through either access, a write refused. */
	CHECK(mprotect(buf, SIZE, PROT_READ) == 0);
	CHECK(run_child(whole, (off_t)(uintptr_t)buf, XPMEM_RDONLY, 'b', 0) == 0);
	CHECK(run_child(whole, (off_t)(uintptr_t)buf, XPMEM_RDWR, 'b', 0) == 0);
	CHECK(run_child(whole, (off_t)(uintptr_t)buf, XPMEM_RDWR, 'b', 1) == 100 + SIGSEGV);
	CHECK(buf[100] == 'W' && buf[0] == 'b');
	CHECK(mprotect(buf, SIZE, PROT_READ | PROT_WRITE) == 0);

	/* XPMEM's error conventions. */
	errno = 0;
	CHECK(xpmem_make(buf + 1, SIZE, XPMEM_PERMIT_MODE, (void *)0600) == -1 && errno == EINVAL);
	CHECK(xpmem_get(segid + 1, XPMEM_RDWR, XPMEM_PERMIT_MODE, NULL) == -1 && errno == ENOENT);
	CHECK(xpmem_attach(bad, SIZE, NULL) == (void *)-1 && errno == EINVAL);
	CHECK(xpmem_detach(buf) == -1 && errno == ENOENT);
	CHECK(xpmem_release(12345) == -1 && errno == ENOENT);

	CHECK(xpmem_remove(segid) == 0);
	CHECK(xpmem_remove(whole) == 0);
	CHECK(xpmem_remove(segid) == -1 && errno == ENOENT);
	CHECK(run_child(segid, 0, XPMEM_RDWR, 'b', 0) == 10);

	if (failures)
		fprintf(stderr, "xpmem_api_check: %d check(s) failed\n", failures);
	else
		printf("xpmem_api_check: all checks passed\n");
	return failures ? 1 : 0;
}
