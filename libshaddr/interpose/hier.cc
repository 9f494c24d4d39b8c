// SPDX-License-Identifier: MIT
#include "hier.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose {
namespace {

constexpr int kTagReduce = 7001;  // root's leader -> root on the (private) node communicator

int node_barrier(State &s, bool *fb) {
  if (!s.sc) return MPI_SUCCESS;
  int rc = inject_fault(s, shaddr_barrier(s.sc));
  if (!rc) return MPI_SUCCESS;
  say_fallback(s, "node Barrier", rc);
  *fb = true;
  return PMPI_Barrier(s.node);
}

int node_bcast(State &s, void *buf, size_t bytes, int nroot, bool *fb) {
  if (!s.sc || bytes == 0) return MPI_SUCCESS;
  int rc = inject_fault(s, shaddr_bcast(s.sc, buf, bytes, nroot));
  if (!rc) return MPI_SUCCESS;
  say_fallback(s, "node Bcast", rc);
  *fb = true;
  return bcast_bytes(buf, bytes, nroot, s.node);
}

// The leader's side of a pipelined node broadcast: segment k is one nonblocking collective on
// the leaders' communicator (PMPI_Ibcast for Bcast, PMPI_Iallreduce for Allreduce); libshaddr
// asks for segment k (ready) before node peers may copy it, so they copy k while k+1 is on the
// wire.
struct Pipeline {
  std::vector<MPI_Request> reqs;
  size_t seg = 0;  // bytes, a multiple of the element size
  size_t done = 0;

  // Pieces of the plan's size (SHADDR_INTERPOSE_SEGMENT); a bounded number of outstanding
  // requests; every piece's count fits an int.
  Pipeline(const State &s, size_t bytes, size_t elem) {
    seg = std::max(s.plan->limits.hier_segment, (bytes + 1023) / 1024);
    seg = std::min<size_t>(seg, size_t{1} << 30);
    seg = std::max(seg / elem, size_t{1}) * elem;
  }
  template <typename PostOne>
  int post(size_t bytes, size_t elem, PostOne one) {
    for (size_t off = 0; off < bytes; off += seg) {
      MPI_Request r;
      int rc = one(off, static_cast<int>(std::min(seg, bytes - off) / elem), &r);
      if (rc != MPI_SUCCESS) return rc;
      reqs.push_back(r);
    }
    return MPI_SUCCESS;
  }
  int post_bcast(char *buf, size_t bytes, int root, MPI_Comm leaders) {
    return post(bytes, 1, [&](size_t off, int n, MPI_Request *r) {
      return PMPI_Ibcast(buf + off, n, MPI_BYTE, root, leaders, r);
    });
  }
  int post_allreduce(const char *in, char *out, size_t bytes, size_t elem, MPI_Datatype t,
                     MPI_Op op, MPI_Comm leaders) {
    return post(bytes, elem, [&](size_t off, int n, MPI_Request *r) {
      return PMPI_Iallreduce(in + off, out + off, n, t, op, leaders, r);
    });
  }
  int wait_through(size_t last) {
    for (; done < reqs.size() && done <= last; done++)
      if (int rc = PMPI_Wait(&reqs[done], MPI_STATUS_IGNORE); rc != MPI_SUCCESS) return rc;
    return MPI_SUCCESS;
  }
  int finish() { return wait_through(reqs.size()); }
  static int ready(size_t off, size_t len, void *ctx) {
    auto *p = static_cast<Pipeline *>(ctx);
    if (len == 0) return 0;
    return p->wait_through((off + len - 1) / p->seg) == MPI_SUCCESS ? 0 : -EIO;
  }
};

// Node broadcast from the leader of what its pipeline p is receiving into buf; the leader
// finishes p. The node's peers copy each segment as soon as it has landed.
int node_bcast_pipelined(State &s, Pipeline &p, char *buf, size_t bytes, bool *fb) {
  if (!s.sc) return s.leader() ? p.finish() : MPI_SUCCESS;
  int rc = inject_fault(s, shaddr_bcast_segmented(s.sc, buf, bytes, 0, p.seg,
                                                  s.leader() ? Pipeline::ready : nullptr,
                                                  s.leader() ? &p : nullptr));
  int mpi_rc = s.leader() ? p.finish() : MPI_SUCCESS;
  if (mpi_rc) return mpi_rc;
  if (!rc) return MPI_SUCCESS;
  // Same rc on the whole node; the leader now holds all the data.
  say_fallback(s, "node Bcast (segmented)", rc);
  *fb = true;
  return bcast_bytes(buf, bytes, 0, s.node);
}

}  // namespace

int bcast_bytes(void *buf, size_t bytes, int root, MPI_Comm comm) {
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t off = 0; off < bytes; off += kChunk) {
    int n = static_cast<int>(std::min(kChunk, bytes - off));
    if (int rc = PMPI_Bcast(static_cast<char *>(buf) + off, n, MPI_BYTE, root, comm))
      return rc;
  }
  return MPI_SUCCESS;
}

int hier_barrier(State &s, bool *fb) {
  // Node barrier (everyone here has entered), leaders' barrier (everyone everywhere has), node
  // barrier again (release).
  if (int rc = node_barrier(s, fb)) return rc;
  if (s.leader())
    if (int rc = PMPI_Barrier(s.leaders)) return rc;
  return node_barrier(s, fb);
}

int hier_bcast(State &s, char *buf, size_t bytes, int root, bool *fb) {
  const int rn = s.node_of[root];
  Pipeline p(s, bytes, 1);
  if (s.my_node == rn) {
    // The root's node first, from the root itself; then its leader feeds the other leaders.
    if (int rc = node_bcast(s, buf, bytes, s.local_of[root], fb)) return rc;
    if (!s.leader()) return MPI_SUCCESS;
    int rc = p.post_bcast(buf, bytes, rn, s.leaders);
    int rc2 = p.finish();
    return rc ? rc : rc2;
  }
  // Other nodes: the leader receives segment by segment while its peers copy what has landed.
  if (s.leader())
    if (int rc = p.post_bcast(buf, bytes, rn, s.leaders)) return rc;
  return node_bcast_pipelined(s, p, buf, bytes, fb);
}

int hier_reduce(State &s, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op,
                shaddr_dtype dt, shaddr_op sop, int root, bool *fb) {
  const size_t bytes = static_cast<size_t>(count) * static_cast<size_t>(shaddr_dtype_size(dt));
  std::vector<char> nres(s.leader() ? bytes : 0);
  // 1. Node reduce to the leader.
  if (!s.sc) {
    std::memcpy(nres.data(), in, bytes);
  } else {
    int rc = inject_fault(
        s, shaddr_reduce(s.sc, in, s.leader() ? nres.data() : nullptr, count, dt, sop, 0));
    if (rc) {
      say_fallback(s, "node Reduce", rc);
      *fb = true;
      if (int mrc = PMPI_Reduce(in, s.leader() ? nres.data() : nullptr, count, t, op, 0, s.node))
        return mrc;
    }
  }
  // 2+3 for Allreduce: the leaders' allreduce in segments straight into the leader's out,
  // broadcast in the node segment by segment as each lands (every rank's reads of `in` ended
  // with its node reduce, so out may alias in).
  if (root < 0) {
    const size_t elem = static_cast<size_t>(shaddr_dtype_size(dt));
    Pipeline p(s, bytes, elem);
    if (s.leader())
      if (int rc = p.post_allreduce(nres.data(), static_cast<char *>(out), bytes, elem, t, op,
                                    s.leaders))
        return rc;
    return node_bcast_pipelined(s, p, static_cast<char *>(out), bytes, fb);
  }
  // 2. Between the leaders.
  const int rn = s.node_of[root];
  if (s.leader()) {
    int rc;
    if (s.my_node == rn) {
      // Not MPI_IN_PLACE: MPICH 4.0.2 crashes on an in-place Reduce at a root other than 0.
      std::vector<char> mine(nres);
      rc = PMPI_Reduce(mine.data(), nres.data(), count, t, op, rn, s.leaders);
    }
    else
      rc = PMPI_Reduce(nres.data(), nullptr, count, t, op, rn, s.leaders);
    if (rc) return rc;
  }
  // 3. To the root.
  if (s.my_node != rn) return MPI_SUCCESS;
  if (s.rank == root && s.leader()) {
    std::memcpy(out, nres.data(), bytes);
    return MPI_SUCCESS;
  }
  if (s.leader())
    return PMPI_Send(nres.data(), count, t, s.local_of[root], kTagReduce, s.node);
  if (s.rank == root)
    return PMPI_Recv(out, count, t, 0, kTagReduce, s.node, MPI_STATUS_IGNORE);
  return MPI_SUCCESS;
}

int hier_allgather(State &s, const char *in, size_t bytes, char *out, bool *fb) {
  const size_t nb = static_cast<size_t>(s.node_size) * bytes;
  std::vector<int> counts(s.nnodes), displs(s.nnodes);
  for (int n = 0, d = 0; n < s.nnodes; n++) {
    counts[n] = static_cast<int>(s.members[n].size() * bytes);
    displs[n] = d;
    d += counts[n];
  }
  // 1. Node gather to the leader, straight into place when nodes are rank blocks.
  std::vector<char> tmp;
  char *g = nullptr;
  if (s.leader()) {
    if (s.blocked) {
      g = out + displs[s.my_node];
    } else {
      tmp.resize(static_cast<size_t>(s.size) * bytes + nb);
      g = tmp.data() + static_cast<size_t>(s.size) * bytes;
    }
  }
  if (!s.sc) {
    if (g != in) std::memmove(g, in, bytes);
  } else {
    const void *send = s.leader() && in == g ? SHADDR_IN_PLACE : in;
    int rc = inject_fault(s, shaddr_gather(s.sc, send, bytes, g, 0));
    if (rc) {
      say_fallback(s, "node Gather", rc);
      *fb = true;
      int n = static_cast<int>(bytes);
      if (int mrc = PMPI_Gather(send == SHADDR_IN_PLACE ? MPI_IN_PLACE : in, n, MPI_BYTE, g, n,
                                MPI_BYTE, 0, s.node))
        return mrc;
    }
  }
  // 2. Leaders exchange node blocks (node order), then put them in rank order.
  if (s.leader()) {
    if (s.blocked) {
      if (int rc = PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, counts.data(), displs.data(),
                                   MPI_BYTE, s.leaders))
        return rc;
    } else {
      char *all = tmp.data();
      if (int rc = PMPI_Allgatherv(g, static_cast<int>(nb), MPI_BYTE, all, counts.data(),
                                   displs.data(), MPI_BYTE, s.leaders))
        return rc;
      for (int n = 0; n < s.nnodes; n++)
        for (size_t j = 0; j < s.members[n].size(); j++)
          std::memcpy(out + static_cast<size_t>(s.members[n][j]) * bytes,
                      all + displs[n] + j * bytes, bytes);
    }
  }
  // 3. Node broadcast of the whole result.
  return node_bcast(s, out, static_cast<size_t>(s.size) * bytes, 0, fb);
}

namespace {

// The leaders' 2D virtual mesh, which combines the messages of a short Alltoall's exchange:
// phase 1 sends, along my row, to the leader in column j everything for column j's leaders
// (combined); phase 2 sends, along my column, to each leader what my row has for it. Each
// leader sends rows + columns messages instead of nnodes, each up to nnodes blocks long.
// In: sbuf holds B[me->d] at sdispl[d]; out: rbuf gets B[src->me] at rdispl[src], as
// PMPI_Alltoallv on the leaders would leave them.
int mesh_exchange(State &s, const char *sbuf, const std::vector<int> &sdispl, char *rbuf,
                  const std::vector<int> &rdispl, size_t bytes) {
  const int cols = s.mesh_cols, rows = s.nnodes / cols;
  const int me = s.my_node, r = me / cols, c = me % cols;
  auto blk = [&](int from, int to) {
    return static_cast<int>(s.members[from].size() * s.members[to].size() * bytes);
  };
  // Phase 1, within my row (ranked by column).
  std::vector<int> sc1(cols), sd1(cols), rc1(cols), rd1(cols);
  int so = 0, ro = 0;
  for (int j = 0; j < cols; j++) {
    sd1[j] = so;
    rd1[j] = ro;
    sc1[j] = rc1[j] = 0;
    for (int i = 0; i < rows; i++) {
      sc1[j] += blk(me, i * cols + j);        // mine, for column j's leaders
      rc1[j] += blk(r * cols + j, i * cols + c);  // row neighbour j's, for my column
    }
    so += sc1[j];
    ro += rc1[j];
  }
  std::vector<char> s1(static_cast<size_t>(so)), r1(static_cast<size_t>(ro));
  for (int j = 0, off = 0; j < cols; j++)
    for (int i = 0; i < rows; i++) {
      const int d = i * cols + j;
      std::memcpy(s1.data() + off, sbuf + sdispl[d], static_cast<size_t>(blk(me, d)));
      off += blk(me, d);
    }
  if (int rc = PMPI_Alltoallv(s1.data(), sc1.data(), sd1.data(), MPI_BYTE, r1.data(), rc1.data(),
                              rd1.data(), MPI_BYTE, s.mesh_row))
    return rc;
  // Phase 2, within my column (ranked by row): to row i's leader of my column, the blocks my
  // row's leaders have for it (in r1: from row neighbour j, ordered by destination row).
  std::vector<int> sc2(rows), sd2(rows), rc2(rows), rd2(rows);
  so = ro = 0;
  for (int i = 0; i < rows; i++) {
    sd2[i] = so;
    rd2[i] = ro;
    sc2[i] = rc2[i] = 0;
    for (int j = 0; j < cols; j++) {
      sc2[i] += blk(r * cols + j, i * cols + c);
      rc2[i] += blk(i * cols + j, me);
    }
    so += sc2[i];
    ro += rc2[i];
  }
  std::vector<char> s2(static_cast<size_t>(so)), r2(static_cast<size_t>(ro));
  for (int i = 0, off = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      const int src = r * cols + j;
      int at = rd1[j];
      for (int i2 = 0; i2 < i; i2++) at += blk(src, i2 * cols + c);
      std::memcpy(s2.data() + off, r1.data() + at, static_cast<size_t>(blk(src, i * cols + c)));
      off += blk(src, i * cols + c);
    }
  if (int rc = PMPI_Alltoallv(s2.data(), sc2.data(), sd2.data(), MPI_BYTE, r2.data(), rc2.data(),
                              rd2.data(), MPI_BYTE, s.mesh_col))
    return rc;
  for (int i = 0, off = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      const int src = i * cols + j;
      std::memcpy(rbuf + rdispl[src], r2.data() + off, static_cast<size_t>(blk(src, me)));
      off += blk(src, me);
    }
  return MPI_SUCCESS;
}

}  // namespace

int hier_alltoall(State &s, const char *in, size_t bytes, char *out, bool *fb) {
  const size_t row = static_cast<size_t>(s.size) * bytes;  // one rank's send or receive buffer
  const size_t ns = static_cast<size_t>(s.node_size);
  // 1. Node gather of every member's whole send buffer to the leader.
  std::vector<char> gbuf;
  const char *g = in;
  if (s.sc) {
    if (s.leader()) gbuf.resize(ns * row);
    int rc = inject_fault(s, shaddr_gather(s.sc, in, row, s.leader() ? gbuf.data() : nullptr, 0));
    if (rc) {
      say_fallback(s, "node Gather (Alltoall)", rc);
      *fb = true;
      if (int mrc = PMPI_Gather(in, static_cast<int>(row), MPI_BYTE, gbuf.data(),
                                static_cast<int>(row), MPI_BYTE, 0, s.node))
        return mrc;
    }
    g = gbuf.data();
  }
  // 2. Leaders: node a sends node b the blocks from a's members to b's members, ordered
  // (source member, destination member).
  std::vector<char> tbuf;
  char *t = out;
  if (s.leader()) {
    std::vector<int> scount(s.nnodes), sdispl(s.nnodes), rcount(s.nnodes), rdispl(s.nnodes);
    int so = 0, ro = 0;
    for (int n = 0; n < s.nnodes; n++) {
      scount[n] = rcount[n] = static_cast<int>(ns * s.members[n].size() * bytes);
      sdispl[n] = so;
      rdispl[n] = ro;
      so += scount[n];
      ro += rcount[n];
    }
    std::vector<char> sbuf(static_cast<size_t>(so)), rbuf(static_cast<size_t>(ro));
    char *p = sbuf.data();
    for (int n = 0; n < s.nnodes; n++)
      for (size_t j = 0; j < ns; j++)
        for (int dst : s.members[n]) {
          std::memcpy(p, g + j * row + static_cast<size_t>(dst) * bytes, bytes);
          p += bytes;
        }
    if (s.mesh_cols && bytes <= s.plan->limits.hier_mesh_max) {
      if (int rc = mesh_exchange(s, sbuf.data(), sdispl, rbuf.data(), rdispl, bytes)) return rc;
      count_mesh();
    } else if (int rc = PMPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), MPI_BYTE,
                                       rbuf.data(), rcount.data(), rdispl.data(), MPI_BYTE,
                                       s.leaders)) {
      return rc;
    }
    if (s.sc) {
      tbuf.resize(ns * row);
      t = tbuf.data();
    }
    // Member k's receive buffer, in comm rank order of the sources.
    for (int n = 0; n < s.nnodes; n++)
      for (size_t j = 0; j < s.members[n].size(); j++)
        for (size_t k = 0; k < ns; k++)
          std::memcpy(t + k * row + static_cast<size_t>(s.members[n][j]) * bytes,
                      rbuf.data() + rdispl[n] + (j * ns + k) * bytes, bytes);
  }
  if (!s.sc) return MPI_SUCCESS;
  // 3. Node scatter of each member's receive buffer.
  int rc = inject_fault(s, shaddr_scatter(s.sc, s.leader() ? t : nullptr, row, out, 0));
  if (!rc) return MPI_SUCCESS;
  say_fallback(s, "node Scatter (Alltoall)", rc);
  *fb = true;
  return PMPI_Scatter(s.leader() ? t : nullptr, static_cast<int>(row), MPI_BYTE, out,
                      static_cast<int>(row), MPI_BYTE, 0, s.node);
}

}  // namespace shaddr::interpose
