// Messages as stored data: snapshot files keep pending timers and the messages recorded on
// channels, tapes keep every message an actor received. Every message type has a stable tag,
// its position in the list in protocol/wire.cpp (append only: tags are part of the formats).
#pragma once

#include <caf/message.hpp>

#include <cstdint>
#include <string>

namespace diloco {

struct wire_message {
  caf::message msg;
};

// Field list for protocol/persist.hpp: the tag, then the message's own fields. Loading an
// unknown tag is an error. Instantiated for persist_reader and persist_writer.
template <class F>
void persist_fields(F& f, wire_message& x);

// Whether the message holds one value of a type on the list.
bool wire_known(const caf::message& msg);
// The type's name ("outer_gradient_msg"), or "unknown".
std::string wire_name(const caf::message& msg);
// protocol/digest.hpp's digest of the value (0 for an unknown type).
uint64_t wire_digest(const caf::message& msg);
// The type's tag (its position in the list), or -1; and the name of a tag.
int wire_tag(const caf::message& msg);
std::string wire_tag_name(int tag);
// The message with its stamp replaced (nullptr: cleared), for storing a message's content once
// and its stamps apart. Messages without a stamp come back as they are.
struct stamp;
caf::message wire_with_stamp(const caf::message& msg, const stamp* st);
// The sender's actor index and vector clock of a stamped message; false for timers and
// others without a stamp.
const stamp* wire_stamp(const caf::message& msg);

}  // namespace diloco
