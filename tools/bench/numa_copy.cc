// SPDX-License-Identifier: MIT
// shaddr-numa-copy: the copy rates between this machine's NUMA nodes, which the calibration
// gives the plan (`level.numa=`, docs/topology.md) to weigh its topology levels.
//
// For every pair (memory node m, reading node r): one thread on a CPU of node r copies a buffer
// whose pages are bound to node m (libnuma's numa_alloc_onnode: MPOL_BIND) into one on node r
// ("one core"), and then every CPU of node r does so at once, each its own buffers ("all
// cores": the bytes they copied together over the slowest one's time). The source is beyond
// the caches (--bytes, default 16 MiB a thread) and rewritten before each timed copy (untimed),
// so the copy reads node m's memory. Where each source page is is asked from the kernel
// (move_pages with no target: a query); a pair whose pages are not all on node m is reported
// as not placed, and its rate is not used.
// Output: a table on stdout; --json FILE: {"tool", "bytes", "nodes": [...],
// "one_core_gbps": [[m][r]], "all_cores_gbps": [[m][r]], "placed": bool} (GB/s = 1e9 bytes
// copied a second; rows by memory node, columns by reading node, in the order of "nodes").
// --line: also the calibration's line, level.numa=<one local>/<one remote>/<all local>/
// <all remote> (the slowest local and remote pairs), or nothing on a machine of one node.
#include <getopt.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "size_parse.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A buffer of libnuma's on one node, freed with the object.
class NodeBuffer {
 public:
  NodeBuffer(size_t bytes, int node)
      : bytes_(bytes), p_(static_cast<char *>(numa_alloc_onnode(bytes, node))) {}
  ~NodeBuffer() {
    if (p_) numa_free(p_, bytes_);
  }
  NodeBuffer(const NodeBuffer &) = delete;
  NodeBuffer &operator=(const NodeBuffer &) = delete;
  char *data() const { return p_; }

 private:
  size_t bytes_;
  char *p_;
};

// Whether every page of [p, p + bytes) is on @node (the kernel's answer; touched first).
bool on_node(const char *p, size_t bytes, int node) {
  const size_t page = static_cast<size_t>(numa_pagesize());
  std::vector<void *> pages;
  for (size_t off = 0; off < bytes; off += page) pages.push_back(const_cast<char *>(p) + off);
  std::vector<int> status(pages.size(), -1);
  if (numa_move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0)) return false;
  return std::all_of(status.begin(), status.end(), [node](int s) { return s == node; });
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct Rate {
  double gbps = 0;
  bool placed = false;
};

// @cpus each copy @bytes from memory on @mem into memory on their own node, at once, the best of
// a few rounds: the bytes copied together over the slowest thread's time.
Rate copy_rate(const std::vector<int> &cpus, int mem, int own, size_t bytes) {
  const size_t n = cpus.size();
  std::vector<double> best(n, 1e30);
  std::vector<char> placed(n, 0);
  std::barrier sync(static_cast<std::ptrdiff_t>(n));
  std::atomic<bool> failed{false};
  auto body = [&](size_t t) {
    pin(cpus[t]);
    NodeBuffer src(bytes, mem), dst(bytes, own);
    if (!src.data() || !dst.data()) {
      failed = true;  // the barrier's rounds still kept, so the other threads finish
      for (int r = 0; r < 4; r++) sync.arrive_and_wait(), sync.arrive_and_wait();
      return;
    }
    std::memset(dst.data(), 0, bytes);
    for (int r = 0; r < 4; r++) {
      std::memset(src.data(), r + 1, bytes);  // new contents, written back to node @mem
      sync.arrive_and_wait();
      const double t0 = now();
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" ::"r"(dst.data()) : "memory");
      best[t] = std::min(best[t], now() - t0);
      sync.arrive_and_wait();
    }
    placed[t] = on_node(src.data(), bytes, mem);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; t++) pool.emplace_back(body, t);
  body(0);
  for (auto &th : pool) th.join();
  if (failed) return {};
  const double slowest = *std::max_element(best.begin(), best.end());
  return {static_cast<double>(n) * static_cast<double>(bytes) / slowest / 1e9,
          std::all_of(placed.begin(), placed.end(), [](char c) { return c != 0; })};
}

}  // namespace

int main(int argc, char **argv) {
  size_t bytes = 16u << 20;
  std::string json;
  bool line = false;
  static const option kLong[] = {{"bytes", required_argument, nullptr, 'b'},
                                 {"json", required_argument, nullptr, 'j'},
                                 {"line", no_argument, nullptr, 'l'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  const char *const kUsage = "Usage: shaddr-numa-copy [--bytes SIZE] [--json FILE] [--line]\n";
  for (int c; (c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'b': {
        uint64_t v = 0;
        if (shaddr::parse_size(optarg, &v) != shaddr::SizeError::kNone || v < 4096 ||
            v > (uint64_t{1} << 32)) {
          std::fprintf(stderr, "shaddr-numa-copy: --bytes %s: 4K to 4G\n", optarg);
          return 2;
        }
        bytes = static_cast<size_t>(v);
        break;
      }
      case 'j': json = optarg; break;
      case 'l': line = true; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 2;
    }
  }
  if (optind < argc) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (numa_available() < 0) {
    std::fprintf(stderr, "shaddr-numa-copy: no NUMA support in this kernel (numa_available)\n");
    return 1;
  }
  // The nodes with CPUs this process may use (a reader needs one) and memory.
  std::vector<int> nodes;
  std::vector<std::vector<int>> cpus;
  cpu_set_t mine;
  sched_getaffinity(0, sizeof mine, &mine);
  for (int node = 0; node <= numa_max_node(); node++) {
    if (!numa_bitmask_isbitset(numa_nodes_ptr, static_cast<unsigned>(node))) continue;
    long long free_bytes = 0;
    if (numa_node_size64(node, &free_bytes) <= 0) continue;
    bitmask *m = numa_allocate_cpumask();
    std::vector<int> list;
    if (numa_node_to_cpus(node, m) == 0)
      for (unsigned c = 0; c < m->size && c < CPU_SETSIZE; c++)
        if (numa_bitmask_isbitset(m, c) && CPU_ISSET(c, &mine)) list.push_back(static_cast<int>(c));
    numa_free_cpumask(m);
    if (list.empty()) continue;
    nodes.push_back(node);
    cpus.push_back(list);
  }
  const size_t k = nodes.size();
  std::vector<std::vector<Rate>> one(k, std::vector<Rate>(k)), all = one;
  bool placed = true;
  std::printf("# copy rates between NUMA nodes, GB/s (%zu bytes a thread; memory node -> reading "
              "node: one core, every core)\n",
              bytes);
  for (size_t m = 0; m < k; m++)
    for (size_t r = 0; r < k; r++) {
      one[m][r] = copy_rate({cpus[r].front()}, nodes[m], nodes[r], bytes);
      all[m][r] = copy_rate(cpus[r], nodes[m], nodes[r], bytes);
      placed = placed && one[m][r].placed && all[m][r].placed;
      std::printf("  node %d -> node %d: %8.2f %8.2f (%zu cores)%s\n", nodes[m], nodes[r],
                  one[m][r].gbps, all[m][r].gbps, cpus[r].size(),
                  one[m][r].placed && all[m][r].placed ? "" : "  NOT PLACED on the memory node");
      std::fflush(stdout);
    }
  // The slowest local and remote pairs.
  double v[4] = {1e30, 1e30, 1e30, 1e30};
  for (size_t m = 0; m < k; m++)
    for (size_t r = 0; r < k; r++) {
      const int far = m != r;
      v[far] = std::min(v[far], one[m][r].gbps);
      v[2 + far] = std::min(v[2 + far], all[m][r].gbps);
    }
  if (!json.empty()) {
    std::ofstream f(json);
    const auto matrix = [&](const std::vector<std::vector<Rate>> &x) {
      std::string s = "[";
      for (size_t m = 0; m < k; m++) {
        s += m ? ", [" : "[";
        for (size_t r = 0; r < k; r++) s += (r ? ", " : "") + std::to_string(x[m][r].gbps);
        s += "]";
      }
      return s + "]";
    };
    std::string list;
    for (size_t i = 0; i < k; i++) list += (i ? ", " : "") + std::to_string(nodes[i]);
    f << "{\"tool\": \"shaddr-numa-copy\", \"bytes\": " << bytes << ", \"nodes\": [" << list
      << "], \"one_core_gbps\": " << matrix(one) << ", \"all_cores_gbps\": " << matrix(all)
      << ", \"placed\": " << (placed ? "true" : "false") << "}\n";
    if (!f) return 1;
  }
  if (!placed) {
    std::fprintf(stderr, "shaddr-numa-copy: some source pages were not on their memory node\n");
    return 1;
  }
  if (line && k > 1)
    std::printf("level.numa=%.6g/%.6g/%.6g/%.6g\n", v[0], v[1], v[2], v[3]);  // each above 0
  return 0;
}
