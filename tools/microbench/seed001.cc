// SPDX-License-Identifier: MIT
// The segmentation table (docs/seed001-segmentation.md: Tu et al.'s Table 1, Bcast time
// against message and segment size). Two readings of "segmenting the intra-node Bcast", both
// run by default:
//  - chunk: one shaddr_bcast of the whole message by message counter (FIFO off), with
//    SHADDR_CHUNK set to the segment size: libshaddr's own pipelining, the unit each reader
//    copies (on cma, one process_vm_readv) — what SHADDR_CHUNK tunes;
//  - loop: the paper's Fig. 1 literally, ceil(message / segment) shaddr_bcast calls of one
//    segment each (at successive offsets), libshaddr otherwise at its defaults.
// The method is shaddr-tune's: barrier, time one call on every rank, take the slowest rank,
// median over iterations.
#include "seed001.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "bootstrap.h"
#include "shaddr/coll.h"

namespace microbench {
namespace {

constexpr size_t kKiB = 1024, kMiB = kKiB * kKiB;
constexpr const char *kVars[] = {"SHADDR_CHUNK", "SHADDR_BCAST_FIFO_MAX", "SHADDR_BCAST_STREAMS"};

std::string relation(const Machine &m, size_t s) {
  const std::pair<size_t, const char *> rel[] = {
      {m.l1d / 4, "L1d/4"}, {m.l1d / 2, "L1d/2"}, {m.l1d, "L1d"},       {m.l2 / 4, "L2/4"},
      {m.l2 / 2, "L2/2"},   {m.l2, "L2"},         {m.l3 / 16, "L3/16"}, {m.l3, "L3"}};
  for (const auto &[size, name] : rel)
    if (size && size == s) return name;
  return "";
}

std::vector<Seed001Column> columns(const Machine &m, const std::string &mode, bool quick) {
  std::set<size_t> segs;
  if (quick) {
    segs = {4 * kKiB, m.default_chunk};
  } else {
    // The seed's own columns (its L1 was 16 KB, its shared L2 8 MB) ...
    segs = {4 * kKiB, 8 * kKiB, 16 * kKiB, 512 * kKiB, 1 * kMiB, 2 * kMiB};
    // ... and this machine's: fits in L1d, in L2, and libshaddr's default (L2/2).
    for (size_t s : {m.l1d / 2, m.l1d, m.l2 / 4, m.l2 / 2, m.l2, m.default_chunk})
      if (s >= 4096) segs.insert(s);
  }
  std::vector<Seed001Column> cols;
  for (size_t s : segs) {
    Seed001Column c;
    c.label = human_size(s);
    c.relation = relation(m, s);
    c.segment = s;
    c.default_chunk = s == m.default_chunk;
    cols.push_back(c);
  }
  Seed001Column whole;
  whole.label = "not segmented";
  if (mode == "chunk") {
    cols.push_back(whole);
    Seed001Column d;
    d.label = "libshaddr default";
    d.defaults = true;
    cols.push_back(d);
  } else {
    whole.label = "not segmented (libshaddr default)";
    whole.defaults = true;
    cols.push_back(whole);
  }
  return cols;
}

std::vector<size_t> messages(bool quick, size_t max_message) {
  if (quick) return {4 * kKiB, 64 * kKiB, 1 * kMiB};
  std::vector<size_t> v;
  for (size_t s = 4 * kKiB; s <= std::min(8 * kMiB, max_message); s *= 2)
    v.push_back(s);  // the seed's rows
  if (v.empty()) v.push_back(4 * kKiB);
  return v;
}

// The variables a column sets; the defaults columns unset them.
void apply_env(const std::string &mode, const Seed001Column &c, size_t largest) {
  for (const char *v : kVars) unsetenv(v);
  if (c.defaults || mode == "loop") return;
  const size_t chunk = c.segment ? c.segment : largest;
  setenv("SHADDR_CHUNK", std::to_string(chunk).c_str(), 1);
  setenv("SHADDR_BCAST_FIFO_MAX", "0", 1);  // the message counter at every size
  setenv("SHADDR_BCAST_STREAMS", "1", 1);   // one stream: segmentation alone
}

// One Bcast of `bytes` as the column does it.
int one_bcast(shaddr_comm_t *c, const std::string &mode, const Seed001Column &col, char *buf,
              size_t bytes) {
  if (mode == "chunk" || col.segment == 0) return shaddr_bcast(c, buf, bytes, 0);
  for (size_t off = 0; off < bytes; off += col.segment)
    if (int err = shaddr_bcast(c, buf + off, std::min(col.segment, bytes - off), 0)) return err;
  return 0;
}

int run_table(const Options &o, int ranks, const std::string &mode, Seed001Table *t,
              std::string *error) {
  const size_t largest = t->messages.back();
  t->us.assign(t->messages.size(), std::vector<double>(t->columns.size(), -1));
  // Per cell, the median of each pass; the cell is the median of those. Passes sweep every
  // column in turn, so a burst of other load on the machine hits one pass, not one column.
  std::vector<std::vector<std::vector<double>>> passes(
      t->messages.size(), std::vector<std::vector<double>>(t->columns.size()));
  const int npasses = o.quick ? 1 : o.repeat;
  const int rc = shaddr::run_forked(ranks, [&](const shaddr_host &h) {
    std::vector<char> buf(largest, static_cast<char>(h.rank == 0 ? 0x11 : 0));
    for (int pass = 0; pass < npasses; pass++)
      for (size_t ci = 0; ci < t->columns.size(); ci++) {
        const Seed001Column &col = t->columns[ci];
        apply_env(mode, col, largest);
        shaddr_comm_t *c = nullptr;
        if (shaddr_comm_create(&h, &c)) {
          if (h.rank == 0) *error = std::string("shaddr_comm_create: ") + shaddr_last_error();
          return 1;
        }
        if (h.rank == 0 && t->backend.empty()) t->backend = shaddr_comm_backend(c);
        int err = 0;
        for (size_t ri = 0; ri < t->messages.size() && !err; ri++) {
          const size_t m = t->messages[ri];
          if (col.segment > m) continue;  // the seed's "*"
          const int iters = o.quick       ? 2
                            : o.iters > 0 ? o.iters
                                          : std::clamp(static_cast<int>(128 * kMiB / m), 20, 500);
          std::vector<double> samples;
          for (int i = -2; i < iters && !err; i++) {  // two warm-up calls: first touch, mappings
            if (h.rank != 0) buf[m - 1] = 0;          // checked below: this call must deliver it
            if ((err = shaddr_barrier(c))) break;
            const double t0 = now();
            err = one_bcast(c, mode, col, buf.data(), m);
            const double dt = now() - t0;
            std::vector<double> all(h.size);
            if (!err) err = h.allgather(&dt, all.data(), sizeof(double), h.ctx);
            if (!err && h.rank != 0 && buf[m - 1] != 0x11) err = -EIO;
            if (i >= 0) samples.push_back(*std::max_element(all.begin(), all.end()));
          }
          if (h.rank == 0) passes[ri][ci].push_back(median(samples) * 1e6);
        }
        if (err && h.rank == 0)
          *error = std::string("Bcast (") + mode + ", " + col.label + "): " + shaddr_last_error() +
                   " (" + std::strerror(err < 0 ? -err : err) + ")";
        shaddr_comm_free(c);
        if (err) return 1;
      }
    return 0;
  });
  for (size_t ri = 0; ri < t->messages.size(); ri++)
    for (size_t ci = 0; ci < t->columns.size(); ci++)
      if (!passes[ri][ci].empty()) t->us[ri][ci] = median(passes[ri][ci]);
  return rc;
}

std::string cell(double us) {
  char b[32];
  if (us < 0) return "*";
  std::snprintf(b, sizeof(b), us < 100 ? "%.1f" : "%.0f", us);
  return b;
}

// Index of the fastest column of a row (over the segmented columns and "not segmented").
size_t best_of(const Seed001Table &t, size_t ri) {
  size_t best = 0;
  double bt = 1e300;
  for (size_t ci = 0; ci < t.columns.size(); ci++)
    if (t.us[ri][ci] >= 0 && t.us[ri][ci] < bt) bt = t.us[ri][best = ci];
  return best;
}

std::string column_label(const Seed001Column &c) {
  std::string s = c.label;
  if (!c.relation.empty()) s += " (" + c.relation + ")";
  if (c.default_chunk) s += " [default chunk]";
  return s;
}

}  // namespace

int run_seed001(const Options &o, const Machine &m, const std::string &mode,
                std::vector<Seed001Table> *out, std::string *error) {
  const int ranks = o.ranks ? o.ranks : std::max(2, m.cpus);
  std::vector<std::string> saved;
  for (const char *v : kVars) saved.push_back(std::getenv(v) ? std::getenv(v) : "\x01");
  int rc = 0;
  for (const std::string md : {"chunk", "loop"}) {
    if (mode != "both" && mode != md) continue;
    std::fprintf(stderr, "shaddr-microbench: seed 001 table, %s mode, %d ranks...\n", md.c_str(),
                 ranks);
    Seed001Table t;
    t.mode = md;
    t.how = md == "chunk"
                ? "one shaddr_bcast of the message (message counter), SHADDR_CHUNK = segment"
                : "ceil(message / segment) shaddr_bcast calls of one segment (seed 001, Fig. 1)";
    t.ranks = ranks;
    t.columns = columns(m, md, o.quick);
    t.messages = messages(o.quick, o.max_message);
    if ((rc = run_table(o, ranks, md, &t, error))) break;
    out->push_back(t);
  }
  for (size_t i = 0; i < saved.size(); i++) {
    if (saved[i] == "\x01")
      unsetenv(kVars[i]);
    else
      setenv(kVars[i], saved[i].c_str(), 1);
  }
  return rc;
}

void print_seed001(const Machine &m, const std::vector<Seed001Table> &tables, FILE *out) {
  std::fprintf(out, "Seed 001 Table 1 on %s: L1d %s, L2 %s, L3 %s; libshaddr's default chunk %s\n",
               m.cpu.c_str(), human_size(m.l1d).c_str(), human_size(m.l2).c_str(),
               human_size(m.l3).c_str(), human_size(m.default_chunk).c_str());
  for (const Seed001Table &t : tables) {
    std::fprintf(out,
                 "\n%s mode, %d ranks, backend %s: %s\nBcast time in microseconds "
                 "(slowest rank, median); * = segment larger than the message; "
                 "< = fastest in the row\n",
                 t.mode.c_str(), t.ranks, t.backend.c_str(), t.how.c_str());
    std::fprintf(out, "%9s", "msg\\seg");
    for (const Seed001Column &c : t.columns) {
      std::string l = c.segment ? c.label : (c.defaults ? "default" : "whole");
      if (c.default_chunk) l += "(d)";
      std::fprintf(out, " %9s", l.c_str());
    }
    std::fprintf(out, "\n");
    for (size_t ri = 0; ri < t.messages.size(); ri++) {
      std::fprintf(out, "%9s", human_size(t.messages[ri]).c_str());
      const size_t best = best_of(t, ri);
      for (size_t ci = 0; ci < t.columns.size(); ci++)
        std::fprintf(out, " %8s%s", cell(t.us[ri][ci]).c_str(), ci == best ? "<" : " ");
      std::fprintf(out, "\n");
    }
  }
  std::fprintf(out, "\n(d) = the chunk libshaddr picks by itself (SHADDR_CHUNK unset)\n");
}

void markdown_seed001(const Options &o, const Machine &m, const std::vector<Seed001Table> &tables,
                      FILE *out) {
  std::string cmd;
  for (const std::string &a : o.argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::fprintf(out,
               "Machine: %s, %d online CPUs%s, kernel %s; caches of cpu0 from sysfs: "
               "L1d %s, L2 %s, L3 %s; libshaddr's default chunk (L2/2): %s.\n\n",
               m.cpu.c_str(), m.cpus, m.hypervisor ? " (a virtual machine)" : "", m.kernel.c_str(),
               human_size(m.l1d).c_str(), human_size(m.l2).c_str(), human_size(m.l3).c_str(),
               human_size(m.default_chunk).c_str());
  std::fprintf(out, "Load average when the run started (`/proc/loadavg`): %s.\n\n",
               m.loadavg.c_str());
  std::fprintf(out, "Command: `%s`\n", cmd.c_str());
  for (const Seed001Table &t : tables) {
    std::fprintf(out,
                 "\n**%s mode** — %d ranks, backend `%s`: %s. Bcast time in µs (slowest "
                 "rank; median over passes of the median over iterations); `*` = segment larger "
                 "than the message; "
                 "**bold** = fastest in the row.\n\n",
                 t.mode.c_str(), t.ranks, t.backend.c_str(), t.how.c_str());
    std::fprintf(out, "| message \\ segment |");
    for (const Seed001Column &c : t.columns) std::fprintf(out, " %s |", column_label(c).c_str());
    std::fprintf(out, "\n|---|");
    for (size_t ci = 0; ci < t.columns.size(); ci++) std::fprintf(out, "---:|");
    std::fprintf(out, "\n");
    for (size_t ri = 0; ri < t.messages.size(); ri++) {
      std::fprintf(out, "| %s |", human_size(t.messages[ri]).c_str());
      const size_t best = best_of(t, ri);
      for (size_t ci = 0; ci < t.columns.size(); ci++) {
        const std::string v = cell(t.us[ri][ci]);
        std::fprintf(out, ci == best ? " **%s** |" : " %s |", v.c_str());
      }
      std::fprintf(out, "\n");
    }
    // Bandwidth view of the same run: the best segment, the default chunk, libshaddr's defaults.
    size_t dci = t.columns.size(), defci = t.columns.size();
    for (size_t ci = 0; ci < t.columns.size(); ci++) {
      if (t.columns[ci].default_chunk) dci = ci;
      if (t.columns[ci].defaults) defci = ci;
    }
    std::fprintf(out,
                 "\n| message | fastest segment | GB/s there | GB/s at the default chunk "
                 "(%s) | GB/s with libshaddr defaults |\n|---|---|---:|---:|---:|\n",
                 human_size(m.default_chunk).c_str());
    auto gbps = [&](size_t ri, size_t ci) -> std::string {
      if (ci >= t.columns.size() || t.us[ri][ci] <= 0) return "*";
      char b[32];
      std::snprintf(b, sizeof(b), "%.2f",
                    static_cast<double>(t.messages[ri]) / (t.us[ri][ci] * 1e-6) / 1e9);
      return b;
    };
    for (size_t ri = 0; ri < t.messages.size(); ri++) {
      const size_t best = best_of(t, ri);
      std::fprintf(out, "| %s | %s | %s | %s | %s |\n", human_size(t.messages[ri]).c_str(),
                   t.columns[best].label.c_str(), gbps(ri, best).c_str(), gbps(ri, dci).c_str(),
                   gbps(ri, defci).c_str());
    }
  }
}

void json_seed001(const std::vector<Seed001Table> &tables, Json *j) {
  Json out = Json::array();
  for (const Seed001Table &t : tables) {
    Json columns = Json::array();
    for (const Seed001Column &c : t.columns)
      columns.push_back({{"label", c.label},
                         {"relation", c.relation},
                         {"segment", c.segment},
                         {"default_chunk", c.default_chunk},
                         {"defaults", c.defaults}});
    Json rows = Json::array();
    for (size_t ri = 0; ri < t.messages.size(); ri++) {
      Json us = Json::array();
      // Cells where the segment exceeds the message are null (the table's "*").
      for (double v : t.us[ri]) us.push_back(v < 0 ? Json(nullptr) : number(v));
      rows.push_back({{"message", t.messages[ri]}, {"us", std::move(us)}});
    }
    out.push_back({{"mode", t.mode},
                   {"how", t.how},
                   {"backend", t.backend},
                   {"ranks", t.ranks},
                   {"columns", std::move(columns)},
                   {"rows", std::move(rows)}});
  }
  (*j)["seed001"] = std::move(out);
}

}  // namespace microbench
