// SPDX-License-Identifier: MIT
// What a rank's children inherit of shaddr-run's preload (docs/heap.md, "Children").
#pragma once

#include <string>
#include <string_view>

namespace shaddr {

// Once a process is an MPI rank (the interposer calls this at MPI_Init), the processes it starts
// (system, popen, posix_spawn, exec of another program) are not ranks of this job: removes
// libshaddr-heap.so and the interposers (libshaddr-mpich.so, libshaddr-openmpi.so) from this
// process's LD_PRELOAD, so that they start without them, unless @keep (the interposer's
// SHADDR_PRELOAD_CHILDREN, read with its other settings). Nothing changes for this process (the libraries stay loaded). Replaces the variable's value
// in one step (setenv), never removes or moves entries of environ, so a thread reading the
// environment meanwhile sees the old value or the new one.
void drop_preload_for_children(bool keep);

// LD_PRELOAD's value without shaddr's libraries (entries separated by ':' or blanks, as
// ld.so reads them; the others kept in their order, joined by ':'). For the unit test.
std::string preload_without_shaddr(std::string_view preload);

}  // namespace shaddr
