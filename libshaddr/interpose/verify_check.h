// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1's parts (verify.h), shared by its files:
//   verify_sig.cc      a (count, datatype)'s type signature as one number
//   verify_sequence.cc the ranks' descriptions of a call compared (the call sequence)
//   verify_compare.cc  the user's buffers copied and compared with the MPI's own results
//   verify.cc          each collective's check, built from those
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hash.h"
#include "shaddr/coll.h"
#include "shaddr_interpose.h"
#include "state.h"
#include "types.h"

namespace shaddr::interpose::verify {

extern const char *const kCallName[SHADDR_IP_COUNT];

// Prints that the job is aborted and aborts it (MPI_Abort(MPI_COMM_WORLD, kAbortCode)).
[[noreturn]] void abort_job();

// ---- Type signatures (verify_sig.cc) --------------------------------------------------------
std::string type_name(MPI_Datatype t);
// One number for (count, type)'s signature; 0 when it could not be taken apart.
uint64_t digest(MPI_Count count, MPI_Datatype t);

// ---- Call sequence (verify_sequence.cc) ------------------------------------------------------
struct CommInfo {
  uint64_t id = 0;     // this process's numbering, in the order of first use
  uint64_t calls = 0;  // intercepted collectives on it so far
  int rank = 0, size = 0;
  std::string name;
};
// nullptr: no checks (intercommunicators, MPI_COMM_NULL: forwarded as they are).
CommInfo *info_of(MPI_Comm comm);

int64_t op_id(MPI_Op op);
std::string op_str(int64_t op);

// A check of one call: started by start(), which numbers the call and compares the ranks'
// descriptions of it (aborting on a difference).
struct Check {
  shaddr_interpose_call call = SHADDR_IP_BARRIER;
  MPI_Comm comm = MPI_COMM_NULL;
  CommInfo *ci = nullptr;
  std::string args;         // the call as printed in reports
  uint64_t forwarded0 = 0;  // forwarded_calls(call) before the call

  // Did libshaddr (node or hierarchy) do this call, rather than PMPI_* as it came? The same
  // answer on every rank: the interposer's decision to forward is taken from values MPI
  // requires to be the same everywhere.
  bool by_libshaddr() const { return forwarded_calls(call) == forwarded0; }
  std::string where() const;
};

// Numbers the call on @comm and checks that every rank describes the same call (root, bytes,
// signature, op; -1 / 0 where not common to all); false: @comm is not checked.
bool start(Check &k, MPI_Comm comm, shaddr_interpose_call call, int64_t root, int64_t bytes,
           uint64_t sig, int64_t op);

// ---- Buffers and results (verify_compare.cc) -------------------------------------------------
// Bytes [lo, hi) relative to a buffer's address that (count, type) touches, gaps included.
struct Span {
  MPI_Aint lo = 0, hi = 0;
};
Span span_of(MPI_Count count, const TypeInfo &ti);
Span vspan_of(const int *counts, const int *displs, int n, const TypeInfo &ti);

inline char *at(const void *base, MPI_Aint off) {
  return reinterpret_cast<char *>(reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(off));
}

// A copy of a user buffer's span; as_buf() is the address to hand MPI for the copy.
struct Copy {
  const void *user = nullptr;
  Span sp;
  std::vector<char> bytes;
  bool ok = false;

  bool save(const void *buf, Span s);
  size_t size() const { return static_cast<size_t>(sp.hi - sp.lo); }
  void *as_buf() { return at(bytes.data(), -sp.lo); }
};

struct Diff {
  bool any = false;
  size_t first = 0;  // byte offset within the compared span
  size_t count = 0;  // differing bytes (or values)
};

// A reduction's count elements of dt at got and want; abs_sum: the operands' absolute sums
// (floating-point MPI_SUM only), p ranks.
Diff diff_reduction(const char *got, const char *want, const char *abs_sum, int count,
                    shaddr_dtype dt, shaddr_op op, int p);
// got and want hold the span sp of a buffer (got: what the call produced, want: PMPI_*'s).
[[noreturn]] void report(const Check &k, const char *what, const Diff &d, const char *got,
                         const char *want, Span sp, MPI_Datatype t);
// SHADDR_VERIFY_INJECT (verify.h): spoils the chosen result before it is compared.
void maybe_inject(const Check &k, void *user, Span sp);
// The user's output against the reference copy, byte for byte.
void compare_out(const Check &k, const char *what, void *user, Copy &ref, MPI_Datatype t);
// A send buffer must come back as it went in.
void compare_in(const Check &k, const char *what, Copy &in, MPI_Datatype t);

// The operands' elementwise absolute values (floating-point components), for the tolerance of
// sums.
std::vector<char> abs_of(const char *in, int count, shaddr_dtype dt);
// Whether @op on @dt is a floating-point sum (compared within a rounding tolerance).
bool float_sum(shaddr_dtype dt, shaddr_op op);
// An Allreduce result must be bitwise the same on every rank (the value bytes of each element).
void check_identical(const Check &k, const char *res, int count, shaddr_dtype dt,
                     MPI_Datatype t);

// Report text.
inline std::string args_str(const char *call, const std::string &rest) {
  return std::string(call) + "(" + rest + ")";
}
inline std::string cnt(const char *what, MPI_Count count, MPI_Datatype t) {
  return std::string(what) + " " + std::to_string(count) + " x " + type_name(t);
}
inline bool bad_root(const Check &k, int root) { return root < 0 || root >= k.ci->size; }

}  // namespace shaddr::interpose::verify
