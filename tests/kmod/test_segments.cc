// SPDX-License-Identifier: MIT
// XPMEM-like segments (MAKE / GET / ATTACH / DETACH / RELEASE / REMOVE), run as root in the VM.
#include <sys/resource.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shaddr_test_util.h"

using namespace shaddr_test;

namespace {

class Segments : public ModuleTest {};

// A forked exporter: makes a segment of a 1 MiB buffer filled with `seed` (or of its whole
// address space), reports {segid, buffer address}, then obeys: 'c' check byte, 'f' fill,
// 'q' quit.
class SegPeer {
 public:
  SegPeer(unsigned char seed, uint32_t mode = 0600, bool whole = false) {
    pid_ = fork();
    if (pid_ == 0) _exit(child(seed, mode, whole));
    segid_ = up_.get<uint64_t>();
    buf_ = up_.get<uint64_t>();
  }
  ~SegPeer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  uint64_t segid() const { return segid_; }
  uint64_t buf() const { return buf_; }
  bool check(size_t off, unsigned char want) {
    down_.put('c');
    down_.put(off);
    down_.put(want);
    return up_.get<unsigned char>() == 1;
  }
  int quit() {
    down_.put('q');
    down_.put(size_t{0});
    down_.put(static_cast<unsigned char>(0));
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  int child(unsigned char seed, uint32_t mode, bool whole) {
    int fd = open_dev();
    AlignedBuffer buf(kMiB, kPage);
    memset(buf.data(), seed, kMiB);
    uint64_t segid = 0;
    int r = whole ? seg_make(fd, nullptr, ~0ull, mode, &segid)
                  : seg_make(fd, buf.data(), kMiB, mode, &segid);
    up_.put(r == 0 ? segid : 0);
    up_.put(reinterpret_cast<uint64_t>(buf.data()));
    for (;;) {
      char cmd = down_.get<char>();
      size_t off = down_.get<size_t>();
      unsigned char v = down_.get<unsigned char>();
      if (cmd == 'q') return 0;
      if (cmd == 'c') up_.put(static_cast<unsigned char>(buf.data()[off] == (char)v));
    }
  }
  Pipe down_, up_;
  pid_t pid_ = -1;
  uint64_t segid_ = 0, buf_ = 0;
};

}  // namespace

TEST_F(Segments, MakeGetAttachDetach) {
  SegPeer peer(0x21);
  ASSERT_NE(peer.segid(), 0u);
  EXPECT_EQ(peer.segid() >> 63, 0u) << "segids are positive";
  EXPECT_EQ(stat_value("segments"), 1);
  uint64_t apid;
  ASSERT_EQ(seg_get(fd_, peer.segid(), SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kMiB, &p), 0);
  EXPECT_EQ(p[0], 0x21);
  EXPECT_EQ(p[kMiB - 1], 0x21);
  p[12345] = 0x22;
  EXPECT_TRUE(peer.check(12345, 0x22));
  EXPECT_EQ(stat_value("attachments"), 1);
  EXPECT_EQ(seg_detach(fd_, p + 100), 0);  // any address inside detaches
  EXPECT_EQ(stat_value("attachments"), 0);
  EXPECT_EQ(seg_detach(fd_, p), -ENOENT);
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_RELEASE, apid), 0);
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_RELEASE, apid), -ENOENT);
  EXPECT_TRUE(exited_ok(peer.quit()));
}

TEST_F(Segments, AttachAtAnOffsetReturnsTheExactByte) {
  SegPeer peer(0);
  uint64_t apid;
  ASSERT_EQ(seg_get(fd_, peer.segid(), SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 3 * kPage + 17, 100, &p), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) & (kPage - 1), 17u);
  p[0] = 0x55;
  EXPECT_TRUE(peer.check(3 * kPage + 17, 0x55));
  // A fixed address must share the offset within the page.
  AlignedBuffer spot(4 * kPage, kPage, false);
  char *q;
  EXPECT_EQ(seg_attach(fd_, apid, 17, 10, &q, reinterpret_cast<uint64_t>(spot.data()),
                       SHADDR_ATTACH_FIXED),
            -EINVAL);
  ASSERT_EQ(seg_attach(fd_, apid, 17, 10, &q, reinterpret_cast<uint64_t>(spot.data() + 17),
                       SHADDR_ATTACH_FIXED),
            0);
  EXPECT_EQ(q, spot.data() + 17);
  EXPECT_EQ(seg_detach(fd_, q), 0);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, ReadOnlyAccessAttachesReadOnly) {
  SegPeer peer(0x31);
  uint64_t apid;
  ASSERT_EQ(seg_get(fd_, peer.segid(), SHADDR_SEG_RDONLY, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kMiB, &p), 0);  // XPMEM itself could not do this
  EXPECT_EQ(access_signal(p), 0);
  EXPECT_EQ(p[77], 0x31);
  EXPECT_EQ(access_signal(p, /*write=*/true, 1), SIGSEGV);
  EXPECT_TRUE(peer.check(0, 0x31));
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, TwoAttachersAndTwoSegments) {
  SegPeer a(0xa1), b(0xb2);
  uint64_t apa, apb;
  ASSERT_EQ(seg_get(fd_, a.segid(), SHADDR_SEG_RDWR, &apa), 0);
  ASSERT_EQ(seg_get(fd_, b.segid(), SHADDR_SEG_RDWR, &apb), 0);
  char *pa, *pa2, *pb;
  ASSERT_EQ(seg_attach(fd_, apa, 0, kMiB, &pa), 0);
  ASSERT_EQ(seg_attach(fd_, apa, 0, kMiB, &pa2), 0);  // the same range twice
  ASSERT_EQ(seg_attach(fd_, apb, 0, kMiB, &pb), 0);
  EXPECT_NE(pa, pa2);
  pa[10] = 1;
  EXPECT_EQ(pa2[10], 1);
  EXPECT_EQ(pb[10], static_cast<char>(0xb2));
  // A second attacher in another process.
  const uint64_t segid = a.segid();
  int status = run_in_child([&] {
    int fd = open_dev();
    uint64_t ap;
    char *q;
    if (seg_get(fd, segid, SHADDR_SEG_RDWR, &ap) || seg_attach(fd, ap, 0, kMiB, &q)) return 10;
    if (q[10] != 1) return 11;
    q[11] = 2;
    return 0;
  });
  EXPECT_TRUE(exited_ok(status));
  EXPECT_EQ(pa[11], 2);
  EXPECT_TRUE(a.check(11, 2));
  // RELEASE detaches what was attached through the access id.
  EXPECT_EQ(stat_value("attachments"), 3);
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_RELEASE, apa), 0);
  EXPECT_EQ(stat_value("attachments"), 1);
  EXPECT_EQ(seg_detach(fd_, pb), 0);
}

class SegmentsFanout : public Segments, public ::testing::WithParamInterface<int> {};

TEST_P(SegmentsFanout, OneToManyAndManyToOne) {
  const int peers = GetParam();
  // One to many: this process exports, each child attaches and writes its own page.
  AlignedBuffer buf(16 * kPage, kPage);
  uint64_t segid;
  ASSERT_EQ(seg_make(fd_, buf.data(), 16 * kPage, 0600, &segid), 0);
  std::vector<pid_t> kids;
  for (int i = 0; i < peers; i++) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int fd = open_dev();
      uint64_t ap;
      char *p;
      if (seg_get(fd, segid, SHADDR_SEG_RDWR, &ap) || seg_attach(fd, ap, 0, 16 * kPage, &p))
        _exit(10);
      p[i * 100 + 7] = static_cast<char>(i + 1);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(exited_ok(status));
  }
  for (int i = 0; i < peers; i++) EXPECT_EQ(buf.data()[i * 100 + 7], static_cast<char>(i + 1));
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_REMOVE, segid), 0);

  // Many to one: every child exports, this process attaches them all.
  std::vector<std::unique_ptr<SegPeer>> exporters;
  for (int i = 0; i < peers; i++) exporters.push_back(std::make_unique<SegPeer>(i + 1));
  std::vector<char *> at(peers);
  for (int i = 0; i < peers; i++) {
    uint64_t ap;
    ASSERT_EQ(seg_get(fd_, exporters[i]->segid(), SHADDR_SEG_RDWR, &ap), 0);
    ASSERT_EQ(seg_attach(fd_, ap, 0, kMiB, &at[i]), 0);
  }
  for (int i = 0; i < peers; i++) {
    EXPECT_EQ(at[i][kMiB / 2], static_cast<char>(i + 1));
    at[i][5] = static_cast<char>(0x80 + i);
    EXPECT_TRUE(exporters[i]->check(5, 0x80 + i));
  }
  for (int i = 0; i < peers; i++) EXPECT_EQ(seg_detach(fd_, at[i]), 0);
  for (auto &e : exporters) EXPECT_TRUE(exited_ok(e->quit()));
}

INSTANTIATE_TEST_SUITE_P(Peers, SegmentsFanout, ::testing::Values(1, 3, 5, 10));

TEST_F(Segments, HolesGiveSIGBUSNotZero) {
  AlignedBuffer buf(64 * kPage, kPage);
  ASSERT_EQ(munmap(buf.data() + 8 * kPage, 8 * kPage), 0);
  uint64_t segid, apid;
  ASSERT_EQ(seg_make(fd_, buf.data(), 64 * kPage, 0600, &segid), 0);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDONLY, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, 64 * kPage, &p), 0);
  EXPECT_EQ(access_signal(p), 0);
  EXPECT_EQ(access_signal(p + 9 * kPage), SIGBUS);
  EXPECT_EQ(access_signal(p + 20 * kPage), 0);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, ExporterExitGivesSIGBUS) {
  char *p;
  {
    SegPeer peer(0x41);
    uint64_t apid;
    ASSERT_EQ(seg_get(fd_, peer.segid(), SHADDR_SEG_RDWR, &apid), 0);
    ASSERT_EQ(seg_attach(fd_, apid, 0, kMiB, &p), 0);
    EXPECT_EQ(p[0], 0x41);
    EXPECT_TRUE(exited_ok(peer.quit()));
  }
  EXPECT_EQ(access_signal(p), SIGBUS);
  EXPECT_EQ(access_signal(p + 5 * kPage, true, 1), SIGBUS);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, ExporterForkWithCopyOnWriteWhileAttached) {
  AlignedBuffer buf(kMiB, kPage);
  memset(buf.data(), 1, kMiB);
  uint64_t segid, apid;
  ASSERT_EQ(seg_make(fd_, buf.data(), kMiB, 0600, &segid), 0);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kMiB, &p), 0);
  Pipe sync;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sync.get<char>();
    _exit(buf.data()[0] == 1 && buf.data()[kPage] == 1 ? 0 : 1);
  }
  p[0] = 2;            // through the attachment: the parent's page
  buf.data()[kPage] = 3;  // directly: breaks COW in the parent
  EXPECT_EQ(buf.data()[0], 2);
  EXPECT_EQ(p[kPage], 3);
  sync.put('g');
  int status;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(exited_ok(status)) << "the child's copy must not change";
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, PermissionDenialForAnotherUserAndGuessedSegids) {
  SegPeer strict(1, 0600), open_mode(2, 0666);
  const uint64_t s1 = strict.segid(), s2 = open_mode.segid();
  const long long refusals0 = stat_value("refusals");
  int status = run_in_child([&] {
    if (setgid(65534) || setuid(65534)) return 10;
    int fd = open_dev();
    uint64_t ap;
    if (seg_get(fd, s1, SHADDR_SEG_RDONLY, &ap) != -EACCES) return 11;  // mode denies
    if (seg_get(fd, s2, SHADDR_SEG_RDONLY, &ap) != -EPERM) return 12;   // ptrace denies
    if (seg_get(fd, s1 ^ 0x5a5a, SHADDR_SEG_RDONLY, &ap) != -ENOENT) return 13;
    return 0;
  });
  EXPECT_TRUE(exited_ok(status)) << status;
  EXPECT_EQ(stat_value("refusals"), refusals0 + 2);
  uint64_t ap;
  EXPECT_EQ(seg_get(fd_, 12345, SHADDR_SEG_RDONLY, &ap), -ENOENT);
  EXPECT_EQ(seg_get(fd_, 0, SHADDR_SEG_RDONLY, &ap), -ENOENT);
}

TEST_F(Segments, MunmapOfAnAttachmentIsACleanDetach) {
  SegPeer peer(5);
  uint64_t apid;
  ASSERT_EQ(seg_get(fd_, peer.segid(), SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kMiB, &p), 0);
  EXPECT_NE(munmap(p + kPage, kPage), 0) << "partial munmap is refused";
  EXPECT_EQ(munmap(p, kMiB), 0);
  EXPECT_EQ(stat_value("attachments"), 0);
  EXPECT_EQ(seg_detach(fd_, p), -ENOENT);
  EXPECT_TRUE(exited_ok(peer.quit())) << "no SIGKILL, unlike XPMEM";
}

TEST_F(Segments, WholeAddressSpaceExport) {
  SegPeer peer(0x66, 0600, /*whole=*/true);
  ASSERT_NE(peer.segid(), 0u);
  uint64_t apid;
  ASSERT_EQ(seg_get(fd_, peer.segid(), SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  // The peer's buffer, found at its own virtual address (offset = address).
  ASSERT_EQ(seg_attach(fd_, apid, peer.buf(), kMiB, &p), 0);
  EXPECT_EQ(p[0], 0x66);
  p[1] = 0x67;
  EXPECT_TRUE(peer.check(1, 0x67));
  // Address 0 is not mapped in the peer.
  char *z;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kPage, &z), 0);
  EXPECT_EQ(access_signal(z), SIGBUS);
  EXPECT_EQ(seg_detach(fd_, z), 0);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, RemovedSegmentGivesSIGBUSAndENOENT) {
  AlignedBuffer buf(kMiB, kPage);
  uint64_t segid, apid;
  ASSERT_EQ(seg_make(fd_, buf.data(), kMiB, 0600, &segid), 0);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kMiB, &p), 0);
  ASSERT_EQ(access_signal(p), 0);
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_REMOVE, segid), 0);
  EXPECT_EQ(seg_u64_cmd(fd_, SHADDR_IOC_REMOVE, segid), -ENOENT);
  EXPECT_EQ(access_signal(p), SIGBUS);
  char *q;
  EXPECT_EQ(seg_attach(fd_, apid, 0, kPage, &q), -ENOENT);
  uint64_t ap2;
  EXPECT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDWR, &ap2), -ENOENT);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

TEST_F(Segments, BadInputGetsPreciseErrors) {
  AlignedBuffer buf(kMiB, kPage);
  uint64_t segid, apid;
  EXPECT_EQ(seg_make(fd_, buf.data() + 1, kPage, 0600, &segid), -EINVAL);  // unaligned
  EXPECT_EQ(seg_make(fd_, buf.data(), kPage + 1, 0600, &segid), -EINVAL);
  EXPECT_EQ(seg_make(fd_, buf.data(), 0, 0600, &segid), -EINVAL);
  EXPECT_EQ(seg_make(fd_, buf.data(), kPage, 01777, &segid), -EINVAL);
  EXPECT_EQ(seg_make(fd_, reinterpret_cast<void *>(0xffff888000000000ull), kPage, 0600, &segid),
            -EINVAL);
  shaddr_make mk{};
  mk.va = reinterpret_cast<uint64_t>(buf.data());
  mk.size = kPage;
  mk.flags = 1;
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_MAKE, &mk), -EINVAL);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_MAKE, nullptr), -EFAULT);
  ASSERT_EQ(seg_make(fd_, buf.data(), kMiB, 0600, &segid), 0);
  EXPECT_EQ(seg_get(fd_, segid, 0, &apid), -EINVAL);
  EXPECT_EQ(seg_get(fd_, segid, 3, &apid), -EINVAL);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_GET, nullptr), -EFAULT);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  EXPECT_EQ(seg_attach(fd_, apid, 0, 0, &p), -EINVAL);
  EXPECT_EQ(seg_attach(fd_, apid, kMiB, 1, &p), -EINVAL);
  EXPECT_EQ(seg_attach(fd_, apid, kMiB - 10, 11, &p), -EINVAL);
  EXPECT_EQ(seg_attach(fd_, apid, 0, ~0ull, &p), -EINVAL);
  EXPECT_EQ(seg_attach(fd_, apid, 0, kPage, &p, 0, 0x10), -EINVAL);
  EXPECT_EQ(seg_attach(fd_, apid ^ 1, 0, kPage, &p), -ENOENT);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_ATTACH, nullptr), -EFAULT);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_DETACH, nullptr), -EFAULT);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_RELEASE, nullptr), -EFAULT);
  EXPECT_EQ(xioctl(fd_, SHADDR_IOC_REMOVE, nullptr), -EFAULT);
  EXPECT_EQ(seg_detach(fd_, buf.data()), -ENOENT);  // not an attachment
  // Another process's files cannot be used through an inherited descriptor.
  int status = run_in_child([&] {
    uint64_t s;
    return seg_make(fd_, buf.data(), kPage, 0600, &s) == -EBADFD ? 0 : 1;
  });
  EXPECT_TRUE(exited_ok(status));
  EXPECT_EQ(stat_value("attachments"), 0);
}

TEST_F(Segments, AttachmentsAreCapped) {
  AlignedBuffer buf(kPage, kPage);
  uint64_t segid, apid;
  ASSERT_EQ(seg_make(fd_, buf.data(), kPage, 0600, &segid), 0);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDONLY, &apid), 0);
  std::vector<char *> got;
  int r = 0;
  char *p;
  while (got.size() < 100000 && (r = seg_attach(fd_, apid, 0, kPage, &p)) == 0) got.push_back(p);
  EXPECT_EQ(r, -ENOSPC);
  EXPECT_EQ(got.size(), 8192u) << "module parameter max_attachments defaults to 8192";
  for (char *a : got) munmap(a, kPage);
  EXPECT_EQ(stat_value("attachments"), 0);
}

namespace {
long long anon_huge_kib() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  long long v = 0;
  while (in >> key) {
    if (key == "AnonHugePages:") {
      in >> v;
      return v;
    }
  }
  return 0;
}

// Whether read faults of a THP range map the huge zero folio (the sysfs knob reads "1").
bool thp_uses_zero_page() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/use_zero_page");
  int v = 0;
  return (in >> v) && v == 1;
}

bool huge_map_feature(int fd) {
  shaddr_version ver{};
  return xioctl(fd, SHADDR_IOC_VERSION, &ver) == 0 && (ver.features & SHADDR_FEAT_HUGE_MAP);
}

constexpr size_t k2M = 2 * kMiB;
}  // namespace

TEST_F(Segments, HugeExporterPagesMapWithPMDs) {
  if (!huge_map_feature(fd_)) GTEST_SKIP() << "this kernel has no huge PFN mappings (6.12+ has)";
  constexpr size_t kLen = 4 * k2M;
  const long long thp0 = anon_huge_kib();
  AlignedBuffer buf(kLen, k2M, /*touch=*/false);
  ASSERT_EQ(madvise(buf.data(), kLen, MADV_HUGEPAGE), 0);
  memset(buf.data(), 0x48, kLen);
  if (anon_huge_kib() - thp0 < static_cast<long long>(kLen >> 10))
    GTEST_SKIP() << "the exporter got no transparent huge pages here";
  uint64_t segid, apid;
  ASSERT_EQ(seg_make(fd_, buf.data(), kLen, 0600, &segid), 0);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDWR, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kLen, &p), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % k2M, 0u) << "attachment aligned for PMDs";
  const long long huge0 = stat_value("huge_mapped");
  for (size_t off = 0; off < kLen; off += k2M) EXPECT_EQ(p[off + 4097], 0x48);
  EXPECT_EQ(stat_value("huge_mapped"), huge0 + 4);
  p[k2M + 5] = 0x49;
  EXPECT_EQ(buf.data()[k2M + 5], 0x49);
  EXPECT_EQ(stat_value("huge_mapped"), huge0 + 4) << "a write after a read fault split a PMD";
  // Exporter drops one 4 KiB page inside a huge page: it splits; the importer follows.
  ASSERT_EQ(madvise(buf.data() + k2M + 3 * kPage, kPage, MADV_DONTNEED), 0);
  EXPECT_EQ(p[k2M + 3 * kPage], 0);
  EXPECT_EQ(p[k2M + 5], 0x49);
  EXPECT_EQ(p[k2M + 4 * kPage], 0x48);
  buf.data()[k2M + 3 * kPage] = 0x50;
  EXPECT_EQ(p[k2M + 3 * kPage], 0x50);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}

// Read faults of an exporter's THP range map the huge zero folio there (use_zero_page): an
// attachment of it gets 4 KiB PTEs, never a PMD. On 7.x a PFN PMD of the huge zero folio made
// the importer's munmap oops (zap_huge_pmd() withdrew a page table no PFN PMD has).
TEST_F(Segments, TheHugeZeroFolioGetsNoPMD) {
  if (!huge_map_feature(fd_)) GTEST_SKIP() << "this kernel has no huge PFN mappings (6.12+ has)";
  if (!thp_uses_zero_page())
    GTEST_SKIP() << "read faults get no huge zero folio here (use_zero_page is not 1)";
  constexpr size_t kLen = 2 * k2M;
  AlignedBuffer buf(kLen, k2M, /*touch=*/false);
  ASSERT_EQ(madvise(buf.data(), kLen, MADV_HUGEPAGE), 0);
  const volatile char *ro = buf.data();
  int sum = 0;
  for (size_t off = 0; off < kLen; off += kPage) sum += ro[off];
  ASSERT_EQ(sum, 0);
  uint64_t segid, apid;
  ASSERT_EQ(seg_make(fd_, buf.data(), kLen, 0600, &segid), 0);
  ASSERT_EQ(seg_get(fd_, segid, SHADDR_SEG_RDONLY, &apid), 0);
  char *p;
  ASSERT_EQ(seg_attach(fd_, apid, 0, kLen, &p), 0);
  const long long huge0 = stat_value("huge_mapped");
  for (size_t off = 0; off < kLen; off += k2M) EXPECT_EQ(p[off + 4097], 0);
  EXPECT_EQ(stat_value("huge_mapped"), huge0) << "the huge zero folio got a PMD";
  EXPECT_EQ(seg_detach(fd_, p), 0);
  // The exporter writes: it gets its own memory, the next attachment sees it.
  memset(buf.data(), 0x51, kLen);
  ASSERT_EQ(seg_attach(fd_, apid, 0, kLen, &p), 0);
  EXPECT_EQ(p[k2M + 7], 0x51);
  EXPECT_EQ(seg_detach(fd_, p), 0);
}
