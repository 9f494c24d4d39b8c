// SPDX-License-Identifier: MIT
// Sharing the ranks' heap files (libshaddr/heap) on a node, without ptrace rights: each rank
// whose heap is on passes its memfd to every peer over a unix socket (SCM_RIGHTS), and each
// rank maps every peer's heap once, read-only, for the life of the node communicator.
//
// The exchange, collective over the host (share_heaps()):
//   1. every rank whose heap is on binds an abstract unix socket named by a random token and
//      listens (backlog: every rank, and room for many strangers);
//   2. allgather: pid, token, heap base and size, and why the heap is off where it is;
//   3. every rank connects to every peer's socket (non-blocking: a queued connection is made),
//      while accepting on its own: it serves the ranks that arrive and closes anyone else at
//      once, so that strangers filling a backlog cannot keep the ranks out (a connect refused
//      for a full backlog is tried again until the deadline);
//   4. allgather: who connected to whom, so that each owner knows exactly whom to serve;
//   5. each owner accepts the rest, and serves only a connection whose SO_PEERCRED shows its own
//      effective uid and the pid of one of this communicator's ranks it expects, each once:
//      an abstract socket can be reached by any process of the network namespace, and this
//      check is what keeps other users' (and this user's other) processes away from the heap.
//      Anyone else is closed without a word;
//   6. each rank receives its peers' offers (magic, rank, base, size and the fd), checks the
//      sender's credentials too, and maps the file;
//   7. allgather: who mapped whom. An owner's heap is shared only if every peer mapped it, so
//      every rank takes the same path for its addresses (the owner skips the inner backend's
//      exposure of heap buffers only then).
// Nothing blocks without a deadline (kShareTimeoutMs), and no step waits for a step that
// comes later on another rank: connects never wait (the backlog holds them), serving needs
// only queued connections, receiving only the peers' serving. Every error path closes its fds.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shaddr/host.h"

namespace shaddr {

inline constexpr int kShareTimeoutMs = 30000;

// One rank's heap as this rank reaches it.
struct PeerHeap {
  uintptr_t base = 0;     // the owner's address of offset 0 of its heap file
  size_t reserved = 0;    // the owner's range; all of it is mapped here
  char *map = nullptr;    // where it is mapped here (own heap: base itself); nullptr: not shared
  int fd = -1;            // the heap file (fstat says how much of it is readable)
  size_t readable = 0;    // file size last seen: reads below it cannot fault
  bool own = false;       // this rank's heap: neither unmapped nor closed here
};

struct HeapShare {
  std::vector<PeerHeap> heaps;  // by rank
  int on = 0;                   // ranks whose heap is on
  int shared = 0;               // ranks whose heap every peer maps
  std::string summary;          // for SHADDR_VERBOSE: what is on, where it is off and why
};

// Unmaps and closes what share_heaps() made.
void release_heaps(HeapShare *share);

// The exchange above. @low_limit: an owner whose heap starts below it is not offered (an
// inner backend that stages hands out offsets below it, which must not be taken for heap
// addresses). 0 with *out filled (possibly nothing shared), or the negative errno of a failed
// allgather (the node communicator cannot work then anyway).
int share_heaps(const shaddr_host &host, uintptr_t low_limit, HeapShare *out);

// --- the steps, for tests ---

// What an owner sends with its fd.
struct HeapOffer {
  uint64_t magic;  // kHeapOfferMagic
  uint64_t rank;
  uint64_t base;
  uint64_t reserved;
};
inline constexpr uint64_t kHeapOfferMagic = 0x7368616464726870ull;  // "shaddrhp"

// A random socket token: the abstract name is "\0shaddr-heap-<32 hex digits>".
struct HeapToken {
  unsigned char bytes[16];
};

// Step 1: a listening socket (CLOEXEC, non-blocking) under a fresh random token.
int heap_listen(int backlog, HeapToken *token, int *listen_fd);
// Step 3: a connected socket to @token's listener, or a negative errno.
int heap_connect(const HeapToken &token, int *fd);
// Step 5's server: serves each expected pid once (SO_PEERCRED: geteuid() and a pid of @expect
// not served yet) and closes every other connection without sending anything.
class HeapServer {
 public:
  HeapServer(int listen_fd, std::vector<pid_t> expect, const HeapOffer &offer, int heap_fd)
      : listen_fd_(listen_fd), expect_(std::move(expect)), served_(expect_.size(), false),
        offer_(offer), heap_fd_(heap_fd) {}
  // Accepts what is queued now, without waiting. 0 or a negative errno of accept.
  int poll_once();
  // Accepts until every expected pid is served or @timeout_ms passed; returns how many were.
  int serve(int timeout_ms);
  // Of the pids not served yet, only these will still come.
  void expect_only(const std::vector<pid_t> &pids);
  int strangers() const { return strangers_; }
  bool all_served() const { return done_ == expect_.size(); }

 private:
  int listen_fd_;
  std::vector<pid_t> expect_;
  std::vector<bool> served_;
  size_t done_ = 0;
  int strangers_ = 0;
  HeapOffer offer_;
  int heap_fd_;
};

// Step 5: accepts until every pid of @expect has been served once (or the deadline): serves a
// connection only if SO_PEERCRED shows geteuid() and a pid of @expect not served yet; closes
// every other connection without sending anything. Returns how many were served; *strangers
// counts the refused.
int heap_serve(int listen_fd, const std::vector<pid_t> &expect, const HeapOffer &offer,
               int heap_fd, int timeout_ms, int *strangers);
// Step 6: receives one offer on @fd from the process @owner (checked by SO_PEERCRED) within
// the deadline; *heap_fd gets the file (CLOEXEC). 0 or a negative errno with *why.
int heap_receive(int fd, pid_t owner, int timeout_ms, HeapOffer *offer, int *heap_fd,
                 std::string *why);

}  // namespace shaddr
