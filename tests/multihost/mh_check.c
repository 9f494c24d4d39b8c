/* SPDX-License-Identifier: MIT */
/*
 * mh_check: what a multi-host run must show (tests/multihost, tools/shaddr-hosts' test hosts).
 *
 *  1. MPI's node detection: the ranks that MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts on one
 *     node are exactly the ranks with one hostname, and there are HOSTS of them.
 *  2. With the interposer (its counters found with dlsym): REPS Bcasts of SIZE bytes from world
 *     rank 0 and REPS Allreduces of SIZE bytes all went through the node/leader hierarchy on
 *     every rank (hierarchical +1 per call, nothing forwarded, nothing fell back), results
 *     checked.
 *  3. The leaders talked over the test network: each host's leader reads its host's veth0
 *     counters (/sys/class/net/veth0/statistics, the host's own /sys) around the Bcasts; every
 *     host but the root's received at least REPS x SIZE bytes. The Bcasts are the only traffic
 *     then (no reference calls, no PMPI_* of the test), so those bytes are the leaders' messages.
 *
 * Usage: mh_check HOSTS [SIZE [REPS]]   (default SIZE 4 MiB, REPS 8)
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shaddr_interpose.h"

#define NAME_MAX_LEN 64

static int g_rank, g_errors;

static void fail(const char *fmt, const char *a, long b, long c) {
	g_errors++;
	fprintf(stderr, "mh_check rank %d: ", g_rank);
	fprintf(stderr, fmt, a, b, c);
	fprintf(stderr, "\n");
}

static long long read_counter(const char *name) {
	char path[128];
	long long v = -1;
	snprintf(path, sizeof path, "/sys/class/net/veth0/statistics/%s", name);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

int main(int argc, char **argv) {
	int size, hosts, node_rank, node_size;
	size_t bytes = 4u << 20;
	int reps = 8;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 2) {
		if (g_rank == 0)
			fprintf(stderr, "usage: mh_check HOSTS [SIZE [REPS]]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	hosts = atoi(argv[1]);
	if (argc > 2)
		bytes = strtoull(argv[2], NULL, 0);
	if (argc > 3)
		reps = atoi(argv[3]);

	/* 1. Node detection by MPI against the hostnames. */
	char host[NAME_MAX_LEN] = {0};
	gethostname(host, sizeof host - 1);
	char *all = calloc((size_t)size, NAME_MAX_LEN);
	int *leader_of = calloc((size_t)size, sizeof(int));
	MPI_Allgather(host, NAME_MAX_LEN, MPI_CHAR, all, NAME_MAX_LEN, MPI_CHAR, MPI_COMM_WORLD);
	MPI_Comm node;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &node_rank);
	MPI_Comm_size(node, &node_size);
	int leader = g_rank; /* world rank of node rank 0 */
	MPI_Bcast(&leader, 1, MPI_INT, 0, node);
	MPI_Allgather(&leader, 1, MPI_INT, leader_of, 1, MPI_INT, MPI_COMM_WORLD);
	int nodes = 0;
	for (int r = 0; r < size; r++) {
		if (leader_of[r] == r)
			nodes++;
		for (int q = 0; q < size; q++) {
			int same_host = strcmp(all + (size_t)r * NAME_MAX_LEN,
					       all + (size_t)q * NAME_MAX_LEN) == 0;
			if (same_host != (leader_of[r] == leader_of[q]) && g_rank == 0)
				fail("ranks %s: %ld and %ld: MPI's nodes differ from the hostnames",
				     "", r, q);
		}
	}
	if (nodes != hosts && g_rank == 0)
		fail("%sMPI_Comm_split_type gave %ld nodes, want %ld hosts", "", nodes, hosts);
	if (node_rank == 0)
		printf("mh_check: node of world rank %d: %s, %d ranks\n", g_rank, host, node_size);

	/* 2. and 3. The hierarchy, over the network. */
	int (*get)(struct shaddr_interpose_stats *);
	*(void **)&get = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	struct shaddr_interpose_stats before, after;
	unsigned char *buf = malloc(bytes);
	int *vec = malloc(bytes), *sum = malloc(bytes);
	size_t n = bytes / sizeof(int);
	long long rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;

	MPI_Barrier(MPI_COMM_WORLD);
	if (get)
		get(&before);
	if (node_rank == 0) {
		rx0 = read_counter("rx_bytes");
		tx0 = read_counter("tx_bytes");
		if (rx0 < 0)
			fail("%s/sys/class/net/veth0 not readable: not on a test host?%ld%ld", "", 0, 0);
	}
	for (int k = 0; k < reps; k++) {
		if (g_rank == 0)
			for (size_t i = 0; i < bytes; i++)
				buf[i] = (unsigned char)(i * 7 + (size_t)k);
		else
			memset(buf, 0, bytes);
		MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
		for (size_t i = 0; i < bytes; i += 4093)
			if (buf[i] != (unsigned char)(i * 7 + (size_t)k)) {
				fail("%sBcast %ld: wrong byte at %ld", "", k, (long)i);
				break;
			}
	}
	if (node_rank == 0) {
		rx1 = read_counter("rx_bytes");
		tx1 = read_counter("tx_bytes");
	}
	/* The interposer's own count of MPI_COMM_WORLD's nodes (no SHADDR_NODES here) */
	if (get) {
		get(&after);
		if ((long)after.world_nodes != hosts)
			fail("%sthe interposer found %ld nodes in MPI_COMM_WORLD, want %ld hosts", "",
			     (long)after.world_nodes, hosts);
	}
	for (int k = 0; k < reps; k++) {
		for (size_t i = 0; i < n; i++)
			vec[i] = (int)(i + (size_t)g_rank + (size_t)k);
		MPI_Allreduce(vec, sum, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		for (size_t i = 0; i < n; i += 1021) {
			long want = (long)size * (long)(i + (size_t)k) + (long)size * (size - 1) / 2;
			if (sum[i] != (int)want) {
				fail("%sAllreduce %ld: wrong element %ld", "", k, (long)i);
				break;
			}
		}
	}
	if (get) {
		get(&after);
		long hb = (long)(after.hierarchical[SHADDR_IP_BCAST] - before.hierarchical[SHADDR_IP_BCAST]);
		long ha = (long)(after.hierarchical[SHADDR_IP_ALLREDUCE] -
				 before.hierarchical[SHADDR_IP_ALLREDUCE]);
		long fw = 0, fb = 0;
		for (int c = 0; c < SHADDR_IP_COUNT; c++) {
			fw += (long)(after.forwarded[c] - before.forwarded[c]);
			fb += (long)(after.fallbacks[c] - before.fallbacks[c]);
		}
		if (hb != reps || ha != reps)
			fail("%shierarchical Bcasts %ld, Allreduces %ld: want every call", "", hb, ha);
		if (fw || fb)
			fail("%s%ld forwarded, %ld fell back: want none", "", fw, fb);
		if (g_rank == 0)
			printf("mh_check: interposer: %ld Bcasts and %ld Allreduces of %zu bytes through "
			       "the hierarchy on rank 0\n", hb, ha, bytes);
	} else if (g_rank == 0) {
		printf("mh_check: no interposer: hierarchy counters not checked\n");
	}

	/* Bytes each host's veth0 carried during the Bcasts, reported by its leader. */
	long long mine[2] = {node_rank == 0 ? rx1 - rx0 : 0, node_rank == 0 ? tx1 - tx0 : 0};
	long long *net = calloc((size_t)size * 2, sizeof(long long));
	MPI_Gather(mine, 2, MPI_LONG_LONG, net, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
	if (g_rank == 0) {
		for (int r = 0; r < size; r++) {
			if (leader_of[r] != r)
				continue;
			long long rx = net[2 * r], tx = net[2 * r + 1];
			printf("mh_check: %s: veth0 received %lld, sent %lld bytes during %d Bcasts of "
			       "%zu bytes\n", all + (size_t)r * NAME_MAX_LEN, rx, tx, reps, bytes);
			if (r != leader_of[0] && rx < (long long)reps * (long long)bytes)
				fail("%s: veth0 received %ld bytes, want at least %ld",
				     all + (size_t)r * NAME_MAX_LEN, (long)rx, (long)reps * (long)bytes);
		}
	}

	int total = 0;
	MPI_Allreduce(&g_errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("mh_check: %d ranks on %d hosts: %d error(s): %s\n", size, nodes, total,
		       total ? "FAILED" : "passed");
	MPI_Comm_free(&node);
	MPI_Finalize();
	return total ? 1 : 0;
}
