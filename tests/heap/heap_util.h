// Shared by the heap tests and their helper programs.
#pragma once

#include <cstdint>

// What the parent tells a peer with the heap's fd (tests/heap/heap_helper.cc "peer").
struct PeerMsg {
  std::uint64_t offset;    // of the buffer in the heap file
  std::uint64_t len;       // of the buffer
  std::uint64_t reserved;  // size of the heap's range: what the peer maps
  std::uint32_t seed;      // the buffer holds pattern(seed, i); 0: done
  std::uint32_t pad;
};

inline unsigned char pattern(std::uint32_t seed, std::uint64_t i) {
  return static_cast<unsigned char>((i * 2654435761u + seed) >> 7);
}
