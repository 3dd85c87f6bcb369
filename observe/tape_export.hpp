// A tape as pictures in existing viewers (docs/replay.md):
//
//   - Chrome's trace event format (chrome://tracing, Perfetto): one track per actor, a slice
//     for every message received, timer fired and message sent, and flow arrows from each send
//     to its receipt; under each actor, lanes of spans where time went (a learner's inner
//     steps, a shard's rounds up to their merge and its grace windows, an actor's outages),
//     and every transfer from send to receipt on the run's async tracks;
//   - ShiViz's vector-clock log: one event per line pair (description, then host and clock),
//     with the parsing regular expression on the first line, so the file loads as is (a
//     timer says when it was set).
//
// Times are simulated time, or a deployed run's real time (microseconds since the run's start
// for Chrome).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/tape_file.hpp"

namespace diloco {

// "learner 3", "shard 0", "scheduler", ...
std::string tape_actor_name(const tape& t, uint32_t actor);

// For each receipt (message or dropped) the tape position of the send it came from, or -1
// (no recorded send: a start, a timer, or a message whose sender was not recorded).
std::vector<int64_t> match_sends(const tape& t);

// A deployed run's tapes (several hosts) in real time: each node's clock less its offset from
// the first node's, estimated from the messages between them (otherData.clock says by how much
// and within what); `logical`: in Lamport time from the vector clocks instead.
std::string chrome_trace_json(const tape& t, bool logical = false);
std::string shiviz_log(const tape& t);

}  // namespace diloco
