// SPDX-License-Identifier: MIT
// Process windows (TRANSLATE / MAP / UNMAP / QUERY / REVOKE), run as root in the VM.
#include <linux/mempolicy.h>
#include <sys/syscall.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shaddr_test_util.h"

using namespace shaddr_test;

namespace {

constexpr uint32_t kRO = SHADDR_PROT_READ;
constexpr uint32_t kRW = SHADDR_PROT_READ | SHADDR_PROT_WRITE;

class Windows : public ModuleTest {
 protected:
  void SetUp() override {
    ModuleTest::SetUp();
    ASSERT_EQ(set_slot_size(fd_, kMiB), 0);
  }
};

// A peer that exports a 1 MiB RW buffer filled with `seed`, sends the handle, and then
// obeys commands: 'c' check byte at offset == value, 'r' remap buffer with a new seed,
// 'z' MADV_DONTNEED, 'm' mremap away and map a fresh buffer at the old address, 'q' quit.
class ExporterPeer {
 public:
  explicit ExporterPeer(uint32_t prot = kRW, unsigned char seed = 0x5a) {
    pid_ = fork();
    if (pid_ == 0) _exit(child(prot, seed));
  }
  ~ExporterPeer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  uint64_t handle() { return handle_ = handle_ ? handle_ : up_.get<uint64_t>(); }
  unsigned char check(size_t off, unsigned char want) {
    down_.put('c');
    down_.put(off);
    down_.put(want);
    return up_.get<unsigned char>();
  }
  void command(char c, unsigned char seed = 0) {
    down_.put(c);
    down_.put(seed);
    EXPECT_EQ(up_.get<char>(), 'k');
  }
  int quit() {
    down_.put('q');
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  int child(uint32_t prot, unsigned char seed) {
    int fd = open_dev();
    if (fd < 0 || set_slot_size(fd, kMiB)) return 10;
    AlignedBuffer buf(kMiB, kMiB);
    memset(buf.data(), seed, kMiB);
    shaddr_translate t;
    if (translate(fd, buf.data(), kMiB, prot, &t)) return 11;
    up_.put(t.handle);
    char *p = buf.data();
    for (;;) {
      char cmd = down_.get<char>();
      if (cmd == 'q') return 0;
      if (cmd == 'c') {
        size_t off = down_.get<size_t>();
        unsigned char want = down_.get<unsigned char>();
        up_.put(static_cast<unsigned char>(p[off] == static_cast<char>(want) ? 1 : 0));
        continue;
      }
      unsigned char s = down_.get<unsigned char>();
      if (cmd == 'r') {
        munmap(p, kMiB);
        if (mmap(p, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) != p)
          return 12;
        memset(p, s, kMiB);
      } else if (cmd == 'z') {
        if (madvise(p, kMiB, MADV_DONTNEED)) return 13;
      } else if (cmd == 'm') {
        void *moved = mremap(p, kMiB, kMiB, MREMAP_MAYMOVE | MREMAP_FIXED,
                             p + 64 * kMiB);
        if (moved == MAP_FAILED) return 14;
        if (mmap(p, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) != p)
          return 15;
        memset(p, s, kMiB);
      }
      up_.put('k');
    }
  }
  Pipe down_, up_;
  pid_t pid_ = -1;
  uint64_t handle_ = 0;
};

}  // namespace

TEST_F(Windows, TranslateReportsSlotAlignedBlocks) {
  AlignedBuffer buf(4 * kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data() + 100, 10, kRW, &t), 0);
  EXPECT_NE(t.handle, 0u);
  EXPECT_EQ(t.base, reinterpret_cast<uint64_t>(buf.data()));
  EXPECT_EQ(t.block_size, kMiB);
  EXPECT_EQ(t.nr_blocks, 1u);
  // A buffer that straddles a block boundary needs two blocks.
  shaddr_translate t2;
  ASSERT_EQ(translate(fd_, buf.data() + kMiB - 8, 16, kRW, &t2), 0);
  EXPECT_EQ(t2.nr_blocks, 2u);
  EXPECT_NE(t2.handle, t.handle);
  EXPECT_EQ(stat_value("exports"), 2);
}

TEST_F(Windows, TranslateRejectsBadInput) {
  AlignedBuffer buf(kMiB, kMiB);
  shaddr_translate t;
  EXPECT_EQ(translate(fd_, buf.data(), 0, kRW, &t), -EINVAL);
  EXPECT_EQ(translate(fd_, reinterpret_cast<void *>(~0ull - 10), 100, kRW, &t), -EINVAL);
  EXPECT_EQ(translate(fd_, reinterpret_cast<void *>(0xffff888000000000ull), 4096, kRW, &t),
            -EINVAL);
  EXPECT_EQ(translate(fd_, buf.data(), 4096, 0, &t), -EINVAL);
  EXPECT_EQ(translate(fd_, buf.data(), 4096, SHADDR_PROT_WRITE, &t), -EINVAL);
  EXPECT_EQ(translate(fd_, buf.data(), 4096, 0x80000001u, &t), -EINVAL);
  t = {};
  t.va = reinterpret_cast<uint64_t>(buf.data());
  t.len = 4096;
  t.prot = kRW;
  t.flags = 1;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_TRANSLATE, &t), -EINVAL);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_TRANSLATE, nullptr), -EFAULT);
  EXPECT_EQ(stat_value("exports"), 0);
}

TEST_F(Windows, SlotSizeIsFixedByFirstUseAndValidated) {
  int fd = open_dev();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(set_slot_size(fd, 12345), -EINVAL);
  EXPECT_EQ(set_slot_size(fd, 2 * kMiB), -EINVAL);
  EXPECT_EQ(set_slot_size(fd, 256 * kMiB), 0);
  EXPECT_EQ(set_slot_size(fd, 16 * kMiB), 0);
  AlignedBuffer buf(kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd, buf.data(), 1, kRO, &t), 0);
  EXPECT_EQ(t.block_size, 16 * kMiB);
  EXPECT_EQ(set_slot_size(fd, kMiB), -EBUSY);
  EXPECT_EQ(xioctl(fd, SHADDR_IOC_SET_SLOT_SIZE, nullptr), -EFAULT);
  close(fd);
}

TEST_F(Windows, ImporterAndExporterSeeEachOthersWrites) {
  ExporterPeer peer(kRW, 0x5a);
  shaddr_map m;
  ASSERT_EQ(map(fd_, peer.handle(), 0, kRW, &m), 0);
  ASSERT_EQ(m.size, kMiB);
  auto *w = reinterpret_cast<volatile unsigned char *>(m.addr);
  // Reads at the start, end and across a page boundary.
  EXPECT_EQ(w[0], 0x5a);
  EXPECT_EQ(w[kMiB - 1], 0x5a);
  EXPECT_EQ(w[kPage - 1], 0x5a);
  EXPECT_EQ(w[kPage], 0x5a);
  // Writes land in the exporter's buffer.
  w[0] = 1;
  w[kPage - 1] = 2;
  w[kPage] = 3;
  w[kMiB - 1] = 4;
  EXPECT_EQ(peer.check(0, 1), 1);
  EXPECT_EQ(peer.check(kPage - 1, 2), 1);
  EXPECT_EQ(peer.check(kPage, 3), 1);
  EXPECT_EQ(peer.check(kMiB - 1, 4), 1);
  EXPECT_GE(stat_value("pages_mapped"), 1);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
  EXPECT_TRUE(exited_ok(peer.quit()));
}

TEST_F(Windows, PresentPagesArePopulatedAtMapTime) {
  ExporterPeer peer(kRW, 7);
  const long long faults0 = stat_value("faults");
  shaddr_map m;
  ASSERT_EQ(map(fd_, peer.handle(), 0, kRO, &m), 0);
  const volatile char *w = reinterpret_cast<const char *>(m.addr);
  long sum = 0;
  for (size_t off = 0; off < kMiB; off += kPage) sum += w[off];
  EXPECT_EQ(sum, 7L * (kMiB / kPage));
  EXPECT_EQ(stat_value("faults"), faults0) << "touched pages should not fault";
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, UntouchedExporterPagesFaultInOnDemand) {
  // A buffer the exporter never touched: the window faults pages in, in the exporter.
  AlignedBuffer buf(kMiB, kMiB, /*touch=*/false);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd_, t.handle, 0, kRW, &m), 0);
  const long long faults0 = stat_value("faults");
  auto *w = reinterpret_cast<volatile char *>(m.addr);
  w[5 * kPage + 3] = 42;
  EXPECT_GT(stat_value("faults"), faults0);
  EXPECT_EQ(buf.data()[5 * kPage + 3], 42);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, ReadOnlyHandleRefusesWrites) {
  ExporterPeer peer(kRO, 9);
  shaddr_map m;
  EXPECT_EQ(map(fd_, peer.handle(), 0, kRW, &m), -EACCES);
  ASSERT_EQ(map(fd_, peer.handle(), 0, kRO, &m), 0);
  auto *w = reinterpret_cast<volatile char *>(m.addr);
  EXPECT_EQ(w[0], 9);
  EXPECT_EQ(access_signal(w, /*write=*/true, 1), SIGSEGV);
  // mprotect cannot add write to a read-only window.
  EXPECT_NE(mprotect(reinterpret_cast<void *>(m.addr), kMiB, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(access_signal(w, /*write=*/true, 1), SIGSEGV);
  EXPECT_EQ(access_signal(w), 0);
  EXPECT_EQ(peer.check(0, 9), 1);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, SlotCapGivesENOSPCAndUnmapFreesSlot) {
  AlignedBuffer buf(8 * kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), 8 * kMiB, kRW, &t), 0);
  ASSERT_EQ(t.nr_blocks, 8u);
  const long long refusals0 = stat_value("refusals");
  shaddr_map m[4];
  for (int i = 0; i < 3; i++) ASSERT_EQ(map(fd_, t.handle, i, kRW, &m[i]), 0) << i;
  EXPECT_EQ(map(fd_, t.handle, 3, kRW, &m[3]), -ENOSPC);
  EXPECT_EQ(stat_value("refusals"), refusals0 + 1);
  EXPECT_EQ(stat_value("windows"), 3);
  EXPECT_EQ(unmap_addr(fd_, m[1].addr), 0);
  ASSERT_EQ(map(fd_, t.handle, 3, kRW, &m[3]), 0);
  EXPECT_EQ(m[3].slot, m[1].slot);
  // Unmap by slot index; a free slot or unknown address is -ENOENT.
  shaddr_unmap u{};
  u.flags = SHADDR_UNMAP_BY_SLOT;
  u.slot = m[0].slot;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_UNMAP, &u), 0);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_UNMAP, &u), -ENOENT);
  EXPECT_EQ(unmap_addr(fd_, 0x1000), -ENOENT);
  u.slot = 99;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_UNMAP, &u), -EINVAL);
  u.flags = 0x80;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_UNMAP, &u), -EINVAL);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_UNMAP, nullptr), -EFAULT);
  // munmap() of a window frees its slot too.
  EXPECT_EQ(munmap(reinterpret_cast<void *>(m[2].addr), kMiB), 0);
  EXPECT_EQ(stat_value("windows"), 1);
  EXPECT_EQ(unmap_addr(fd_, m[3].addr), 0);
}

TEST_F(Windows, StraddlingBufferNeedsTwoWindows) {
  AlignedBuffer buf(2 * kMiB, kMiB);
  char *p = buf.data() + kMiB - 2;
  memcpy(p, "abcd", 4);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, p, 4, kRO, &t), 0);
  ASSERT_EQ(t.nr_blocks, 2u);
  shaddr_map a, b, c;
  ASSERT_EQ(map(fd_, t.handle, 0, kRO, &a), 0);
  ASSERT_EQ(map(fd_, t.handle, 1, kRO, &b), 0);
  EXPECT_EQ(map(fd_, t.handle, 2, kRO, &c), -EINVAL);
  const char *wa = reinterpret_cast<const char *>(a.addr);
  const char *wb = reinterpret_cast<const char *>(b.addr);
  EXPECT_EQ(memcmp(wa + kMiB - 2, "ab", 2), 0);
  EXPECT_EQ(memcmp(wb, "cd", 2), 0);
  EXPECT_EQ(unmap_addr(fd_, a.addr), 0);
  EXPECT_EQ(unmap_addr(fd_, b.addr), 0);
}

TEST_F(Windows, QueryDescribesSlots) {
  ExporterPeer peer(kRW, 1);
  shaddr_map m;
  ASSERT_EQ(map(fd_, peer.handle(), 0, kRO, &m), 0);
  shaddr_query q;
  memset(&q, 0xff, sizeof(q));
  ASSERT_EQ(xioctl(fd_, SHADDR_IOC_QUERY, &q), 0);
  EXPECT_EQ(q.nr_slots, 3u);
  EXPECT_EQ(q.nr_mapped, 1u);
  EXPECT_EQ(q.slot_size, kMiB);
  const shaddr_slot_info &s = q.slots[m.slot];
  EXPECT_EQ(s.state, static_cast<uint32_t>(SHADDR_SLOT_MAPPED));
  EXPECT_EQ(s.prot, kRO);
  EXPECT_GT(s.peer, 0);
  EXPECT_EQ(s.handle, peer.handle());
  EXPECT_EQ(s.addr, m.addr);
  EXPECT_EQ(s.size, kMiB);
  for (unsigned i = q.nr_slots; i < SHADDR_MAX_SLOTS; i++) EXPECT_EQ(q.slots[i].state, 0u);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_QUERY, nullptr), -EFAULT);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, ExporterRemapIsSeenNeverStale) {
  ExporterPeer peer(kRW, 0x11);
  shaddr_map m;
  ASSERT_EQ(map(fd_, peer.handle(), 0, kRW, &m), 0);
  auto *w = reinterpret_cast<volatile unsigned char *>(m.addr);
  ASSERT_EQ(w[100], 0x11);
  const long long inval0 = stat_value("invalidations");
  peer.command('r', 0x22);  // munmap + mmap(MAP_FIXED) at the same address
  EXPECT_EQ(w[100], 0x22);
  EXPECT_EQ(w[kMiB - 1], 0x22);
  EXPECT_GT(stat_value("invalidations"), inval0);
  peer.command('z');  // MADV_DONTNEED: anonymous memory reads back as zero
  EXPECT_EQ(w[100], 0);
  w[200] = 0x77;  // and the refaulted page is the exporter's new one
  EXPECT_EQ(peer.check(200, 0x77), 1);
  peer.command('m', 0x33);  // mremap away, fresh mapping at the old address
  EXPECT_EQ(w[100], 0x33);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
  EXPECT_TRUE(exited_ok(peer.quit()));
}

TEST_F(Windows, ExporterExitGivesSIGBUS) {
  shaddr_map m{};
  {
    ExporterPeer peer(kRW, 3);
    ASSERT_EQ(map(fd_, peer.handle(), 0, kRO, &m), 0);
    EXPECT_EQ(reinterpret_cast<volatile char *>(m.addr)[0], 3);
    EXPECT_TRUE(exited_ok(peer.quit()));
  }
  auto *w = reinterpret_cast<volatile char *>(m.addr);
  EXPECT_EQ(access_signal(w + 3 * kPage), SIGBUS);
  EXPECT_EQ(access_signal(w), SIGBUS);  // populated before: zapped at exit
  EXPECT_EQ(access_signal(w, /*write=*/true, 1), SIGSEGV);  // read-only window
  shaddr_query q;
  ASSERT_EQ(xioctl(fd_, SHADDR_IOC_QUERY, &q), 0);
  EXPECT_EQ(q.slots[m.slot].state, static_cast<uint32_t>(SHADDR_SLOT_DEAD));
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, HolesInTheBlockGiveSIGBUS) {
  AlignedBuffer buf(2 * kMiB, kMiB);
  // Punch a hole in the middle of the first block.
  ASSERT_EQ(munmap(buf.data() + 64 * kPage, 16 * kPage), 0);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRO, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd_, t.handle, 0, kRO, &m), 0);
  auto *w = reinterpret_cast<volatile char *>(m.addr);
  EXPECT_EQ(access_signal(w), 0);
  EXPECT_EQ(access_signal(w + 70 * kPage), SIGBUS);
  EXPECT_EQ(access_signal(w + 80 * kPage), 0);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, ForgedAndRevokedHandlesFail) {
  shaddr_map m;
  EXPECT_EQ(map(fd_, 0, 0, kRO, &m), -ENOENT);
  EXPECT_EQ(map(fd_, 0x123456789abcdefull, 0, kRO, &m), -ENOENT);
  AlignedBuffer buf(kMiB, kMiB);
  buf.data()[0] = 1;
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  EXPECT_EQ(map(fd_, t.handle ^ 1, 0, kRO, &m), -ENOENT);
  ASSERT_EQ(map(fd_, t.handle, 0, kRO, &m), 0);
  uint64_t h = t.handle;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_REVOKE, &h), 0);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_REVOKE, &h), -ENOENT);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_REVOKE, nullptr), -EFAULT);
  shaddr_map m2;
  EXPECT_EQ(map(fd_, h, 0, kRO, &m2), -ENOENT);
  EXPECT_EQ(access_signal(reinterpret_cast<volatile char *>(m.addr)), SIGBUS);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, OtherUnprivilegedUserGetsEPERM) {
  ExporterPeer peer(kRW, 1);  // runs as root
  const uint64_t handle = peer.handle();
  const long long refusals0 = stat_value("refusals");
  int status = run_in_child([&] {
    if (setgid(65534) || setuid(65534)) return 10;
    int fd = open_dev();
    if (fd < 0) return 11;
    shaddr_map m;
    if (map(fd, handle, 0, kRO, &m) != -EPERM) return 12;
    if (map(fd, handle, 0, kRW, &m) != -EPERM) return 13;
    return 0;
  });
  EXPECT_TRUE(exited_ok(status)) << status;
  EXPECT_EQ(stat_value("refusals"), refusals0 + 2);
}

TEST_F(Windows, MapRejectsBadInput) {
  AlignedBuffer buf(kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  shaddr_map m;
  EXPECT_EQ(map(fd_, t.handle, 0, 0, &m), -EINVAL);
  EXPECT_EQ(map(fd_, t.handle, 0, SHADDR_PROT_WRITE, &m), -EINVAL);
  EXPECT_EQ(map(fd_, t.handle, 1, kRO, &m), -EINVAL);
  EXPECT_EQ(map(fd_, t.handle, ~0u, kRO, &m), -EINVAL);
  m = {};
  m.handle = t.handle;
  m.prot = kRO;
  m.flags = 4;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_MAP, &m), -EINVAL);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_MAP, nullptr), -EFAULT);
  EXPECT_EQ(stat_value("windows"), 0);
}

TEST_F(Windows, PlainMmapOfDeviceIsRefused) {
  void *p = mmap(nullptr, kMiB, PROT_READ, MAP_SHARED, fd_, 0);
  EXPECT_EQ(p, MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Windows, WindowCannotBeSplitOrMoved) {
  AlignedBuffer buf(kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd_, t.handle, 0, kRW, &m), 0);
  void *w = reinterpret_cast<void *>(m.addr);
  EXPECT_NE(munmap(static_cast<char *>(w) + kPage, kPage), 0);
  EXPECT_EQ(mremap(w, kMiB, 2 * kMiB, MREMAP_MAYMOVE), MAP_FAILED);
  EXPECT_EQ(mremap(w, kMiB, kMiB / 2, 0), MAP_FAILED);
  EXPECT_EQ(stat_value("windows"), 1);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, InheritedFileIsRefusedInAnotherAddressSpace) {
  AlignedBuffer buf(kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd_, t.handle, 0, kRW, &m), 0);
  int status = run_in_child([&] {
    shaddr_translate t2;
    shaddr_map m2;
    if (translate(fd_, buf.data(), kMiB, kRW, &t2) != -EBADFD) return 10;
    if (map(fd_, t.handle, 0, kRW, &m2) != -EBADFD) return 11;
    // The window itself is not inherited across fork.
    if (msync(reinterpret_cast<void *>(m.addr), kPage, MS_ASYNC) == 0) return 12;
    return 0;
  });
  EXPECT_TRUE(exited_ok(status)) << status;
  reinterpret_cast<volatile char *>(m.addr)[0] = 5;
  EXPECT_EQ(buf.data()[0], 5);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, ExporterForkWithCopyOnWriteStaysCoherent) {
  AlignedBuffer buf(kMiB, kMiB);
  memset(buf.data(), 1, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd_, t.handle, 0, kRW, &m), 0);
  auto *w = reinterpret_cast<volatile char *>(m.addr);
  Pipe sync;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child's copy must not change when the parent writes through the window.
    sync.get<char>();
    _exit(buf.data()[0] == 1 ? 0 : 1);
  }
  w[0] = 2;  // parent writes through its window after the fork (COW broken in parent)
  EXPECT_EQ(buf.data()[0], 2);
  buf.data()[1] = 3;  // and writes directly: the window sees the parent's current page
  EXPECT_EQ(w[1], 3);
  sync.put('g');
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(exited_ok(status));
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, ThreadsMapAndUnmapConcurrently) {
  AlignedBuffer buf(8 * kMiB, kMiB);
  for (size_t i = 0; i < 8; i++) buf.data()[i * kMiB] = static_cast<char>(i + 1);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), 8 * kMiB, kRW, &t), 0);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; th++) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < 200; i++) {
        uint32_t block = (th * 7 + i) % 8;
        shaddr_map m;
        int r = map(fd_, t.handle, block, kRO, &m);
        if (r == -ENOSPC) continue;
        if (r) {
          bad++;
          continue;
        }
        if (reinterpret_cast<volatile char *>(m.addr)[0] != static_cast<char>(block + 1)) bad++;
        if (unmap_addr(fd_, m.addr)) bad++;
      }
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(stat_value("windows"), 0);
}

TEST_F(Windows, CloseReleasesEverything) {
  int fd = open_dev();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(set_slot_size(fd, kMiB), 0);
  AlignedBuffer buf(2 * kMiB, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd, buf.data(), 2 * kMiB, kRW, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd, t.handle, 1, kRW, &m), 0);
  close(fd);  // the window VMA still holds the file
  EXPECT_EQ(stat_value("windows"), 1);
  reinterpret_cast<volatile char *>(m.addr)[0] = 9;
  EXPECT_EQ(buf.data()[kMiB], 9);
  EXPECT_EQ(munmap(reinterpret_cast<void *>(m.addr), kMiB), 0);
}

TEST_F(Windows, ExporterExitWhileImporterCopiesGivesSIGBUS) {
  ExporterPeer peer(kRW, 0x42);
  shaddr_map m;
  ASSERT_EQ(map(fd_, peer.handle(), 0, kRO, &m), 0);
  std::atomic<int> sig{0};
  std::atomic<bool> started{false};
  // Copy the window over and over in this process until the exporter's exit shows.
  std::thread copier([&] {
    auto *w = reinterpret_cast<volatile char *>(m.addr);
    // Every read goes through access_signal(), which catches the signal it raises.
    for (int round = 0; round < 100000 && !sig; round++) {
      for (size_t off = 0; off < kMiB; off += 64) {
        int s = access_signal(w + off);
        if (s) {
          sig = s;
          break;
        }
      }
      started = true;
    }
  });
  while (!started) std::this_thread::yield();
  EXPECT_TRUE(exited_ok(peer.quit()));
  copier.join();
  EXPECT_EQ(sig.load(), SIGBUS);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}

TEST_F(Windows, HandlesPerFileAreCapped) {
  AlignedBuffer buf(kMiB, kMiB);
  shaddr_translate t;
  int n = 0, r = 0;
  uint64_t last = 0;
  while (n < 100000 && (r = translate(fd_, buf.data(), 1, kRO, &t)) == 0) {
    last = t.handle;
    n++;
  }
  EXPECT_EQ(r, -ENOSPC);
  EXPECT_EQ(n, 256) << "module parameter max_exports defaults to 256";
  uint64_t h = last;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_REVOKE, &h), 0);
  EXPECT_EQ(translate(fd_, buf.data(), 1, kRO, &t), 0);
}

TEST_F(Windows, ExporterPageMigrationIsFollowed) {
  if (access("/sys/devices/system/node/node1", F_OK) != 0)
    GTEST_SKIP() << "needs two NUMA nodes (tools/shaddr-vm --numa 2, the default)";
  // Small pages: move_pages() on part of a THP reports some pages busy (seen on 6.12).
  AlignedBuffer buf(kMiB, kMiB, /*touch=*/false);
  ASSERT_EQ(madvise(buf.data(), kMiB, MADV_NOHUGEPAGE), 0);
  memset(buf.data(), 0x61, kMiB);
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, buf.data(), kMiB, kRW, &t), 0);
  shaddr_map m;
  ASSERT_EQ(map(fd_, t.handle, 0, kRW, &m), 0);
  auto *w = reinterpret_cast<volatile char *>(m.addr);
  ASSERT_EQ(w[0], 0x61);

  // Move every page of the exporter's buffer to the other node.
  constexpr int kPages = kMiB / kPage;
  std::vector<void *> pages(kPages);
  std::vector<int> where(kPages, -1), status(kPages, -1);
  for (int i = 0; i < kPages; i++) pages[i] = buf.data() + i * kPage;
  ASSERT_EQ(syscall(SYS_move_pages, 0, kPages, pages.data(), nullptr, where.data(), 0), 0);
  const int target = where[0] == 0 ? 1 : 0;
  std::vector<int> nodes(kPages, target);
  const long long inval0 = stat_value("invalidations");
  ASSERT_EQ(syscall(SYS_move_pages, 0, kPages, pages.data(), nodes.data(), status.data(),
                    MPOL_MF_MOVE),
            0)
      << strerror(errno);
  int moved = 0;
  std::string stuck;
  for (int i = 0; i < kPages; i++) {
    if (status[i] == target)
      moved++;
    else
      stuck += " page " + std::to_string(i) + ": " + std::to_string(status[i]);
  }
  EXPECT_EQ(moved, kPages) << "pages mapped by a window must still migrate (none are pinned):"
                           << stuck;
  EXPECT_GT(stat_value("invalidations"), inval0);

  // The window follows the exporter's new pages, in both directions.
  EXPECT_EQ(w[5 * kPage], 0x61);
  w[7 * kPage] = 0x62;
  EXPECT_EQ(buf.data()[7 * kPage], 0x62);
  buf.data()[9 * kPage] = 0x63;
  EXPECT_EQ(w[9 * kPage], 0x63);
  EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
}
