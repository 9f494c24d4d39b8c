// Shared by the heap tests and their helper programs.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
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

// From now on memfd_create() fails with EPERM in this process and its children (seccomp).
inline bool refuse_memfd() {
  sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}
