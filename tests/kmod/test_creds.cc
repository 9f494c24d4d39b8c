// SPDX-License-Identifier: MIT
// Cross-user tests of the module's credential rules (docs/security.md): who may MAP a window
// of / GET a segment of whom, run as root in the VM. Every actor is a forked child that
// switches to its own uids/gids/groups/capabilities (or enters a user namespace), talks to the
// test over a unix socket and dies at an alarm, so no test hangs.
//
// The rule under test: MAP and GET are allowed when the caller may ptrace-attach the exporter
// with real credentials -- same thread group; or the caller's real uid/gid equal all of the
// exporter's uids/gids (real, effective, saved) and the exporter's mm is dumpable; or
// CAP_SYS_PTRACE in the exporter's user namespace (and in its mm's user namespace when not
// dumpable). Segments also need their 0777-style mode to grant the access to the caller's
// effective ids (or CAP_IPC_OWNER). A grant is checked once, at MAP/GET. A setuid exec of the
// exporter leaves every window and attachment of the old image SIGBUS. A device fd in another
// address space (passed, inherited) answers EBADFD to everything but VERSION; an O_RDONLY fd
// answers EBADF to TRANSLATE, MAP, MAKE, GET and ATTACH. A read-only file never becomes
// writable through a window or an attachment.
//
// Note: a root child that setresuid()s to a user becomes non-dumpable (the kernel does that on
// every change of effective ids), so actors that should be "an ordinary process of user A" set
// PR_SET_DUMPABLE again after switching, as a process that exec'd as A would be.
#include <sys/statvfs.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "security_util.h"

using namespace shaddr_sec;

namespace {

constexpr uid_t kA = 60001, kB = 60002;
constexpr gid_t kGA = 60001, kGB = 60002, kGC = 60003;
constexpr int kReplyMs = 30000;
constexpr int64_t kNoReply = -100000;  // the actor died or did not answer in time
constexpr char kFill = 'P';

const Ids kRootIds = user_ids(0, 0);

std::string g_helper;       // shaddr_setuid_helper, 0755, in a temp dir every user can reach
std::string g_suid_helper;  // the same, 04755 root:root, on a file system without nosuid
std::string g_sgid_helper;  // the same, 02755 root:root
std::string g_helper_dir;

// ---- Actors -------------------------------------------------------------------------------

// Switches a fresh root child to the actor's identity. Returns 0 or a small error code.
struct Identity {
  Ids ids = user_ids(kA, kGA);
  bool keep_caps = false;  // keep exactly `caps` (effective and permitted) after switching
  uint64_t caps = 0;
  int userns = 0;  // 0: none; 1: a new user namespace mapping the ids to themselves; 2: to root
  bool dumpable = true;
  bool kernel_dumpable = false;  // leave dumpability as the switch of ids left it

  int apply() const {
    int r = keep_caps ? become_with_caps(ids, caps) : become(ids);
    if (r) return 1;
    if (userns) {
      // Dumpable first: a non-dumpable process's /proc/self/uid_map belongs to root.
      if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)) return 3;
      if (userns == 1 && enter_user_ns(ids.euid, ids.egid)) return 2;
      if (userns == 2 && enter_user_ns(0, 0)) return 2;
    }
    if (!kernel_dumpable && prctl(PR_SET_DUMPABLE, dumpable ? 1 : 0, 0, 0, 0)) return 3;
    return 0;
  }
};

Identity as_user(uid_t uid, gid_t gid) { return Identity{user_ids(uid, gid)}; }
Identity as_root() { return Identity{kRootIds}; }

// The result of every ioctl but VERSION on a device fd of another address space, and of plain
// mmap()s of it.
struct ForeignFdReport {
  int32_t version, translate, revoke, map, unmap_addr, unmap_slot, query, set_slot, make,
      remove, get, release, attach, detach;
  int32_t query_leak;  // QUERY answered and showed the owner's slots
  int32_t mmaps, mmaps_ok;
};

// What the owner of a file has on it, for a foreign-fd check.
struct OwnerState {
  uint64_t handle, segid, apid, window, attachment, buf;
};

ForeignFdReport check_foreign_fd(int fd, const OwnerState &o) {
  ForeignFdReport rep{};
  shaddr_version ver{};
  rep.version = xioctl(fd, SHADDR_IOC_VERSION, &ver);
  char *own = aligned_map(kMiB, kMiB, 'f');
  uint64_t id;
  rep.translate = translate(fd, own, kMiB, kRO, &id);
  rep.revoke = u64_cmd(fd, SHADDR_IOC_REVOKE, o.handle);
  char *w;
  rep.map = map_window(fd, o.handle, 0, kRO, &w);
  rep.unmap_addr = unmap_window(fd, reinterpret_cast<void *>(o.window));
  shaddr_unmap u{};
  u.flags = SHADDR_UNMAP_BY_SLOT;
  rep.unmap_slot = xioctl(fd, SHADDR_IOC_UNMAP, &u);
  shaddr_query q{};
  rep.query = xioctl(fd, SHADDR_IOC_QUERY, &q);
  if (rep.query == 0 && q.nr_mapped) rep.query_leak = 1;
  for (const auto &s : q.slots)
    if (s.handle || s.addr || s.peer || s.block) rep.query_leak = 1;
  rep.set_slot = set_slot_size(fd, kMiB);
  rep.make = seg_make(fd, own, kMiB, 0666, &id);
  rep.remove = u64_cmd(fd, SHADDR_IOC_REMOVE, o.segid);
  rep.get = seg_get(fd, o.segid, SHADDR_SEG_RDONLY, &id);
  rep.release = u64_cmd(fd, SHADDR_IOC_RELEASE, o.apid);
  char *a;
  rep.attach = seg_attach(fd, o.apid, 0, kPage, &a);
  rep.detach = seg_detach(fd, reinterpret_cast<void *>(o.attachment));
  // Plain mmap() at the offsets windows use (window id << 40, plus the source's offset in 2 MiB).
  const uint64_t pmd_off = o.buf & ((2 * kMiB) - 1) & ~(kPage - 1);
  for (uint64_t idx = 0; idx < 4; idx++) {
    for (uint64_t extra : {uint64_t{0}, pmd_off}) {
      for (int prot : {PROT_READ, PROT_READ | PROT_WRITE}) {
        rep.mmaps++;
        void *p = mmap(nullptr, kMiB, prot, MAP_SHARED, fd, (idx << 40) + extra);
        if (p != MAP_FAILED) {
          rep.mmaps_ok++;
          munmap(p, kMiB);
        }
      }
    }
  }
  return rep;
}

// Expects the contract's answer to a foreign fd (contract item 5). `who` names the case.
void expect_foreign_fd_refused(const ForeignFdReport &r, const char *who) {
  SCOPED_TRACE(who);
  EXPECT_EQ(r.version, 0) << "VERSION works on any fd";
  EXPECT_EQ(r.translate, -EBADFD);
  EXPECT_EQ(r.revoke, -EBADFD);
  EXPECT_EQ(r.map, -EBADFD);
  EXPECT_EQ(r.unmap_addr, -EBADFD);
  EXPECT_EQ(r.unmap_slot, -EBADFD);
  EXPECT_EQ(r.query, -EBADFD) << "contract item 5: QUERY must not answer in another address space";
  EXPECT_EQ(r.query_leak, 0) << "QUERY showed the owner's handles, addresses or peer";
  EXPECT_EQ(r.set_slot, -EBADFD);
  EXPECT_EQ(r.make, -EBADFD);
  EXPECT_EQ(r.remove, -EBADFD);
  EXPECT_EQ(r.get, -EBADFD);
  EXPECT_EQ(r.release, -EBADFD);
  EXPECT_EQ(r.attach, -EBADFD);
  EXPECT_EQ(r.detach, -EBADFD);
  EXPECT_EQ(r.mmaps_ok, 0) << "of " << r.mmaps << " plain mmap()s of the passed fd";
}

// ---- The exporter actor ---------------------------------------------------------------------

struct ExporterSpec {
  Identity who;
  std::vector<uint32_t> modes{0666};  // one segment over the buffer per mode
  char fill = kFill;
  const char *file = nullptr;  // map this file (opened O_RDONLY) instead of anonymous memory
  int file_map = MAP_SHARED;
  bool file_mprotect_rw = false;
  bool dev_inheritable = false;  // the device fd survives exec (setuid test)
  bool exec_ns_helper = false;   // exec the helper's ns-exporter inside the user namespace
  bool ns_helper_nondumpable = false;
  bool secret_mem = false;  // the buffer is memfd_secret() memory
};

// Commands: 'q' quit; 'd'/'D' non-dumpable/dumpable; 'c' + u64 offset: the byte there (or
// -signal); 'x' + i32 drop: exec the setuid helper (which then reports a HelperReport); 'f': a
// forked child checks the inherited fd and sends a ForeignFdReport; 'p': send the device fd;
// 'M': map the own handle (reply: address or -errno); 'A': GET+ATTACH the own first segment
// (reply: address or -errno); 'S': the OwnerState; 'Q': QUERY's nr_mapped (or -errno).
// ('x' is followed by two i32: drop back to the real ids, use the setgid copy.)
int exporter_main(Channel &ch, const ExporterSpec &s) {
  ExportInfo info{};
  info.pid = getpid();
  if (int r = s.who.apply()) {
    info.err = 10 + r;
    return ch.send(info) ? 0 : 3;
  }
  if (s.exec_ns_helper) {
    if (fcntl(ch.fd(), F_SETFD, 0)) return 4;
    std::string fd = std::to_string(ch.fd()), fill(1, s.fill);
    execl(g_helper.c_str(), g_helper.c_str(), "ns-exporter", fd.c_str(), fill.c_str(),
          s.ns_helper_nondumpable ? "1" : "0", static_cast<char *>(nullptr));
    info.err = 20;
    ch.send(info);
    return 5;
  }
  int fd = open_dev(O_RDWR | (s.dev_inheritable ? 0 : O_CLOEXEC));
  char *buf = aligned_map(kMiB, kMiB, s.fill);
  if (fd < 0 || !buf || set_slot_size(fd, kMiB)) info.err = 30;
  if (!info.err && s.secret_mem) {
    int sfd = static_cast<int>(syscall(447 /* memfd_secret */, 0));
    if (sfd < 0 || ftruncate(sfd, kMiB) ||
        mmap(buf, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, sfd, 0) != buf) {
      info.translate_rw = -errno;
      info.err = 35;
    } else {
      memset(buf, s.fill, kMiB);
    }
    if (sfd >= 0) close(sfd);
  }
  if (!info.err && s.file) {
    int ffd = open(s.file, O_RDONLY | O_CLOEXEC);
    if (ffd < 0 || mmap(buf, kMiB, PROT_READ, s.file_map | MAP_FIXED, ffd, 0) != buf) info.err = 31;
    if (ffd >= 0) close(ffd);
    if (!info.err && s.file_mprotect_rw && mprotect(buf, kMiB, PROT_READ | PROT_WRITE))
      info.err = 32;
  }
  if (!info.err) {
    // A write handle, even over read-only memory; if the module refuses that at TRANSLATE, a
    // read-only one (the importer's write MAP then fails with EACCES).
    info.translate_rw = translate(fd, buf, kMiB, kRW, &info.handle);
    if (info.translate_rw && translate(fd, buf, kMiB, kRO, &info.handle)) info.err = 33;
    for (size_t i = 0; i < s.modes.size() && i < 4; i++)
      if (seg_make(fd, buf, kMiB, s.modes[i], &info.segids[i])) info.err = 34;
    info.addr = reinterpret_cast<uint64_t>(buf);
    info.size = kMiB;
  }
  if (!ch.send(info)) return 6;
  if (info.err) return 0;  // reported: the test decides

  OwnerState own{info.handle, info.segids[0], 0, 0, 0, info.addr};
  for (;;) {
    char op;
    if (!ch.recv(&op, Actor::kAlarmSeconds * 1000)) return 0;
    int64_t reply = 0;
    switch (op) {
      case 'q': return 0;
      case 'd': reply = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) ? -errno : 0; break;
      case 'D': reply = prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) ? -errno : 0; break;
      case 'c': {
        uint64_t off = 0;
        ch.recv(&off);
        char v = 0;
        int sig = probe(buf + off, Touch::kRead, 0, &v);
        reply = sig ? -sig : static_cast<unsigned char>(v);
        break;
      }
      case 'x': {
        int32_t drop = 0, setgid_helper = 0;
        ch.recv(&drop);
        ch.recv(&setgid_helper);
        const std::string &helper = setgid_helper ? g_sgid_helper : g_suid_helper;
        if (fcntl(ch.fd(), F_SETFD, 0)) return 7;
        std::string chfd = std::to_string(ch.fd()), devfd = std::to_string(fd);
        char addr[32];
        snprintf(addr, sizeof(addr), "%llx", static_cast<unsigned long long>(info.addr));
        execl(helper.c_str(), helper.c_str(), "setuid-exporter", chfd.c_str(),
              devfd.c_str(), addr, drop ? "1" : "0", static_cast<char *>(nullptr));
        HelperReport rep{};
        rep.err = 1000 + errno;
        ch.send(rep);
        return 8;
      }
      case 'f': {
        pid_t pid = fork();
        if (pid == 0) _exit(ch.send(check_foreign_fd(fd, own)) ? 0 : 1);
        int status = 0;
        waitpid(pid, &status, 0);
        continue;  // the child answered
      }
      case 'p': ch.send_fd(fd); continue;
      case 'M': {
        char *w;
        int r = map_window(fd, info.handle, 0, kRO, &w);
        if (r == 0) own.window = reinterpret_cast<uint64_t>(w);
        reply = r ? r : static_cast<int64_t>(own.window);
        break;
      }
      case 'A': {
        char *a = nullptr;
        int r = seg_get(fd, info.segids[0], SHADDR_SEG_RDWR, &own.apid);
        if (r == 0) r = seg_attach(fd, own.apid, 0, kMiB, &a);
        if (r == 0) own.attachment = reinterpret_cast<uint64_t>(a);
        reply = r ? r : static_cast<int64_t>(own.attachment);
        break;
      }
      case 'S': ch.send(own); continue;
      case 'Q': {
        shaddr_query q{};
        int r = xioctl(fd, SHADDR_IOC_QUERY, &q);
        reply = r ? r : q.nr_mapped;
        break;
      }
      default: return 9;
    }
    if (!ch.send(reply)) return 0;
  }
}

class Exporter {
 public:
  explicit Exporter(const ExporterSpec &spec)
      : actor_([spec](Channel &ch) { return exporter_main(ch, spec); }) {
    if (!actor_.ch().recv(&info_, kReplyMs)) info_.err = -1;
  }
  ~Exporter() {
    char status[64];
    if (actor_.pid() > 0) {
      actor_.ch().send('q');
      int st = actor_.wait(20);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        ADD_FAILURE() << "exporter " << describe_status(st, status, sizeof(status));
    }
  }
  const ExportInfo &info() const { return info_; }
  bool ok() const { return info_.err == 0; }
  pid_t pid() const { return actor_.pid(); }
  Channel &ch() { return actor_.ch(); }
  int64_t command(char op) {
    int64_t r = kNoReply;
    if (!actor_.ch().send(op) || !actor_.ch().recv(&r, kReplyMs)) return kNoReply;
    return r;
  }
  // The byte at `off` of the exporter's buffer, or -signal.
  int64_t byte_at(uint64_t off) {
    int64_t r = kNoReply;
    if (!actor_.ch().send('c') || !actor_.ch().send(off) || !actor_.ch().recv(&r, kReplyMs))
      return kNoReply;
    return r;
  }

 private:
  Actor actor_;
  ExportInfo info_{};
};

// ---- The importer actor ---------------------------------------------------------------------

struct Req {
  char op;
  char byte;
  uint32_t u32;
  uint64_t a, b;
};

enum Region : uint32_t { kWindow = 0, kAttachment = 1 };

// Requests: 'M' map handle a, prot u32 (reply rc); 'G' get segid a, flags u32; 'A' attach the
// last apid at offset a, size b; 'R' compare region u32 with byte (0, signal, -1 mismatch);
// 'r' first byte of region u32 (value or -signal); 'W' write byte to region u32 (signal or 0);
// 'P' mprotect region RW (0 or -errno); 'K' read() from a pipe into region (bytes or -errno);
// 'U' unmap and detach everything; 'X' receive an fd and answer a ForeignFdReport for the
// OwnerState that follows; 'q' quit. The actor first answers its set-up status (0 or error).
int importer_main(Channel &ch, const Identity &who) {
  int64_t setup = who.apply();
  int fd = setup ? -1 : open_dev();
  if (!setup && (fd < 0 || set_slot_size(fd, kMiB))) setup = 40;
  if (!ch.send(setup) || setup) return 3;
  char *region[2] = {nullptr, nullptr};
  uint64_t region_len[2] = {0, 0};
  uint64_t apid = 0;
  for (;;) {
    Req q{};
    if (!ch.recv(&q, Actor::kAlarmSeconds * 1000)) return 0;
    int64_t reply = 0;
    char *r = q.u32 < 2 ? region[q.u32] : nullptr;
    switch (q.op) {
      case 'q': return 0;
      case 'M': {
        char *w;
        uint64_t size;
        reply = map_window(fd, q.a, 0, q.b ? static_cast<uint32_t>(q.b) : kRO, &w, &size);
        if (reply == 0) {
          region[kWindow] = w;
          region_len[kWindow] = size;
        }
        break;
      }
      case 'G': reply = seg_get(fd, q.a, q.u32, &apid); break;
      case 'A': {
        char *a;
        reply = seg_attach(fd, apid, q.a, q.b, &a);
        if (reply == 0) {
          region[kAttachment] = a;
          region_len[kAttachment] = q.b;
        }
        break;
      }
      case 'R':
        reply = r ? probe_compare(r, region_len[q.u32], q.byte, nullptr, 64 * kPage) : -ENOENT;
        break;
      case 'r': {
        char v = 0;
        int sig = r ? probe(r, Touch::kRead, 0, &v) : -ENOENT;
        reply = sig ? -std::abs(sig) : static_cast<unsigned char>(v);
        break;
      }
      case 'W': reply = r ? probe(r, Touch::kWrite, q.byte) : -ENOENT; break;
      case 'P':
        reply = !r ? -ENOENT : mprotect(r, region_len[q.u32], PROT_READ | PROT_WRITE) ? -errno : 0;
        break;
      case 'K': {
        int p[2];
        if (!r || pipe(p)) {
          reply = -ENOENT;
          break;
        }
        char junk[16];
        memset(junk, 'K', sizeof(junk));
        if (write(p[1], junk, sizeof(junk)) != sizeof(junk)) abort();
        ssize_t n = read(p[0], r, sizeof(junk));
        reply = n < 0 ? -errno : n;
        close(p[0]);
        close(p[1]);
        break;
      }
      case 'U':
        if (region[kWindow]) reply = unmap_window(fd, region[kWindow]);
        if (region[kAttachment]) munmap(region[kAttachment], region_len[kAttachment]);
        region[0] = region[1] = nullptr;
        break;
      case 'X': {
        int got = ch.recv_fd(kReplyMs);
        OwnerState own{};
        ch.recv(&own);
        ForeignFdReport rep = got >= 0 ? check_foreign_fd(got, own) : ForeignFdReport{};
        if (got < 0) rep.version = got;
        if (got >= 0) close(got);
        ch.send(rep);
        continue;
      }
      default: return 9;
    }
    if (!ch.send(reply)) return 0;
  }
}

class Importer {
 public:
  explicit Importer(const Identity &who)
      : actor_([who](Channel &ch) { return importer_main(ch, who); }) {
    if (!actor_.ch().recv(&setup_, kReplyMs)) setup_ = kNoReply;
  }
  ~Importer() {
    char status[64];
    if (actor_.pid() > 0) {
      actor_.ch().send(Req{'q', 0, 0, 0, 0});
      int st = actor_.wait(20);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        ADD_FAILURE() << "importer " << describe_status(st, status, sizeof(status));
    }
  }
  int64_t setup() const { return setup_; }
  int64_t call(const Req &q) {
    int64_t r = kNoReply;
    if (!actor_.ch().send(q) || !actor_.ch().recv(&r, kReplyMs)) return kNoReply;
    return r;
  }
  int64_t map(uint64_t handle, uint32_t prot = kRO) { return call({'M', 0, 0, handle, prot}); }
  int64_t get(uint64_t segid, uint32_t flags) { return call({'G', 0, flags, segid, 0}); }
  int64_t attach(uint64_t offset = 0, uint64_t size = kMiB) {
    return call({'A', 0, 0, offset, size});
  }
  int64_t check(Region r, char want) { return call({'R', want, r, 0, 0}); }
  int64_t first_byte(Region r) { return call({'r', 0, r, 0, 0}); }
  int64_t write(Region r, char v) { return call({'W', v, r, 0, 0}); }
  int64_t mprotect_rw(Region r) { return call({'P', 0, r, 0, 0}); }
  int64_t kernel_write(Region r) { return call({'K', 0, r, 0, 0}); }
  int64_t drop_all() { return call({'U', 0, 0, 0, 0}); }
  ForeignFdReport check_fd(int fd, const OwnerState &own) {
    ForeignFdReport rep{};
    rep.version = static_cast<int32_t>(kNoReply);
    if (actor_.ch().send(Req{'X', 0, 0, 0, 0}) && actor_.ch().send_fd(fd) &&
        actor_.ch().send(own))
      actor_.ch().recv(&rep, kReplyMs);
    return rep;
  }

 private:
  Actor actor_;
  int64_t setup_ = 0;
};

// The four requests of one importer against one export: MAP RO, MAP RW, GET RDONLY, GET RDWR.
struct Access {
  int64_t map_ro, map_rw, get_ro, get_rw;
};

Access access_of(const Identity &who, const ExportInfo &e, int seg = 0) {
  Importer imp(who);
  if (imp.setup()) return {kNoReply - imp.setup(), kNoReply, kNoReply, kNoReply};
  Access a{};
  a.map_ro = imp.map(e.handle, kRO);
  if (a.map_ro == 0) {
    EXPECT_EQ(imp.check(kWindow, kFill), 0) << "a granted window shows the buffer";
  }
  imp.drop_all();
  a.map_rw = imp.map(e.handle, kRW);
  imp.drop_all();
  a.get_ro = imp.get(e.segids[seg], SHADDR_SEG_RDONLY);
  if (a.get_ro == 0) {
    EXPECT_EQ(imp.attach(), 0);
    EXPECT_EQ(imp.check(kAttachment, kFill), 0) << "a granted attachment shows the buffer";
  }
  imp.drop_all();
  a.get_rw = imp.get(e.segids[seg], SHADDR_SEG_RDWR);
  imp.drop_all();
  return a;
}

std::string show(const Access &a) {
  return "MAP ro " + std::to_string(a.map_ro) + ", MAP rw " + std::to_string(a.map_rw) +
         ", GET rdonly " + std::to_string(a.get_ro) + ", GET rdwr " + std::to_string(a.get_rw);
}

void expect_all(const Access &a, int64_t want, const std::string &who) {
  EXPECT_TRUE(a.map_ro == want && a.map_rw == want && a.get_ro == want && a.get_rw == want)
      << who << ": want " << want << " for all four, got " << show(a);
}

class Creds : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (runs in the VM: tools/shaddr-vm)";
    ASSERT_EQ(access("/dev/shaddr", R_OK | W_OK), 0) << "module not loaded";
  }
  void TearDown() override {
    char why[256];
    EXPECT_TRUE(wait_counters_zero(10, why, sizeof(why))) << "counters not back to 0: " << why;
  }
};

// ---- Root and users ---------------------------------------------------------------------------

TEST_F(Creds, RootMayMapAndGetAUsersExport) {
  Exporter e({as_user(kA, kGA), {0600}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_root(), e.info()), 0, "root importer");
  // And root's writes reach the user's buffer.
  Importer root(as_root());
  ASSERT_EQ(root.map(e.info().handle, kRW), 0);
  EXPECT_EQ(root.write(kWindow, 'r'), 0);
  EXPECT_EQ(e.byte_at(0), 'r');
}

TEST_F(Creds, AUserMayNotMapOrGetRootsExport) {
  Exporter e({as_root(), {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kA, kGA), e.info()), -EPERM, "user A against root");
}

TEST_F(Creds, AnotherUserIsRefusedEvenWithAnOpenMode) {
  Exporter e({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kB, kGA), e.info()), -EPERM, "user B, same gid");
  Identity b_in_group{Ids{kB, kB, kB, kGB, kGB, kGB, {kGA}}};
  expect_all(access_of(b_in_group, e.info()), -EPERM, "user B with A's group");
}

TEST_F(Creds, TheSameUserIsAllowed) {
  Exporter e({as_user(kA, kGA), {0600}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kA, kGA), e.info()), 0, "user A against user A");
  Importer a(as_user(kA, kGA));
  ASSERT_EQ(a.map(e.info().handle, kRW), 0);
  EXPECT_EQ(a.write(kWindow, 'a'), 0);
  EXPECT_EQ(e.byte_at(0), 'a');
}

TEST_F(Creds, SameUidWithAnotherGidIsRefused) {
  Exporter e({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kA, kGB), e.info()), -EPERM, "uid A, gid B");
  Identity supp{Ids{kA, kA, kA, kGB, kGB, kGB, {kGA}}};
  expect_all(access_of(supp, e.info()), -EPERM, "uid A, gid B, A's gid supplementary");
  Identity egid_a{Ids{kA, kA, kA, kGB, kGA, kGB, {}}};
  expect_all(access_of(egid_a, e.info()), -EPERM, "uid A, real gid B, effective gid A");
}

// "Real uid/gid equal ALL of the exporter's ids": an exporter with one differing id is refused.
TEST_F(Creds, AnExporterWithAnyDifferingIdIsRefused) {
  const Ids variants[] = {
      {kA, kB, kA, kGA, kGA, kGA, {}},  // effective uid differs
      {kA, kA, kB, kGA, kGA, kGA, {}},  // saved uid differs
      {kB, kA, kA, kGA, kGA, kGA, {}},  // real uid differs
      {kA, kA, kA, kGA, kGB, kGA, {}},  // effective gid differs
      {kA, kA, kA, kGA, kGA, kGB, {}},  // saved gid differs
      {kA, kA, kA, kGB, kGA, kGA, {}},  // real gid differs
  };
  for (const Ids &ids : variants) {
    Exporter e({Identity{ids}, {0666}});
    ASSERT_TRUE(e.ok()) << e.info().err;
    char what[128];
    snprintf(what, sizeof(what), "exporter uids %u/%u/%u gids %u/%u/%u", ids.ruid, ids.euid,
             ids.suid, ids.rgid, ids.egid, ids.sgid);
    expect_all(access_of(as_user(kA, kGA), e.info()), -EPERM, what);
  }
}

// The importer's *real* ids count (PTRACE_MODE_REALCREDS): a setuid-A program run by B is B.
TEST_F(Creds, TheImportersRealIdsCountNotItsEffectiveOnes) {
  Exporter e({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(Identity{Ids{kB, kA, kA, kGA, kGA, kGA, {}}}, e.info()), -EPERM,
             "real uid B, effective uid A");
  expect_all(access_of(Identity{Ids{kA, kB, kB, kGA, kGA, kGA, {}}}, e.info()), 0,
             "real uid A, effective uid B (mode 0666)");
}

// ---- Dumpability -------------------------------------------------------------------------------

TEST_F(Creds, NonDumpableExporterIsRefusedToItsOwnUidButNotToRoot) {
  Identity nd = as_user(kA, kGA);
  nd.dumpable = false;
  Exporter e({nd, {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kA, kGA), e.info()), -EPERM, "user A against non-dumpable A");
  expect_all(access_of(as_root(), e.info()), 0, "root against non-dumpable A");
  // CAP_SYS_PTRACE (in the initial namespace) alone is enough for MAP, and for GET when the
  // mode allows it (no CAP_IPC_OWNER here).
  Identity tracer{user_ids(kB, kGB)};
  tracer.keep_caps = true;
  tracer.caps = cap_bit(CAP_SYS_PTRACE);
  expect_all(access_of(tracer, e.info()), 0, "user B with CAP_SYS_PTRACE only");
}

// A root process that drops to user A is non-dumpable (the kernel's rule on every change of
// effective ids): A cannot map it until it declares itself dumpable again.
TEST_F(Creds, AnExporterThatDroppedRootIsNonDumpableUntilItSaysOtherwise) {
  Identity dropped = as_user(kA, kGA);
  dropped.kernel_dumpable = true;  // as setresuid() from root left it
  Exporter e({dropped, {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  Importer a(as_user(kA, kGA));
  EXPECT_EQ(a.map(e.info().handle), -EPERM);
  EXPECT_EQ(a.get(e.info().segids[0], SHADDR_SEG_RDONLY), -EPERM);
  Importer root(as_root());
  EXPECT_EQ(root.map(e.info().handle), 0);
  EXPECT_EQ(e.command('D'), 0);
  EXPECT_EQ(a.map(e.info().handle), 0);
  EXPECT_EQ(a.check(kWindow, kFill), 0);
}

// Contract item 7: a grant is checked at MAP/GET only. Windows, attachments and access ids
// obtained while the exporter was dumpable keep working after it turns non-dumpable (as an open
// /proc/PID/mem does); new MAPs and GETs are refused; dumpable again, they are allowed again.
TEST_F(Creds, GrantsMadeBeforeTheExporterTurnedNonDumpableStay) {
  Exporter e({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  Importer a(as_user(kA, kGA));
  ASSERT_EQ(a.map(e.info().handle), 0);
  ASSERT_EQ(a.get(e.info().segids[0], SHADDR_SEG_RDONLY), 0);
  ASSERT_EQ(e.command('d'), 0);
  EXPECT_EQ(a.check(kWindow, kFill), 0) << "the window made before stays";
  EXPECT_EQ(a.attach(), 0) << "the access id obtained before stays usable";
  EXPECT_EQ(a.check(kAttachment, kFill), 0);
  a.drop_all();
  EXPECT_EQ(a.map(e.info().handle), -EPERM);
  EXPECT_EQ(a.get(e.info().segids[0], SHADDR_SEG_RDONLY), -EPERM);
  ASSERT_EQ(e.command('D'), 0);
  EXPECT_EQ(a.map(e.info().handle), 0);
  EXPECT_EQ(a.get(e.info().segids[0], SHADDR_SEG_RDONLY), 0);
}

// ---- setuid exec ----------------------------------------------------------------------------------

void setuid_exec_case(bool drop, bool setgid_helper = false) {
  ASSERT_FALSE(g_suid_helper.empty()) << "no setuid copy of the helper (see the log above)";
  ExporterSpec spec{as_user(kA, kGA), {0666}};
  spec.dev_inheritable = true;
  Exporter e(spec);
  ASSERT_TRUE(e.ok()) << e.info().err;
  const ExportInfo old = e.info();

  Importer a(as_user(kA, kGA)), root(as_root());
  ASSERT_EQ(a.map(old.handle), 0);
  ASSERT_EQ(a.check(kWindow, kFill), 0);
  ASSERT_EQ(a.get(old.segids[0], SHADDR_SEG_RDONLY), 0);
  ASSERT_EQ(a.attach(), 0);
  ASSERT_EQ(a.check(kAttachment, kFill), 0);
  ASSERT_EQ(root.map(old.handle), 0);

  // The exporter execs the setuid-root helper, which maps a secret where the buffer was.
  ASSERT_TRUE(e.ch().send('x'));
  ASSERT_TRUE(e.ch().send(int32_t{drop}));
  ASSERT_TRUE(e.ch().send(int32_t{setgid_helper}));
  HelperReport rep{};
  ASSERT_TRUE(e.ch().recv(&rep, kReplyMs)) << "no report from the setuid helper";
  ASSERT_EQ(rep.err, 0) << "helper failed (1000+errno: exec failed)";
  if (setgid_helper) {
    ASSERT_EQ(rep.egid, 0) << "the helper did not run setgid root: nosuid mount?";
    EXPECT_EQ(rep.euid, static_cast<int32_t>(kA));
  } else {
    ASSERT_EQ(rep.euid, 0) << "the helper did not run setuid root: nosuid mount?";
  }
  EXPECT_EQ(rep.ruid, static_cast<int32_t>(kA));
  EXPECT_EQ(rep.rgid, static_cast<int32_t>(kGA));
  EXPECT_EQ(rep.dumpable, 0) << "a setuid exec leaves the process non-dumpable";
  EXPECT_EQ(rep.old_translate, -EBADFD) << "the pre-exec file must not export the new image";
  EXPECT_EQ(rep.old_query, -EBADFD) << "contract item 5: the pre-exec file is foreign now";
  EXPECT_EQ(rep.old_query_leak, 0);
  if (!rep.secret_at_old_addr)  // ASLR put the new image there: the checks below still hold
    printf("note: the secret is not at the old buffer's address in this run\n");

  // Old windows and attachments: SIGBUS, never the new image.
  EXPECT_EQ(a.first_byte(kWindow), -SIGBUS);
  EXPECT_EQ(a.first_byte(kAttachment), -SIGBUS);
  EXPECT_EQ(root.first_byte(kWindow), -SIGBUS);
  a.drop_all();
  root.drop_all();
  // The old handle and segid lead nowhere: refused, or a window that is SIGBUS.
  for (Importer *imp : {&a, &root}) {
    const bool is_root = imp == &root;
    SCOPED_TRACE(is_root ? "root importer, old handle" : "user A importer, old handle");
    int64_t r = imp->map(old.handle);
    if (r == 0) {
      EXPECT_EQ(imp->first_byte(kWindow), -SIGBUS) << "an old handle reached the new image";
      imp->drop_all();
    } else if (!is_root) {
      EXPECT_TRUE(r == -EPERM || r == -ENOENT) << r;
    }
    r = imp->get(old.segids[0], SHADDR_SEG_RDONLY);
    if (r == 0 && imp->attach() == 0) {
      EXPECT_EQ(imp->first_byte(kAttachment), -SIGBUS) << "an old segid reached the new image";
      imp->drop_all();
    }
  }
  // The new image's exports: refused to user A (non-dumpable; and not its ids unless dropped).
  EXPECT_EQ(a.map(rep.handle), -EPERM);
  EXPECT_EQ(a.get(rep.segid, SHADDR_SEG_RDONLY), -EPERM);
  // Root may: which proves the secret is there to be seen, had a check above been wrong.
  EXPECT_EQ(root.map(rep.handle), 0);
  EXPECT_EQ(root.first_byte(kWindow), kSecret);
  root.drop_all();
}

TEST_F(Creds, SetuidExecOfTheExporterEndsItsWindowsAndRefusesItsUser) {
  setuid_exec_case(false);
}

TEST_F(Creds, SetuidExecThenDroppingBackToTheUserStaysRefused) { setuid_exec_case(true); }

TEST_F(Creds, SetgidExecOfTheExporterEndsItsWindowsAndRefusesItsUser) {
  setuid_exec_case(false, true);
}

TEST_F(Creds, SetgidExecThenDroppingBackToTheUserStaysRefused) { setuid_exec_case(true, true); }

// Secret memory (memfd_secret) is not even in the kernel's direct map: no importer, root
// included, ever sees it (MAP/GET may succeed; every access is SIGBUS).
TEST_F(Creds, SecretMemoryIsNeverMapped) {
  ExporterSpec spec{as_user(kA, kGA), {0666}};
  spec.secret_mem = true;
  Exporter e(spec);
  if (e.info().err == 35 && e.info().translate_rw == -ENOSYS)
    GTEST_SKIP() << "memfd_secret() is not enabled in this kernel (secretmem.enable=1)";
  ASSERT_TRUE(e.ok()) << e.info().err << " " << e.info().translate_rw;
  ASSERT_EQ(e.byte_at(0), kFill);
  for (const Identity &who : {as_user(kA, kGA), as_root()}) {
    SCOPED_TRACE(who.ids.ruid ? "user A" : "root");
    Importer imp(who);
    ASSERT_EQ(imp.setup(), 0);
    if (imp.map(e.info().handle, kRO) == 0) {
      EXPECT_EQ(imp.first_byte(kWindow), -SIGBUS);
    }
    imp.drop_all();
    if (imp.map(e.info().handle, kRW) == 0) {
      EXPECT_EQ(imp.first_byte(kWindow), -SIGBUS);
    }
    imp.drop_all();
    if (imp.get(e.info().segids[0], SHADDR_SEG_RDWR) == 0 && imp.attach() == 0) {
      EXPECT_EQ(imp.first_byte(kAttachment), -SIGBUS);
    }
    imp.drop_all();
  }
}

// ---- User namespaces --------------------------------------------------------------------------------

// A user in a user namespace of its own (ids mapped to themselves, or to root inside) gets
// exactly what the plain user gets against exporters outside: CAP_SYS_PTRACE and CAP_IPC_OWNER
// in a child namespace do not count for a target outside it.
TEST_F(Creds, AUserNamespaceGivesNothingBeyondThePlainUid) {
  Identity nd = as_user(kA, kGA);
  nd.dumpable = false;
  Exporter same({as_user(kA, kGA), {0666, 0000}}), same_nd({nd, {0666}}),
      other({as_user(kB, kGB), {0666}}), root({as_root(), {0666}});
  for (Exporter *e : {&same, &same_nd, &other, &root}) ASSERT_TRUE(e->ok()) << e->info().err;
  for (int userns : {0, 1, 2}) {
    Identity who = as_user(kA, kGA);
    who.userns = userns;
    const char *name = userns == 0 ? "plain A" : userns == 1 ? "A in a userns as A"
                                                              : "A in a userns as root";
    SCOPED_TRACE(name);
    {
      Importer probe_setup(who);
      ASSERT_EQ(probe_setup.setup(), 0) << "could not enter the user namespace";
    }
    expect_all(access_of(who, same.info()), 0, "against dumpable A");
    expect_all(access_of(who, same_nd.info()), -EPERM, "against non-dumpable A");
    expect_all(access_of(who, other.info()), -EPERM, "against B");
    expect_all(access_of(who, root.info()), -EPERM, "against root");
    Access a = access_of(who, same.info(), 1);  // segment mode 0000: CAP_IPC_OWNER only
    EXPECT_EQ(a.map_ro, 0);
    EXPECT_EQ(a.get_ro, -EACCES) << "mode 0000 against " << name;
    EXPECT_EQ(a.get_rw, -EACCES) << "mode 0000 against " << name;
  }
}

// An exporter inside a user namespace, seen from outside: its kernel ids are A's, so A may map it
// while dumpable, B may not, root may. Non-dumpable: its address space was created outside
// (it unshared after fork), so only CAP_SYS_PTRACE outside counts: A is refused.
TEST_F(Creds, AnExporterInAUserNamespaceSeenFromOutside) {
  Identity in_ns = as_user(kA, kGA);
  in_ns.userns = 2;
  Exporter e({in_ns, {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kA, kGA), e.info()), 0, "A against A-in-userns");
  expect_all(access_of(as_user(kB, kGB), e.info()), -EPERM, "B against A-in-userns");
  expect_all(access_of(as_root(), e.info()), 0, "root against A-in-userns");
  ASSERT_EQ(e.command('d'), 0);
  expect_all(access_of(as_user(kA, kGA), e.info()), -EPERM, "A against non-dumpable A-in-userns");
  expect_all(access_of(as_root(), e.info()), 0, "root against non-dumpable A-in-userns");
}

// An exporter whose address space belongs to a user namespace (it exec'd there) and is
// non-dumpable: CAP_SYS_PTRACE in that namespace counts. The namespace's owner (user A, outside)
// has it, as ptrace would grant; user B does not; root of a *sibling* namespace of A does not.
TEST_F(Creds, ANonDumpableExporterWhoseMmBelongsToAUserNamespace) {
  ASSERT_FALSE(g_helper.empty());
  ExporterSpec spec{as_user(kA, kGA)};
  spec.who.userns = 2;
  spec.exec_ns_helper = true;
  spec.ns_helper_nondumpable = true;
  Exporter e(spec);
  ASSERT_TRUE(e.ok()) << e.info().err;
  expect_all(access_of(as_user(kB, kGB), e.info()), -EPERM, "B");
  Identity sibling = as_user(kA, kGA);
  sibling.userns = 2;
  expect_all(access_of(sibling, e.info()), -EPERM, "root of a sibling namespace of A");
  expect_all(access_of(as_root(), e.info()), 0, "root");
  Access owner = access_of(as_user(kA, kGA), e.info());
  EXPECT_EQ(owner.map_ro, 0) << "the namespace's owner has CAP_SYS_PTRACE in it: " << show(owner);
  EXPECT_EQ(owner.get_ro, 0) << show(owner);
}

// ---- A device fd in another address space ---------------------------------------------------------

TEST_F(Creds, ADeviceFdPassedToAnotherUserAnswersOnlyVersion) {
  Exporter owner({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(owner.ok()) << owner.info().err;
  ASSERT_GT(owner.command('M'), 0) << "the owner maps its own handle";
  ASSERT_GT(owner.command('A'), 0) << "the owner attaches its own segment";
  ASSERT_TRUE(owner.ch().send('S'));
  OwnerState own{};
  ASSERT_TRUE(owner.ch().recv(&own, kReplyMs));
  ASSERT_TRUE(owner.ch().send('p'));
  int fd = owner.ch().recv_fd(kReplyMs);
  ASSERT_GE(fd, 0);

  Importer b(as_user(kB, kGB));
  expect_foreign_fd_refused(b.check_fd(fd, own), "fd passed to user B");
  Importer root(as_root());
  expect_foreign_fd_refused(root.check_fd(fd, own), "fd passed to root");
  close(fd);
  // B's own file: the credential rule still applies to the handle it now knows.
  EXPECT_EQ(b.map(own.handle), -EPERM);
  // The owner's file is untouched: its window is still there, its handle still maps.
  EXPECT_EQ(owner.command('Q'), 1);
  Importer a(as_user(kA, kGA));
  EXPECT_EQ(a.map(own.handle), 0);
  EXPECT_EQ(a.check(kWindow, kFill), 0);
}

TEST_F(Creds, ADeviceFdInheritedByForkAnswersOnlyVersion) {
  Exporter owner({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(owner.ok()) << owner.info().err;
  ASSERT_GT(owner.command('M'), 0);
  ASSERT_GT(owner.command('A'), 0);
  ASSERT_TRUE(owner.ch().send('f'));
  ForeignFdReport rep{};
  ASSERT_TRUE(owner.ch().recv(&rep, kReplyMs));
  expect_foreign_fd_refused(rep, "fd inherited by a forked child");
}

// ---- Segment mode bits ---------------------------------------------------------------------------

// The importers all have A's real ids (so the ptrace rule passes) and differ in effective ids,
// which is what the mode is checked against: owner (euid A), group (euid B, egid A's group),
// group through a supplementary group, other. Plus a user with CAP_SYS_PTRACE only (other) and
// root (CAP_IPC_OWNER: always).
TEST_F(Creds, SegmentModeBitsAgainstOwnerGroupAndOther) {
  const uint32_t modes[] = {0600, 0640, 0644, 0666};
  Exporter e({as_user(kA, kGA), {modes[0], modes[1], modes[2], modes[3]}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  struct Class {
    const char *name;
    Identity who;
    int shift;  // 6 owner, 3 group, 0 other, -1 always allowed
  };
  Identity tracer{user_ids(kB, kGB)};
  tracer.keep_caps = true;
  tracer.caps = cap_bit(CAP_SYS_PTRACE);
  const Class classes[] = {
      {"owner", Identity{Ids{kA, kA, kA, kGA, kGA, kGA, {}}}, 6},
      {"group", Identity{Ids{kA, kB, kA, kGA, kGA, kGA, {}}}, 3},
      {"group (supplementary)", Identity{Ids{kA, kB, kA, kGA, kGC, kGA, {kGA}}}, 3},
      {"other", Identity{Ids{kA, kB, kA, kGA, kGC, kGA, {}}}, 0},
      {"other with CAP_SYS_PTRACE", tracer, 0},
      {"root", as_root(), -1},
  };
  for (const Class &c : classes) {
    Importer imp(c.who);
    ASSERT_EQ(imp.setup(), 0) << c.name;
    for (int i = 0; i < 4; i++) {
      for (uint32_t flags : {SHADDR_SEG_RDONLY, SHADDR_SEG_RDWR}) {
        const uint32_t bits = c.shift < 0 ? 7 : (modes[i] >> c.shift) & 7;
        const uint32_t need = flags == SHADDR_SEG_RDWR ? 6 : 4;
        const bool allowed = (bits & need) == need;
        SCOPED_TRACE(std::string(c.name) + ", mode 0" + std::to_string(modes[i] >> 6) +
                     std::to_string((modes[i] >> 3) & 7) + std::to_string(modes[i] & 7) +
                     (flags == SHADDR_SEG_RDWR ? ", RDWR" : ", RDONLY"));
        ASSERT_EQ(imp.get(e.info().segids[i], flags), allowed ? 0 : -EACCES);
        if (!allowed) continue;
        ASSERT_EQ(imp.attach(), 0);
        EXPECT_EQ(imp.check(kAttachment, kFill), 0);
        if (flags == SHADDR_SEG_RDONLY) {
          EXPECT_EQ(imp.write(kAttachment, 'x'), SIGSEGV) << "RDONLY attachment written";
          EXPECT_EQ(imp.mprotect_rw(kAttachment), -EACCES);
          EXPECT_LT(imp.kernel_write(kAttachment), 0) << "the kernel wrote a RDONLY attachment";
        } else {
          EXPECT_EQ(imp.write(kAttachment, kFill), 0) << "RDWR attachment not writable";
        }
        imp.drop_all();
      }
    }
  }
  EXPECT_EQ(e.byte_at(0), kFill);
}

// ---- Read-only files ----------------------------------------------------------------------------

// A root-owned 0444 file of 1 MiB of 'Q' in a fresh directory below `base`. "" on failure.
std::string make_ro_file(const char *base) {
  std::string dir = std::string(base) + "/shaddr-roXXXXXX";
  if (!mkdtemp(dir.data()) || chmod(dir.c_str(), 0755)) return "";
  std::string path = dir + "/ro";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0) return "";
  std::string data(kMiB, 'Q');
  bool ok = write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
            fchown(fd, 0, 0) == 0 && fchmod(fd, 0444) == 0 && fsync(fd) == 0;
  close(fd);
  return ok ? path : "";
}

void remove_ro_file(const std::string &path) {
  unlink(path.c_str());
  rmdir(path.substr(0, path.rfind('/')).c_str());
}

// "" if the file still holds 1 MiB of 'Q' read through a fresh open, before and after dropping
// the page cache; else what differs.
std::string file_changed(const std::string &path) {
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      sync();
      int dc = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
      if (dc >= 0) {
        if (write(dc, "3", 1) != 1) { /* best effort */ }
        close(dc);
      }
    }
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "cannot reopen " + path;
    std::string data(kMiB + 1, 0);
    ssize_t n = pread(fd, data.data(), data.size(), 0);
    close(fd);
    if (n != static_cast<ssize_t>(kMiB)) return "size now " + std::to_string(n);
    for (size_t i = 0; i < kMiB; i++) {
      if (data[i] != 'Q') {
        char what[96];
        snprintf(what, sizeof(what), "byte %zu is now 0x%02x%s", i, data[i] & 0xff,
                 round ? " (after dropping caches)" : "");
        return what;
      }
    }
  }
  return "";
}

struct RoCase {
  const char *base;
  int map;
  bool mprotect_rw;
  const char *name;
};

void PrintTo(const RoCase &c, std::ostream *os) { *os << c.name; }

class ReadOnlyFile : public Creds, public ::testing::WithParamInterface<RoCase> {};

// An unprivileged exporter maps a root-owned 0444 file and exports it with a WRITE handle and an
// RDWR-capable segment (mode 0600). No importer -- the same user, or root -- can write the file
// through a window or an attachment (user store, kernel store into it, mprotect): the store
// fails with SIGBUS/SIGSEGV, or MAP/GET/ATTACH refuse. The file is unchanged on disk. With a
// MAP_PRIVATE mapping the exporter made writable, writes land in its private copy only.
TEST_P(ReadOnlyFile, NeverBecomesWritableThroughTheModule) {
  const RoCase &c = GetParam();
  const std::string path = make_ro_file(c.base);
  ASSERT_FALSE(path.empty()) << "cannot create the read-only file below " << c.base;
  {
    ExporterSpec spec{as_user(kA, kGA), {0600}};
    spec.file = path.c_str();
    spec.file_map = c.map;
    spec.file_mprotect_rw = c.mprotect_rw;
    Exporter e(spec);
    ASSERT_TRUE(e.ok()) << e.info().err;
    // Sanity: the exporter itself cannot write the file.
    int64_t probe_write_of_user = -1;
    {
      Identity a = as_user(kA, kGA);
      Actor t([&](Channel &) {
        if (a.apply()) return 3;
        return open(path.c_str(), O_RDWR) < 0 && errno == EACCES ? 0 : 4;
      });
      probe_write_of_user = t.wait();
    }
    EXPECT_EQ(probe_write_of_user, 0) << "user A could open the 0444 file for writing";

    const bool may_write = c.mprotect_rw;  // the exporter's own private, writable copy
    for (const Identity &who : {as_user(kA, kGA), as_root()}) {
      SCOPED_TRACE(who.ids.ruid ? "importer user A" : "importer root");
      Importer imp(who);
      ASSERT_EQ(imp.setup(), 0);
      int64_t r = imp.map(e.info().handle, kRW);
      if (r == 0) {
        int64_t w = imp.write(kWindow, 'X');
        if (!may_write) {
          EXPECT_NE(w, 0) << "a write through a RW window of a read-only file";
        }
        int64_t k = imp.kernel_write(kWindow);
        if (!may_write) {
          EXPECT_LT(k, 0) << "the kernel wrote through the window";
        }
      } else {
        EXPECT_EQ(r, -EACCES) << "MAP RW of a read-only file: SIGBUS on write or EACCES";
      }
      imp.drop_all();
      ASSERT_EQ(imp.map(e.info().handle, kRO), 0);
      if (!may_write) {
        EXPECT_EQ(imp.check(kWindow, 'Q'), 0) << "a RO window shows the file";
      }
      EXPECT_EQ(imp.write(kWindow, 'X'), SIGSEGV);
      EXPECT_EQ(imp.mprotect_rw(kWindow), -EACCES);
      imp.drop_all();
      r = imp.get(e.info().segids[0], SHADDR_SEG_RDWR);
      if (r == 0) r = imp.attach();
      if (r == 0) {
        int64_t w = imp.write(kAttachment, 'Y');
        if (!may_write) {
          EXPECT_NE(w, 0) << "a write through an RDWR attachment of a read-only file";
        }
        int64_t k = imp.kernel_write(kAttachment);
        if (!may_write) {
          EXPECT_LT(k, 0) << "the kernel wrote through the attachment";
        }
      } else {
        EXPECT_EQ(r, -EACCES) << "GET/ATTACH RDWR of a read-only file: SIGBUS on write or EACCES";
      }
      imp.drop_all();
    }
    if (!may_write) {
      EXPECT_EQ(e.byte_at(0), 'Q') << "the exporter's own view changed";
    }
  }
  EXPECT_EQ(file_changed(path), "") << path;
  remove_ro_file(path);
}

INSTANTIATE_TEST_SUITE_P(
    Files, ReadOnlyFile,
    ::testing::Values(RoCase{"/dev/shm", MAP_SHARED, false, "TmpfsShared"},
                      RoCase{"/dev/shm", MAP_PRIVATE, false, "TmpfsPrivate"},
                      RoCase{"/dev/shm", MAP_PRIVATE, true, "TmpfsPrivateMadeWritable"},
                      RoCase{"/var/tmp", MAP_SHARED, false, "RootFsShared"},
                      RoCase{"/var/tmp", MAP_PRIVATE, false, "RootFsPrivate"}),
    [](const ::testing::TestParamInfo<RoCase> &i) { return std::string(i.param.name); });

// ---- Read-only device fds (contract item 6) -------------------------------------------------------

TEST_F(Creds, AReadOnlyDeviceFdAnswersVersionAndRefusesTheRest) {
  Exporter e({as_user(kA, kGA), {0666}});
  ASSERT_TRUE(e.ok()) << e.info().err;
  for (const Identity &who : {as_root(), as_user(kA, kGA)}) {
    SCOPED_TRACE(who.ids.ruid ? "user A" : "root");
    struct Report {
      int32_t open, version, translate, map, make, get, attach;
      int32_t revoke, unmap, set_slot, remove, release, detach;
    };
    Actor t([&](Channel &ch) {
      Report r{};
      if (who.apply()) return 3;
      int fd = open_dev(O_RDONLY | O_CLOEXEC);
      r.open = fd < 0 ? fd : 0;
      shaddr_version v{};
      r.version = xioctl(fd, SHADDR_IOC_VERSION, &v);
      char *buf = aligned_map(kMiB, kMiB, 'o');
      uint64_t id;
      r.translate = translate(fd, buf, kMiB, kRO, &id);
      char *w;
      r.map = map_window(fd, e.info().handle, 0, kRO, &w);
      r.make = seg_make(fd, buf, kMiB, 0600, &id);
      r.get = seg_get(fd, e.info().segids[0], SHADDR_SEG_RDONLY, &id);
      r.attach = seg_attach(fd, 1, 0, kPage, &w);
      r.revoke = u64_cmd(fd, SHADDR_IOC_REVOKE, e.info().handle);
      r.unmap = unmap_window(fd, buf);
      r.set_slot = set_slot_size(fd, kMiB);
      r.remove = u64_cmd(fd, SHADDR_IOC_REMOVE, e.info().segids[0]);
      r.release = u64_cmd(fd, SHADDR_IOC_RELEASE, 1);
      r.detach = seg_detach(fd, buf);
      return ch.send(r) ? 0 : 4;
    });
    Report r{};
    ASSERT_TRUE(t.ch().recv(&r, kReplyMs));
    EXPECT_EQ(t.wait(), 0);
    ASSERT_EQ(r.open, 0);
    EXPECT_EQ(r.version, 0);
    EXPECT_EQ(r.translate, -EBADF);
    EXPECT_EQ(r.map, -EBADF);
    EXPECT_EQ(r.make, -EBADF);
    EXPECT_EQ(r.get, -EBADF);
    EXPECT_EQ(r.attach, -EBADF);
    // README: every command that changes state needs a descriptor open for writing.
    EXPECT_EQ(r.revoke, -EBADF) << "README: state-changing commands need a writable fd";
    EXPECT_EQ(r.unmap, -EBADF) << "README: state-changing commands need a writable fd";
    EXPECT_EQ(r.set_slot, -EBADF) << "README: state-changing commands need a writable fd";
    EXPECT_EQ(r.remove, -EBADF) << "README: state-changing commands need a writable fd";
    EXPECT_EQ(r.release, -EBADF) << "README: state-changing commands need a writable fd";
    EXPECT_EQ(r.detach, -EBADF) << "README: state-changing commands need a writable fd";
  }
}

// ---- Set-up ---------------------------------------------------------------------------------------

// Copies the helper next to this binary into a fresh directory on a file system that honours
// setuid bits, once plain (0755) and once setuid root (04755).
#ifndef SHADDR_SETUID_HELPER
#define SHADDR_SETUID_HELPER ""
#endif

void install_helpers() {
  std::string src = SHADDR_SETUID_HELPER;
  if (access(src.c_str(), X_OK)) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = 0;
      src = std::string(self).substr(0, std::string(self).rfind('/')) + "/shaddr_setuid_helper";
    }
  }
  int in = open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    fprintf(stderr, "test_creds: no helper at %s\n", src.c_str());
    return;
  }
  std::string data;
  char chunk[65536];
  for (ssize_t n; (n = read(in, chunk, sizeof(chunk))) > 0;) data.append(chunk, n);
  close(in);
  for (const char *base : {"/dev/shm", "/run", "/var/tmp", "/tmp"}) {
    struct statvfs vfs;
    if (statvfs(base, &vfs) || (vfs.f_flag & (ST_NOSUID | ST_RDONLY))) continue;
    std::string dir = std::string(base) + "/shaddr-credsXXXXXX";
    if (!mkdtemp(dir.data()) || chmod(dir.c_str(), 0755)) continue;
    bool ok = true;
    for (const auto &[name, mode] : {std::pair{"/helper", 0755}, std::pair{"/helper-suid", 04755},
                                      std::pair{"/helper-sgid", 02755}}) {
      std::string path = dir + name;
      int out = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
      ok = ok && out >= 0 && write(out, data.data(), data.size()) == static_cast<ssize_t>(data.size());
      ok = ok && fchown(out, 0, 0) == 0 && fchmod(out, mode) == 0;
      if (out >= 0) close(out);
    }
    if (!ok) continue;
    g_helper_dir = dir;
    g_helper = dir + "/helper";
    g_suid_helper = dir + "/helper-suid";
    g_sgid_helper = dir + "/helper-sgid";
    return;
  }
  fprintf(stderr, "test_creds: no writable file system without nosuid for the setuid helper\n");
}

void remove_helpers() {
  if (g_helper_dir.empty()) return;
  unlink(g_helper.c_str());
  unlink(g_suid_helper.c_str());
  unlink(g_sgid_helper.c_str());
  rmdir(g_helper_dir.c_str());
}

}  // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (geteuid() == 0) {
    // Debian's knob for unprivileged user namespaces (a guest-only change).
    int f = open("/proc/sys/kernel/unprivileged_userns_clone", O_RDWR | O_CLOEXEC);
    if (f >= 0) {
      char v = 0;
      if (read(f, &v, 1) == 1 && v == '0' && pwrite(f, "1", 1, 0) != 1)
        fprintf(stderr, "test_creds: cannot enable unprivileged user namespaces\n");
      close(f);
    }
    if (!unprivileged_userns_works()) {
      int r = leave_chroot_for_userns();
      fprintf(stderr, "test_creds: user namespaces refused (chroot?); left the chroot: %s\n",
              r ? strerror(-r) : "ok");
    }
    install_helpers();
  }
  int rc = RUN_ALL_TESTS();
  remove_helpers();
  return rc;
}
