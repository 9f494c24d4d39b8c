// SPDX-License-Identifier: MIT
// Read-only exporter memory (.rodata, mprotect'ed anonymous memory, read-only file mappings)
// through attachments and windows, run as root in the VM: read-only importers read it;
// read-write importers read it too (read-only PTEs) and a write there raises SIGSEGV, never
// SIGBUS; the exporter's memory never changes through them; protection changes after the
// attach are followed both ways.
#include <sys/syscall.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "shaddr_test_util.h"

using namespace shaddr_test;

namespace {

// Aligned to its size, so that its pages hold nothing but it and one 1 MiB window shows it;
// const: the linker puts it in .rodata.
alignas(4 * 4096) const unsigned char kTable[4 * 4096] = {0x7e, 0x11, 0x22, 0x33};

constexpr uint32_t kRO = SHADDR_PROT_READ;
constexpr uint32_t kRW = SHADDR_PROT_READ | SHADDR_PROT_WRITE;

// The kinds of read-only memory a send buffer can be; each is 4 pages, page-aligned (the mapped
// ones at the start of a 1 MiB block, so that one window shows them).
class ReadOnlyRegion {
 public:
  enum Kind { kRodata, kMprotected, kFileShared, kFilePrivate };
  explicit ReadOnlyRegion(Kind kind) : kind_(kind) {
    if (kind == kRodata) {
      data_ = const_cast<unsigned char *>(kTable);
      return;
    }
    reserved_ = mmap(nullptr, 2 * kMiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (reserved_ == MAP_FAILED) abort();
    void *spot = reinterpret_cast<void *>((reinterpret_cast<uintptr_t>(reserved_) + kMiB - 1) &
                                          ~(kMiB - 1));
    if (kind == kMprotected) {
      data_ = static_cast<unsigned char *>(mmap(spot, kSize, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
      if (data_ == MAP_FAILED) abort();
      memset(data_, 0x7e, kSize);
      if (mprotect(data_, kSize, PROT_READ)) abort();
      return;
    }
    int fd = memfd_create("shaddr-ro", MFD_CLOEXEC);
    if (fd < 0) abort();
    unsigned char page[kSize];
    memset(page, 0x7e, kSize);
    if (write(fd, page, kSize) != static_cast<ssize_t>(kSize)) abort();
    int rofd = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY);
    close(fd);
    if (rofd < 0) abort();
    data_ = static_cast<unsigned char *>(
        mmap(spot, kSize, PROT_READ, (kind == kFileShared ? MAP_SHARED : MAP_PRIVATE) | MAP_FIXED,
             rofd, 0));
    close(rofd);
    if (data_ == MAP_FAILED) abort();
  }
  ~ReadOnlyRegion() {
    if (kind_ != kRodata) munmap(reserved_, 2 * kMiB);
  }
  ReadOnlyRegion(const ReadOnlyRegion &) = delete;
  ReadOnlyRegion &operator=(const ReadOnlyRegion &) = delete;
  unsigned char *data() const { return data_; }
  static constexpr size_t kSize = 4 * kPage;

 private:
  Kind kind_;
  void *reserved_ = nullptr;
  unsigned char *data_ = nullptr;
};

class SelfSegment : public ModuleTest {
 protected:
  // This process's whole address space as a segment, and an access id to it.
  void segment(uint32_t access) {
    ASSERT_EQ(seg_make(fd_, nullptr, ~0ull, 0600, &segid_), 0);
    ASSERT_EQ(seg_get(fd_, segid_, access, &apid_), 0);
  }
  void TearDown() override {
    if (apid_) {
      EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_RELEASE, apid_), 0);
    }
    if (segid_) {
      EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_REMOVE, segid_), 0);
    }
    ModuleTest::TearDown();
  }
  uint64_t segid_ = 0, apid_ = 0;
};

std::string kind_name(const ::testing::TestParamInfo<ReadOnlyRegion::Kind> &info) {
  static const char *const names[] = {"Rodata", "Mprotected", "FileShared", "FilePrivate"};
  return names[info.param];
}

class ReadOnly : public SelfSegment,
                 public ::testing::WithParamInterface<ReadOnlyRegion::Kind> {};
class ReadOnlyChanges : public SelfSegment {};

// Reads every page of the region through p, then tries a write: `write_sig` expected.
void expect_read_only_view(const unsigned char *src, unsigned char *p, int write_sig) {
  for (size_t off = 0; off < ReadOnlyRegion::kSize; off += kPage) {
    ASSERT_EQ(access_signal(reinterpret_cast<char *>(p + off)), 0) << "page " << off / kPage;
    EXPECT_EQ(p[off], src[off]);
  }
  const unsigned char before = src[kPage];
  EXPECT_EQ(access_signal(reinterpret_cast<char *>(p + kPage), true, 0x55), write_sig);
  EXPECT_EQ(src[kPage], before) << "the exporter's read-only page changed";
  // Once refused, still readable, and refused again.
  EXPECT_EQ(access_signal(reinterpret_cast<char *>(p + kPage)), 0);
  EXPECT_EQ(access_signal(reinterpret_cast<char *>(p + kPage), true, 0x55), write_sig);
}

}  // namespace

TEST_P(ReadOnly, ReadOnlyAttachmentReadsItAndRefusesWrites) {
  ReadOnlyRegion r(GetParam());
  segment(SHADDR_SEG_RDONLY);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(r.data()), r.kSize, &p), 0);
  expect_read_only_view(r.data(), reinterpret_cast<unsigned char *>(p), SIGSEGV);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

// What an XPMEM user that always attaches XPMEM_RDWR gets (MPI libraries do): reads work, a
// write gets SIGSEGV, pages the exporter may write stay writable in the same attachment.
TEST_P(ReadOnly, ReadWriteAttachmentReadsItAndWritesGetSIGSEGV) {
  ReadOnlyRegion r(GetParam());
  AlignedBuffer rw(kPage, kPage);
  segment(SHADDR_SEG_RDWR);
  char *p, *q;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(r.data()), r.kSize, &p), 0);
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(rw.data()), kPage, &q), 0);
  expect_read_only_view(r.data(), reinterpret_cast<unsigned char *>(p), SIGSEGV);
  EXPECT_EQ(access_signal(q, true, 0x66), 0);
  EXPECT_EQ(rw.data()[0], 0x66);
  EXPECT_EQ(seg_detach(fd_, p), 0);
  EXPECT_EQ(seg_detach(fd_, q), 0);
}

TEST_P(ReadOnly, WindowsMapItForReadingAndRefuseWrites) {
  ReadOnlyRegion r(GetParam());
  ASSERT_EQ(set_slot_size(fd_, kMiB), 0);
  const uintptr_t block = reinterpret_cast<uintptr_t>(r.data()) & ~(kMiB - 1);
  const size_t off = reinterpret_cast<uintptr_t>(r.data()) - block;
  ASSERT_LE(off + r.kSize, kMiB) << "the region straddles a 1 MiB block";
  shaddr_translate t;
  ASSERT_EQ(translate(fd_, reinterpret_cast<void *>(block), kMiB, kRW, &t), 0);
  for (uint32_t prot : {kRO, kRW}) {
    shaddr_map m;
    ASSERT_EQ(map(fd_, t.handle, 0, prot, &m), 0);
    expect_read_only_view(r.data(), reinterpret_cast<unsigned char *>(m.addr) + off, SIGSEGV);
    EXPECT_EQ(unmap_addr(fd_, m.addr), 0);
  }
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_REVOKE, t.handle), 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, ReadOnly,
                         ::testing::Values(ReadOnlyRegion::kRodata, ReadOnlyRegion::kMprotected,
                                           ReadOnlyRegion::kFileShared,
                                           ReadOnlyRegion::kFilePrivate),
                         kind_name);

// The exporter's protection changes after the attach: each change is followed, both ways.
TEST_F(ReadOnlyChanges, ProtectionChangesAfterAttachAreFollowed) {
  AlignedBuffer buf(4 * kPage, kPage);
  memset(buf.data(), 0x10, 4 * kPage);
  segment(SHADDR_SEG_RDWR);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(buf.data()), 4 * kPage, &p), 0);
  EXPECT_EQ(access_signal(p + kPage, true, 0x11), 0);
  EXPECT_EQ(buf.data()[kPage], 0x11);
  ASSERT_EQ(mprotect(buf.data(), 4 * kPage, PROT_READ), 0);
  EXPECT_EQ(access_signal(p + kPage), 0);
  EXPECT_EQ(p[kPage], 0x11);
  EXPECT_EQ(access_signal(p + kPage, true, 0x12), SIGSEGV);
  EXPECT_EQ(buf.data()[kPage], 0x11);
  // PROT_NONE: a hole to the importer (SIGBUS), which the library never reads (it fails the
  // collective first); readable again once the exporter says so.
  ASSERT_EQ(mprotect(buf.data(), 4 * kPage, PROT_NONE), 0);
  EXPECT_EQ(access_signal(p + kPage), SIGBUS);
  ASSERT_EQ(mprotect(buf.data(), 4 * kPage, PROT_READ), 0);
  EXPECT_EQ(access_signal(p + kPage), 0);
  EXPECT_EQ(access_signal(p + kPage, true, 0x13), SIGSEGV);
  ASSERT_EQ(mprotect(buf.data(), 4 * kPage, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(access_signal(p + kPage, true, 0x14), 0);
  EXPECT_EQ(buf.data()[kPage], 0x14);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

// A private file mapping's page read through an attachment is the page cache's until the
// exporter writes it; then the importer sees the exporter's private copy, not the file's.
TEST_F(ReadOnlyChanges, PrivateFilePageFollowsTheExportersCopyOnWrite) {
  int fd = memfd_create("shaddr-cow", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  char page[kPage];
  memset(page, 0x20, kPage);
  ASSERT_EQ(write(fd, page, kPage), static_cast<ssize_t>(kPage));
  auto *m = static_cast<char *>(
      mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
  ASSERT_NE(m, MAP_FAILED);
  segment(SHADDR_SEG_RDONLY);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(m), kPage, &p), 0);
  EXPECT_EQ(p[5], 0x20);
  m[5] = 0x21;  // copy-on-write in the exporter
  EXPECT_EQ(p[5], 0x21) << "the importer must follow the exporter's copy";
  char file_byte = 0;
  ASSERT_EQ(pread(fd, &file_byte, 1, 5), 1);
  EXPECT_EQ(file_byte, 0x20) << "a private mapping never writes the file";
  EXPECT_EQ(seg_detach(fd_, p), 0);
  munmap(m, kPage);
  close(fd);
}

// Another thread flips the exporter's protection while this one writes through a read-write
// attachment: each write either lands (the page was writable) or gets SIGSEGV, never SIGBUS,
// and the last one, with the page writable again, lands.
TEST_F(ReadOnlyChanges, ProtectionFlippedByAnotherThreadWhileWriting) {
  AlignedBuffer buf(kPage, kPage);
  segment(SHADDR_SEG_RDWR);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(buf.data()), kPage, &p), 0);
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    for (unsigned i = 0; !stop.load(); i++)
      mprotect(buf.data(), kPage, i & 1 ? PROT_READ : PROT_READ | PROT_WRITE);
  });
  int landed = 0, refused = 0, other = 0;
  for (int i = 0; i < 3000; i++) {
    const int sig = access_signal(p + (i % 64) * 8, true, static_cast<char>(i));
    (sig == 0 ? landed : sig == SIGSEGV ? refused : other)++;
    if (access_signal(p) != 0) other++;
  }
  stop = true;
  flipper.join();
  EXPECT_EQ(other, 0) << "a read or write raised another signal (SIGBUS)";
  ASSERT_EQ(mprotect(buf.data(), kPage, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(access_signal(p + 100, true, 0x42), 0);
  EXPECT_EQ(buf.data()[100], 0x42);
  std::printf("writes landed %d, refused %d\n", landed, refused);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

// The exporter forks with a read-only page attached read-write, then makes it writable and
// writes it (copy-on-write: its page is replaced): the importer follows the exporter's new
// page, writes land there, and the child's copy never changes.
TEST_F(ReadOnlyChanges, ForkThenWritableAgainFollowsTheExportersCopy) {
  AlignedBuffer buf(kPage, kPage);
  memset(buf.data(), 0x30, kPage);
  ASSERT_EQ(mprotect(buf.data(), kPage, PROT_READ), 0);
  segment(SHADDR_SEG_RDWR);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(buf.data()), kPage, &p), 0);
  EXPECT_EQ(p[1], 0x30);
  EXPECT_EQ(access_signal(p + 1, true, 0x31), SIGSEGV);
  Pipe go, done;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    go.get<char>();
    _exit(buf.data()[1] == 0x30 && buf.data()[2] == 0x30 ? 0 : 1);
  }
  ASSERT_EQ(mprotect(buf.data(), kPage, PROT_READ | PROT_WRITE), 0);
  buf.data()[1] = 0x32;  // breaks copy-on-write in the exporter
  EXPECT_EQ(p[1], 0x32) << "the importer must follow the exporter's new page";
  EXPECT_EQ(access_signal(p + 2, true, 0x33), 0);
  EXPECT_EQ(buf.data()[2], 0x33);
  go.put('g');
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(exited_ok(status)) << "the child's copy changed";
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

// The exporter moves its read-only region away (mremap) and maps fresh writable memory at the
// old address: the attachment shows the new memory, writable, never the old pages.
TEST_F(ReadOnlyChanges, MremapAwayAndWritableMemoryInItsPlace) {
  auto *old = static_cast<char *>(mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(old, MAP_FAILED);
  memset(old, 0x40, kPage);
  ASSERT_EQ(mprotect(old, kPage, PROT_READ), 0);
  segment(SHADDR_SEG_RDWR);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid_, reinterpret_cast<uintptr_t>(old), kPage, &p), 0);
  EXPECT_EQ(p[0], 0x40);
  EXPECT_EQ(access_signal(p, true, 0x41), SIGSEGV);
  // Move the read-only page to the second page's place, then map fresh memory at the first.
  void *moved = mremap(old, kPage, kPage, MREMAP_MAYMOVE | MREMAP_FIXED, old + kPage);
  ASSERT_EQ(moved, old + kPage);
  ASSERT_EQ(mmap(old, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0),
            old);
  EXPECT_EQ(p[0], 0) << "the attachment still showed the moved page";
  EXPECT_EQ(access_signal(p, true, 0x42), 0);
  EXPECT_EQ(old[0], 0x42);
  EXPECT_EQ(old[kPage], 0x40) << "the moved read-only page changed";
  EXPECT_EQ(seg_detach(fd_, p), 0);
  munmap(old, 2 * kPage);
}
