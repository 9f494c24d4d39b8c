// SPDX-License-Identifier: MIT
// shaddr-run: run an MPI program with shaddr's LD_PRELOAD interposer for the MPI it was built
// with (libshaddr-mpich.so or libshaddr-openmpi.so).
//
// Under a launcher it runs once per rank, so it must cost next to nothing: it reads the
// program's own DT_NEEDED entries from its ELF header (no process started) and runs ldd only
// when neither MPI library is a direct dependency (a program that reaches MPI through another
// library). The shell script it replaces started bash, ldd and grep per rank: 2.4 s of an
// 8-rank launch on 2 emulated CPUs.
#include <elf.h>
#include <fcntl.h>
#include <getopt.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char *kUsage = R"(Usage: shaddr-run [--mpi mpich|openmpi] [--print] PROGRAM [ARGS...]
       shaddr-run [--mpi mpich|openmpi] [--print] LAUNCHER [LAUNCHER-ARGS...] PROGRAM [ARGS...]

Runs an MPI program with shaddr's PMPI interposer preloaded, so its collectives go through
libshaddr: no rebuild. Two forms:

  mpiexec.mpich -n 4 shaddr-run ./prog      shaddr-run runs under the launcher, once per rank:
                                            it picks the interposer from the MPI library ./prog
                                            needs (libmpich.so.12 or libmpi.so.40, read from its
                                            ELF header; ldd when it reaches MPI through another
                                            library) and execs it.
  shaddr-run mpiexec.mpich -n 4 ./prog      shaddr-run runs the launcher: the MPI is told by the
                                            launcher's name (mpiexec.mpich, mpirun.openmpi, ...,
                                            or what a plain mpiexec/mpirun resolves to), and
                                            LD_PRELOAD is handed to the ranks with the launcher's
                                            own option (-genv for MPICH's Hydra, -x for Open MPI),
                                            never to the launcher itself.

Options:
  --mpi NAME   do not detect: use libshaddr-NAME.so
  --print      print the chosen library, then libshaddr-heap.so if it is preloaded too (and
               the command), instead of running it
  -h, --help   this text

libshaddr-heap.so is preloaded too, first (it must be the program's malloc), so that peers
read each other's heap buffers by pointer; SHADDR_HEAP=off leaves it out. With it, UCX's
memory hooks are off (UCX_MEM_EVENTS=no, unless set): they would skip the heap's madvise.

Environment: SHADDR_INTERPOSE_DIR overrides where the libraries are looked for (default: the
build tree next to this program); SHADDR_BACKEND, SHADDR_HEAP, SHADDR_NODES, SHADDR_VERBOSE, ...
reach the ranks as usual (see docs/settings.md).
)";

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "shaddr-run: %s\n", msg.c_str());
  std::exit(2);
}

std::string_view basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string dirname_of(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::optional<std::string> real_path(const std::string &path) {
  char buf[PATH_MAX];
  if (!realpath(path.c_str(), buf)) return std::nullopt;
  return std::string(buf);
}

bool is_regular_file(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// What the shell's `command -v` finds: a name with a slash as it is, else the first
// executable regular file of that name on PATH.
std::optional<std::string> find_command(const std::string &name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos)
    return access(name.c_str(), X_OK) == 0 ? std::optional(name) : std::nullopt;
  const char *path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    const std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_regular_file(cand) && access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string_view::npos) return std::nullopt;
    dirs.remove_prefix(colon + 1);
  }
}

// Whether the variable is one of @words, blanks around it ignored (the settings' grammar).
bool env_is(const char *name, std::initializer_list<const char *> words, bool any_case) {
  const char *v = std::getenv(name);
  std::string_view t = v ? v : "";
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t' || t.back() == '\r')) t.remove_suffix(1);
  for (std::string_view w : words) {
    if (t.size() != w.size()) continue;
    size_t i = 0;
    while (i < t.size() && (any_case ? (t[i] | 0x20) == w[i] : t[i] == w[i])) i++;
    if (i == t.size()) return true;
  }
  return false;
}

// ------------------------------------------------------------------ the program's libraries

// An open file read at offsets, every read bounded by its size: the input is anybody's file.
class ElfFile {
 public:
  explicit ElfFile(const std::string &path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st;
    if (fd_ >= 0 && fstat(fd_, &st) == 0) size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ElfFile() {
    if (fd_ >= 0) close(fd_);
  }
  ElfFile(const ElfFile &) = delete;
  ElfFile &operator=(const ElfFile &) = delete;

  bool read(uint64_t off, void *buf, size_t len) const {
    if (fd_ < 0 || off > size_ || len > size_ - off) return false;
    return pread(fd_, buf, len, static_cast<off_t>(off)) == static_cast<ssize_t>(len);
  }
  // A NUL-terminated string at off, at most max bytes long.
  std::optional<std::string> read_string(uint64_t off, size_t max) const {
    std::string s;
    char chunk[64];
    while (s.size() < max) {
      const size_t n = std::min(sizeof(chunk), static_cast<size_t>(size_ - std::min(off, size_)));
      if (n == 0 || !read(off, chunk, n)) return std::nullopt;
      const void *nul = std::memchr(chunk, '\0', n);
      s.append(chunk, nul ? static_cast<const char *>(nul) - chunk : n);
      if (nul) return s;
      off += n;
    }
    return std::nullopt;
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

// The DT_NEEDED names of a dynamically linked ELF file, found the way the loader finds them
// (program headers: PT_DYNAMIC, its DT_STRTAB mapped back to the file through PT_LOAD), or
// nothing if the file is not one.
template <class Ehdr, class Phdr, class Dyn>
std::optional<std::vector<std::string>> needed_of(const ElfFile &f) {
  Ehdr eh;
  if (!f.read(0, &eh, sizeof(eh)) || eh.e_phentsize != sizeof(Phdr)) return std::nullopt;
  std::vector<Phdr> ph(eh.e_phnum);
  if (ph.empty() || !f.read(eh.e_phoff, ph.data(), ph.size() * sizeof(Phdr))) return std::nullopt;
  const Phdr *dynamic = nullptr;
  for (const Phdr &p : ph)
    if (p.p_type == PT_DYNAMIC) dynamic = &p;
  if (!dynamic) return std::nullopt;  // static: no libraries to tell the MPI by

  std::vector<Dyn> dyn(std::min<uint64_t>(dynamic->p_filesz / sizeof(Dyn), 1 << 16));
  if (dyn.empty() || !f.read(dynamic->p_offset, dyn.data(), dyn.size() * sizeof(Dyn)))
    return std::nullopt;
  uint64_t strtab = 0, strsz = 0;
  std::vector<uint64_t> needed;
  for (const Dyn &d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    if (d.d_tag == DT_NEEDED) needed.push_back(d.d_un.d_val);
  }
  std::optional<uint64_t> strtab_off;
  for (const Phdr &p : ph)
    if (p.p_type == PT_LOAD && strtab >= p.p_vaddr && strtab - p.p_vaddr < p.p_filesz)
      strtab_off = p.p_offset + (strtab - p.p_vaddr);
  if (!strtab_off) return std::nullopt;
  std::vector<std::string> names;
  for (uint64_t n : needed) {
    if (n >= strsz) return std::nullopt;
    auto name = f.read_string(*strtab_off + n, std::min<uint64_t>(strsz - n, PATH_MAX));
    if (!name) return std::nullopt;
    names.push_back(std::move(*name));
  }
  return names;
}

std::optional<std::vector<std::string>> needed_libraries(const std::string &path) {
  ElfFile f(path);
  unsigned char ident[EI_NIDENT];
  if (!f.read(0, ident, sizeof(ident)) || std::memcmp(ident, ELFMAG, SELFMAG) != 0 ||
      ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB))
    return std::nullopt;
  if (ident[EI_CLASS] == ELFCLASS64) return needed_of<Elf64_Ehdr, Elf64_Phdr, Elf64_Dyn>(f);
  if (ident[EI_CLASS] == ELFCLASS32) return needed_of<Elf32_Ehdr, Elf32_Phdr, Elf32_Dyn>(f);
  return std::nullopt;
}

// ldd's report of every library the program loads, directly or not ("" if it fails).
std::string ldd_output(const std::string &path) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "";
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "";
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    execlp("ldd", "ldd", path.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : "";
}

// MPICH first, as a program linking both could only be an MPICH one that also loads Open MPI.
std::optional<std::string> mpi_of_libraries(std::string_view libs) {
  if (libs.find("libmpich.so.12") != std::string_view::npos) return "mpich";
  if (libs.find("libmpi.so.40") != std::string_view::npos) return "openmpi";
  return std::nullopt;
}

std::optional<std::string> mpi_of_program(const std::string &path) {
  if (auto needed = needed_libraries(path)) {
    std::string joined;
    for (const std::string &n : *needed) joined += n + "\n";
    if (auto mpi = mpi_of_libraries(joined)) return mpi;
  }
  return mpi_of_libraries(ldd_output(path));
}

// mpich / openmpi for a launcher, by its name and the name its alternatives symlinks end at.
std::optional<std::string> mpi_of_launcher(const std::string &name) {
  const auto path = find_command(name);
  if (!path) return std::nullopt;
  const std::string names =
      std::string(basename_of(*path)) + " " + std::string(basename_of(real_path(*path).value_or(*path)));
  for (const char *m : {"mpich", "hydra"})
    if (names.find(m) != std::string::npos) return "mpich";
  for (const char *m : {"openmpi", "orterun", "prterun"})
    if (names.find(m) != std::string::npos) return "openmpi";
  return std::nullopt;
}

bool is_launcher(std::string_view arg) {
  const std::string_view base = basename_of(arg);
  for (std::string_view l : {"mpiexec", "mpirun", "orterun", "prterun"})
    if (base.substr(0, l.size()) == l) return true;
  return false;
}

// The command as a shell would take it back (for --print).
std::string shell_quote(const std::string &s) {
  const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
                                                       "nopqrstuvwxyz0123456789_@%+=:,./-") ==
                                       std::string::npos;
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

[[noreturn]] void exec_or_die(const std::vector<std::string> &cmd) {
  std::vector<char *> argv;
  for (const std::string &a : cmd) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "shaddr-run: cannot run '%s': %s\n", argv[0], std::strerror(err));
  std::exit(err == ENOENT ? 127 : 126);
}

}  // namespace

int main(int argc, char **argv) {
  std::string mpi;
  bool print = false;
  // "+": options end at the first non-option, the program (or launcher) and its own options.
  static const option kLong[] = {{"mpi", required_argument, nullptr, 'm'},
                                 {"print", no_argument, nullptr, 'p'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  opterr = 0;  // errors are told below, in shaddr-run's words
  for (int c; (c = getopt_long(argc, argv, "+h", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'h': std::fputs(kUsage, stdout); return 0;
      case 'm': mpi = optarg; break;
      case 'p': print = true; break;
      default:
        if (optopt == 'm') die("--mpi needs a value");
        die("unknown option '" + std::string(argv[optind - 1]) + "' (see --help)");
    }
  }
  const int i = optind;
  if (i >= argc) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::vector<std::string> args(argv + i, argv + argc);
  const bool launcher = is_launcher(args[0]);

  if (mpi.empty()) {
    if (launcher) {
      auto m = mpi_of_launcher(args[0]);
      if (!m) die("cannot tell which MPI '" + args[0] + "' is (use --mpi)");
      mpi = *m;
    } else {
      const auto prog = find_command(args[0]);
      if (!prog) die("program '" + args[0] + "' not found");
      auto m = mpi_of_program(*prog);
      if (!m) die("'" + args[0] + "' links neither libmpich.so.12 nor libmpi.so.40 (use --mpi)");
      mpi = *m;
    }
  }
  if (mpi != "mpich" && mpi != "openmpi") die("unknown MPI '" + mpi + "' (mpich or openmpi)");

  // Where to look: SHADDR_INTERPOSE_DIR, then the build tree this program belongs to.
  std::vector<std::string> dirs;
  if (const char *d = std::getenv("SHADDR_INTERPOSE_DIR"); d && *d) dirs.emplace_back(d);
  const std::string here = dirname_of(real_path("/proc/self/exe").value_or(argv[0]));
  dirs.push_back(here + "/../libshaddr/interpose");
  dirs.push_back(here + "/../build/libshaddr/interpose");
  std::string lib;
  std::string looked;
  for (const std::string &d : dirs) {
    const std::string cand = d + "/libshaddr-" + mpi + ".so";
    if (is_regular_file(cand)) {
      lib = real_path(cand).value_or(cand);
      break;
    }
    looked += (looked.empty() ? "" : " ") + d;
  }
  if (lib.empty())
    die("libshaddr-" + mpi + ".so not found (looked in: " + looked + "); build it first");
  // libshaddr-heap (peers' heap buffers read by pointer: docs/heap.md) goes first: its malloc must
  // come before glibc's and the interposer's dependencies in the lookup order. Next to the
  // interposer when installed, in the build tree's libshaddr/heap otherwise. Without it, or
  // with SHADDR_HEAP=off, the ranks run as before (SHADDR_VERBOSE says why).
  std::string heap;
  if (!env_is("SHADDR_HEAP", {"off"}, false)) {
    std::vector<std::string> heap_dirs{dirname_of(lib)};
    if (const char *d = std::getenv("SHADDR_INTERPOSE_DIR"); d && *d) heap_dirs.emplace_back(d);
    heap_dirs.push_back(here + "/../libshaddr/heap");
    heap_dirs.push_back(here + "/../build/libshaddr/heap");
    for (const std::string &d : heap_dirs) {
      const std::string cand = d + "/libshaddr-heap.so";
      if (is_regular_file(cand)) {
        heap = real_path(cand).value_or(cand);
        break;
      }
    }
    if (heap.empty() && env_is("SHADDR_VERBOSE", {"1", "yes", "true", "on"}, true))
      std::fprintf(stderr, "shaddr-run: libshaddr-heap.so not found next to %s nor in the build "
                   "tree: the heap stays off\n", lib.c_str());
  }
  const char *old = std::getenv("LD_PRELOAD");
  const std::string preload =
      (heap.empty() ? "" : heap + ":") + lib + (old && *old ? ":" + std::string(old) : "");
  // UCX (MPICH's ch4:ucx, Open MPI's pml ucx) watches madvise, mremap, ... by overwriting the
  // first bytes of the function the lookup finds first ("bistro" hooks), which is the heap's,
  // and then makes the system call itself: the heap's private-memory rules (docs/heap.md)
  // would be skipped. Its other mode ("reloc") hangs MPICH 4.0.2's MPI_Init here. Without the
  // memory events UCX registers RDMA memory without its cache (correct, slower across
  // InfiniBand nodes); on one node it needs none. Unless the user chose.
  const bool ucx_events_off = !heap.empty() && !std::getenv("UCX_MEM_EVENTS");

  if (launcher) {
    std::vector<std::string> cmd{args[0]};
    if (mpi == "mpich") {
      if (ucx_events_off) cmd.insert(cmd.end(), {"-genv", "UCX_MEM_EVENTS", "no"});
      cmd.insert(cmd.end(), {"-genv", "LD_PRELOAD", preload});
    } else {
      if (ucx_events_off) cmd.insert(cmd.end(), {"-x", "UCX_MEM_EVENTS=no"});
      cmd.insert(cmd.end(), {"-x", "LD_PRELOAD=" + preload});
    }
    cmd.insert(cmd.end(), args.begin() + 1, args.end());
    if (print) {
      std::printf("%s\n", lib.c_str());
      if (!heap.empty()) std::printf("%s\n", heap.c_str());
      for (const std::string &a : cmd) std::printf("%s ", shell_quote(a).c_str());
      std::printf("\n");
      return 0;
    }
    exec_or_die(cmd);
  }
  if (print) {
    std::printf("%s\n", lib.c_str());
    if (!heap.empty()) std::printf("%s\n", heap.c_str());
    return 0;
  }
  if (setenv("LD_PRELOAD", preload.c_str(), 1) != 0) die("cannot set LD_PRELOAD");
  if (ucx_events_off && setenv("UCX_MEM_EVENTS", "no", 0) != 0) die("cannot set UCX_MEM_EVENTS");
  exec_or_die(args);
}
