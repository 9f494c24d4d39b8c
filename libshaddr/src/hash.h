// SPDX-License-Identifier: MIT
// The one hash of the library and its glue: digests compared between ranks (settings, the cost
// model, plans, a call's ledger token, the interposer's checks) and file keys. Not
// cryptographic: ranks of one job compare what each computed with the same code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shaddr {

constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;  // FNV-1a's offset basis

// @h with the bytes [p, p + n) (FNV-1a). Byte by byte, so that text hashes alike on every
// machine; the calibration files are named by it (plan_model.cc machine_key), so it stays.
inline uint64_t hash_bytes(const void *p, size_t n, uint64_t h = kHashSeed) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// @h with one 64-bit value: splitmix64's finaliser of h ^ v, two multiplies, so that a token
// of a few words costs a few nanoseconds and every input bit reaches every output bit.
constexpr uint64_t hash_mix(uint64_t h, uint64_t v) {
  uint64_t x = (h ^ v) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace shaddr
