// SPDX-License-Identifier: MIT
// The parts of the interposer's state apart from its lifecycle (state.cc): the plan a group
// decides by and what the group's first set-up found (state_plan.cc), and the settings
// (state_settings.cc).
#pragma once

#include <string>
#include <vector>

#include "settings.h"
#include "state.h"

namespace shaddr::interpose {

// What a set-up found for a group of processes (key: their MPI_COMM_WORLD ranks in the group's
// order), so that the next communicator of the same group knows its answer without
// communicating. Made by collective set-ups only, never dropped: the same entries on every rank
// of a group when one of its communicators makes its first collective call. Small: groups of
// one node size share one plan.
struct Profile {
  bool usable = false;
  bool config_error = false;
  std::string why;
  const shaddr_plan *plan = nullptr;  // libshaddr's (shaddr_plan_intern)
};
const Profile *find_profile(const std::vector<int> &key);  // nullptr: none yet
void save_profile(const State &s, const std::vector<int> &key);
void apply_profile(const Profile &p, State *s);

// Takes libshaddr's plan for s->sc and agrees over s->comm that every rank sends the same sizes
// to libshaddr: a rank without a node communicator (a node of one rank) takes the plan of the
// first rank with one; where nodes' plans differ, none (every sized call forwarded).
// Collective over s->comm.
void agree_plan(State *s);
// "bcast: 0-0 mpi, 1-4K slots, ...": the plan (SHADDR_VERBOSE).
std::string describe_plan(const State &s);

// The interposer's settings (settings_table.cc), read once. Returns the first error.
int read_settings(Settings *st, std::string *why);

}  // namespace shaddr::interpose
