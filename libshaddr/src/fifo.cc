// SPDX-License-Identifier: MIT
#include "fifo.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace shaddr {

void wait_backoff(unsigned *spins) {
  if (++*spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  sched_yield();
}

// A slot: its header line, then the payload from the next line on.
size_t Fifo::stride_for(uint32_t payload) {
  return sizeof(Slot) + (static_cast<size_t>(payload) + 63) / 64 * 64;
}

size_t Fifo::bytes_for(uint32_t nslots, uint32_t slot_payload) {
  return sizeof(Header) + static_cast<size_t>(nslots) * stride_for(slot_payload);
}

namespace {
const WaitPolicy kDefaultWait{};
}  // namespace

Fifo::Fifo(void *mem, uint32_t nslots, uint32_t slot_payload, const WaitPolicy *wait)
    : hdr_(static_cast<Header *>(mem)),
      slots_(static_cast<char *>(mem) + sizeof(Header)),
      nslots_(nslots),
      payload_(slot_payload),
      stride_(stride_for(slot_payload)),
      wait_(wait ? wait : &kDefaultWait) {}

Fifo::Slot *Fifo::slot(uint64_t t) const {
  return reinterpret_cast<Slot *>(slots_ + (t % nslots_) * stride_);
}

void Fifo::init() {
  new (&hdr_->tail) std::atomic<uint64_t>(0);
  new (&hdr_->head) std::atomic<uint64_t>(0);
  new (&hdr_->bell) Bell{};
  for (uint32_t i = 0; i < nslots_; i++) {
    Slot *s = slot(i);
    new (&s->seq) std::atomic<uint64_t>(0);
    new (&s->readers) std::atomic<uint32_t>(0);
  }
}

// Take the next slot once it is free: an atomic increment of tail, made only when there is
// room, so that a non-blocking push never holds a slot it cannot fill.
int Fifo::reserve(bool wait, uint64_t *t) {
  Waiter w(*wait_, &hdr_->bell);
  uint64_t cur = hdr_->tail.load(std::memory_order_relaxed);
  for (;;) {
    if (cur - hdr_->head.load(std::memory_order_acquire) >= nslots_) {
      if (!wait) return -EAGAIN;
      while (!w.round([&] {
        cur = hdr_->tail.load(std::memory_order_relaxed);
        return cur - hdr_->head.load(std::memory_order_acquire) < nslots_;
      })) {
      }
      continue;
    }
    if (hdr_->tail.compare_exchange_weak(cur, cur + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      *t = cur;
      return 0;
    }
  }
}

void Fifo::fill(uint64_t t, int writer, uint32_t stream, const void *data, uint32_t bytes,
                uint32_t readers) {
  Slot *s = slot(t);
  s->bytes = bytes;
  s->stream = stream;
  s->writer = writer;
  if (bytes) std::memcpy(reinterpret_cast<char *>(s + 1), data, bytes);
  s->readers.store(readers, std::memory_order_relaxed);
  // seq_cst here and in advance_head(): a finisher either sees the other's update or the other
  // sees its own, so head never stops short of a consumed slot.
  s->seq.store(t + 1, std::memory_order_seq_cst);
  ring(hdr_->bell);
  if (readers == 0) advance_head();  // a message nobody reads is consumed at once
}

int Fifo::push(int writer, uint32_t stream, const void *data, uint32_t bytes, uint32_t readers,
               Cursor *own) {
  if (bytes > payload_) return -EMSGSIZE;
  uint64_t t;
  reserve(true, &t);
  if (own) own->own.push_back(t);
  fill(t, writer, stream, data, bytes, readers);
  return 0;
}

int Fifo::try_push(int writer, uint32_t stream, const void *data, uint32_t bytes,
                   uint32_t readers, Cursor *own) {
  if (bytes > payload_) return -EMSGSIZE;
  uint64_t t;
  if (int err = reserve(false, &t)) return err;
  if (own) own->own.push_back(t);
  fill(t, writer, stream, data, bytes, readers);
  return 0;
}

// Move head over every consumed slot, in order. Any process may do it; slots can finish out
// of order (in a Bcast FIFO the writer of a slot does not read it), head never skips one.
void Fifo::advance_head() {
  uint64_t h = hdr_->head.load(std::memory_order_seq_cst);
  bool moved = false;
  for (;;) {
    Slot *s = slot(h);
    if (s->seq.load(std::memory_order_seq_cst) != h + 1 ||
        s->readers.load(std::memory_order_seq_cst) != 0)
      break;
    if (hdr_->head.compare_exchange_weak(h, h + 1, std::memory_order_seq_cst)) {
      h++;
      moved = true;
    }
  }
  if (moved) ring(hdr_->bell);  // a writer may wait for a free slot
}

int Fifo::pop(Cursor *cur, void *dst, uint32_t cap, Message *meta) {
  return consume(cur, dst, cap, meta, true);
}

int Fifo::try_pop(Cursor *cur, void *dst, uint32_t cap, Message *meta) {
  return consume(cur, dst, cap, meta, false);
}

int Fifo::consume(Cursor *cur, void *dst, uint32_t cap, Message *meta, bool wait) {
  for (;;) {
    const uint64_t t = cur->next;
    if (!cur->own.empty() && cur->own.front() == t) {
      cur->own.pop_front();  // our own message: we are not among its readers
      cur->next = t + 1;
      continue;
    }
    Slot *s = slot(t);
    auto published = [&] { return s->seq.load(std::memory_order_acquire) == t + 1; };
    if (!wait && !published()) return -EAGAIN;
    Waiter w(*wait_, &hdr_->bell);
    while (!w.round(published)) {
    }
    cur->next = t + 1;
    int err = 0;
    Message m{s->bytes, s->stream, s->writer};
    if (m.bytes > cap)
      err = -EMSGSIZE;
    else if (m.bytes)
      std::memcpy(dst, reinterpret_cast<const char *>(s + 1), m.bytes);
    if (meta) *meta = m;
    if (s->readers.fetch_sub(1, std::memory_order_seq_cst) == 1) advance_head();
    return err;
  }
}

}  // namespace shaddr
