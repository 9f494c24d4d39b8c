// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1 (verify.h): a (count, datatype)'s type signature as one number.
#include "verify_check.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "state.h"
#include "verify.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose::verify {

namespace {

// ---- Type signatures ------------------------------------------------------------------------
// The sequence of basic types that (count, datatype) stands for, as a polynomial hash
// h = sum t_i * B^(n-1-i) (mod 2^64) of the basic types' ids t_i, and its length n. Grouping does
// not change it (contiguous(2, MPI_INT) has the signature of two MPI_INT) and displacements do
// not enter, as in MPI's type matching rule. A basic type's id is a hash of its MPI name (the
// handles themselves differ between processes in Open MPI).
struct Sig {
  uint64_t h = 0;
  uint64_t n = 0;
  bool ok = true;
};
constexpr uint64_t kBase = shaddr::hash_mix(shaddr::kHashSeed, 1) | 1;  // any odd number

uint64_t pow_base(uint64_t e) {
  uint64_t r = 1, b = kBase;
  for (; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return r;
}
Sig concat(const Sig &a, const Sig &b) { return {a.h * pow_base(b.n) + b.h, a.n + b.n, a.ok && b.ok}; }
Sig repeat(Sig a, uint64_t k) {
  Sig r;
  for (; k; k >>= 1) {
    if (k & 1) r = concat(r, a);
    if (k > 1) a = concat(a, a);
  }
  r.ok = r.ok && a.ok;
  return r;
}

}  // namespace

std::string type_name(MPI_Datatype t) {
  char name[MPI_MAX_OBJECT_NAME] = "";
  int len = 0;
  if (t == MPI_DATATYPE_NULL) return "MPI_DATATYPE_NULL";
  if (PMPI_Type_get_name(t, name, &len) != MPI_SUCCESS || !name[0]) {
    MPI_Count size = 0;
    PMPI_Type_size_x(t, &size);
    return "derived type of " + std::to_string(size) + " bytes";
  }
  return name;
}

namespace {

std::map<MPI_Datatype, Sig> g_named;  // predefined handles do not change within a process
int g_type_kv = MPI_KEYVAL_INVALID;   // derived types: the signature cached as an attribute

int sig_delete(MPI_Datatype, int, void *attr, void *) {
  delete static_cast<Sig *>(attr);
  return MPI_SUCCESS;
}

Sig sig_of(MPI_Datatype t, int depth = 0) {
  Sig bad;
  bad.ok = false;
  int ni = 0, na = 0, nd = 0, comb = 0;
  if (t == MPI_DATATYPE_NULL || depth > 32 ||
      PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS)
    return bad;
  if (comb == MPI_COMBINER_NAMED) {
    auto it = g_named.find(t);
    if (it != g_named.end()) return it->second;
    const std::string n = type_name(t);
    const Sig s{shaddr::hash_bytes(n.data(), n.size()) | 1, 1, true};
    g_named[t] = s;
    return s;
  }
  if (g_type_kv == MPI_KEYVAL_INVALID)
    PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, sig_delete, &g_type_kv, nullptr);
  if (g_type_kv != MPI_KEYVAL_INVALID) {
    void *v = nullptr;
    int flag = 0;
    if (PMPI_Type_get_attr(t, g_type_kv, &v, &flag) == MPI_SUCCESS && flag)
      return *static_cast<Sig *>(v);
  }
  std::vector<int> ints(static_cast<size_t>(std::max(ni, 1)));
  std::vector<MPI_Aint> addrs(static_cast<size_t>(std::max(na, 1)));
  std::vector<MPI_Datatype> types(static_cast<size_t>(std::max(nd, 1)), MPI_DATATYPE_NULL);
  if (PMPI_Type_get_contents(t, ni, na, nd, ints.data(), addrs.data(), types.data()) !=
      MPI_SUCCESS)
    return bad;
  auto n_of = [](int x) { return static_cast<uint64_t>(std::max(x, 0)); };
  Sig s = bad;
  switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED:
      s = sig_of(types[0], depth + 1);
      break;
    case MPI_COMBINER_CONTIGUOUS:
      s = repeat(sig_of(types[0], depth + 1), n_of(ints[0]));
      break;
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR:
    case MPI_COMBINER_INDEXED_BLOCK:
    case MPI_COMBINER_HINDEXED_BLOCK:
      s = repeat(sig_of(types[0], depth + 1), n_of(ints[0]) * n_of(ints[1]));
      break;
    case MPI_COMBINER_INDEXED:
    case MPI_COMBINER_HINDEXED: {
      uint64_t k = 0;
      for (int i = 0; i < ints[0]; i++) k += n_of(ints[1 + i]);
      s = repeat(sig_of(types[0], depth + 1), k);
      break;
    }
    case MPI_COMBINER_STRUCT: {
      Sig acc;
      for (int i = 0; i < ints[0]; i++) acc = concat(acc, repeat(sig_of(types[i], depth + 1), n_of(ints[1 + i])));
      s = acc;
      break;
    }
    case MPI_COMBINER_SUBARRAY: {
      uint64_t k = 1;
      for (int i = 0; i < ints[0]; i++) k *= n_of(ints[1 + ints[0] + i]);
      s = repeat(sig_of(types[0], depth + 1), k);
      break;
    }
    default: {
      // DARRAY, the Fortran combiners and anything newer: as many elements of the old type as
      // fit its size, or (no old type) the combiner and the size stand for the type.
      MPI_Count size = 0, old = 0;
      PMPI_Type_size_x(t, &size);
      if (nd == 1 && PMPI_Type_size_x(types[0], &old) == MPI_SUCCESS && old > 0) {
        s = repeat(sig_of(types[0], depth + 1), static_cast<uint64_t>(size / old));
      } else {
        const uint64_t id[2] = {static_cast<uint64_t>(comb), static_cast<uint64_t>(size)};
        s = Sig{shaddr::hash_bytes(id, sizeof id) | 1, 1, true};
      }
    }
  }
  for (int i = 0; i < nd; i++) {
    int a = 0, b = 0, c = 0, cb = 0;
    if (PMPI_Type_get_envelope(types[i], &a, &b, &c, &cb) == MPI_SUCCESS &&
        cb != MPI_COMBINER_NAMED)
      PMPI_Type_free(&types[i]);
  }
  if (s.ok && g_type_kv != MPI_KEYVAL_INVALID)
    PMPI_Type_set_attr(t, g_type_kv, new Sig(s));
  return s;
}

}  // namespace

// One number for (count, type)'s signature; 0 when it could not be taken apart.
uint64_t digest(MPI_Count count, MPI_Datatype t) {
  const Sig s = repeat(sig_of(t), static_cast<uint64_t>(std::max<MPI_Count>(count, 0)));
  if (!s.ok) return 0;
  const uint64_t v[2] = {s.h, s.n};
  return shaddr::hash_bytes(v, sizeof v);
}

}  // namespace shaddr::interpose::verify
