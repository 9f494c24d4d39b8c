// SPDX-License-Identifier: MIT
// Multi-reader FIFOs in shared memory (the Bcast FIFO, the point-to-point FIFOs): a writer
// reserves slot `tail++` (fetch-and-increment), writes once `slot - head < nslots`, and publishes
// the slot with a reader count; every reader consumes slots in order and decrements the count;
// the last reader of a slot advances head. Metadata (bytes, stream id, writer) travels in the
// slot, so several streams share one FIFO. Multi-producer; readers are all ranks but the writer
// (Bcast FIFO) or one receiver (point-to-point FIFO).
//
// The memory is plain shared memory laid out by Fifo::bytes_for(); every process constructs
// a Fifo view over it; one of them calls init() before anyone uses it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "wait.h"

namespace shaddr {

// Spin briefly, then yield (for tests' own polling loops; libshaddr waits with a Waiter).
void wait_backoff(unsigned *spins);

class Fifo {
 public:
  struct Message {
    uint32_t bytes;
    uint32_t stream;
    int32_t writer;
  };

  static size_t bytes_for(uint32_t nslots, uint32_t slot_payload);
  // wait: how blocking push/pop wait (the FIFO's doorbell is in its memory); nullptr: the
  // default policy.
  Fifo(void *mem, uint32_t nslots, uint32_t slot_payload, const WaitPolicy *wait = nullptr);
  void init();  // once, before any push/pop

  uint32_t payload_max() const { return payload_; }

  // A process's position in the FIFO; every process starts at 0. In a Bcast FIFO a writer is
  // also a reader of the others' messages: it passes its own slots by number, never by
  // looking at them (they may already be reused once everyone else has read them).
  struct Cursor {
    uint64_t next = 0;
    std::deque<uint64_t> own;  // slots this process wrote and its reads have not passed yet
  };

  // Blocks until a slot is free. readers: how many pops consume this message. Pass the
  // writer's own cursor when the writer also reads this FIFO (Bcast). 0 or -EMSGSIZE.
  int push(int writer, uint32_t stream, const void *data, uint32_t bytes, uint32_t readers,
           Cursor *own = nullptr);
  // As push(), but -EAGAIN at once if the FIFO is full.
  int try_push(int writer, uint32_t stream, const void *data, uint32_t bytes, uint32_t readers,
               Cursor *own = nullptr);
  // Blocks for the next message, passing the reader's own slots (cur->own).
  // Copies up to cap bytes into dst. Returns 0 or -EMSGSIZE (cap too small; message consumed).
  int pop(Cursor *cur, void *dst, uint32_t cap, Message *meta);
  // As pop(), but -EAGAIN at once if no message is there yet.
  int try_pop(Cursor *cur, void *dst, uint32_t cap, Message *meta);

 private:
  struct Header {
    alignas(128) std::atomic<uint64_t> tail;
    alignas(128) std::atomic<uint64_t> head;
    Bell bell;  // rung when a slot is published (readers wait) and when head moves (writers)
  };
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq;  // t + 1 once slot t is published
    std::atomic<uint32_t> readers;
    uint32_t bytes;
    uint32_t stream;
    int32_t writer;
  };
  static size_t stride_for(uint32_t payload);
  Slot *slot(uint64_t t) const;
  void advance_head();
  int reserve(bool wait, uint64_t *t);
  void fill(uint64_t t, int writer, uint32_t stream, const void *data, uint32_t bytes,
            uint32_t readers);
  int consume(Cursor *cur, void *dst, uint32_t cap, Message *meta, bool wait);
  Header *hdr_;
  char *slots_;
  uint32_t nslots_;
  uint32_t payload_;
  size_t stride_;
  const WaitPolicy *wait_;
};

}  // namespace shaddr
