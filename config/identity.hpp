// A run's identity, which every snapshot and tape stores: a hash of the resolved
// configuration's values, key by key (the key table's names and each value's exact form), never
// of printed text, so that a changed help text, comment or layout of `--print-config` leaves
// recorded runs valid. tests/config/test_identity.cpp pins it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config.hpp"

namespace diloco {

// Everything that determines the run: the configuration without its snapshot settings, its
// placement on nodes and its alerts, so that a snapshot cannot be resumed into another run but
// the same run may move, snapshot elsewhere or watch differently.
uint64_t run_identity(const run_config& config);
// The identity of a deployed run's cluster (every node must run the same configuration,
// placement included): nodes refuse hellos of another.
uint64_t cluster_identity(const run_config& config);
// The keys in which two configurations are different runs ("learners: 3, the other has 4"),
// snapshot settings, placement and alerts aside; empty when run_identity agrees.
std::vector<std::string> run_differences(const run_config& given, const run_config& other);

}  // namespace diloco
