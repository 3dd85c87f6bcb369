#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "actors/state_io.hpp"
#include "base/check.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

namespace {

using self_ptr = coordinator_actor::stateful_pointer<coordinator_state>;

const snapshot_config& settings(self_ptr self) {
  return self->state.env->config.snapshot;
}

std::vector<double> scripted_times(const snapshot_config& c) {
  std::vector<double> t = c.at_s;
  std::sort(t.begin(), t.end());
  return t;
}

// The next snapshot time (periodic or scripted) after now, as a timer.
void arm_next(self_ptr self) {
  auto& st = self->state;
  const int64_t now = now_ns(self);
  const auto at = scripted_times(settings(self));
  while (st.next_at < at.size() && st.start_ns + to_ns(at[st.next_at]) <= now) ++st.next_at;
  // A run resumed with snapshots switched off (or a new cadence) follows its own settings.
  if (!settings(self).enabled()) return;
  if (settings(self).every_s <= 0) st.next_periodic_ns = -1;
  DILOCO_CHECK(st.next_periodic_ns < 0 || to_ns(settings(self).every_s) > 0,
               "snapshot coordinator: a periodic snapshot every nanosecond or more");
  while (st.next_periodic_ns >= 0 && st.next_periodic_ns <= now)
    st.next_periodic_ns += to_ns(settings(self).every_s);
  int64_t due = INT64_MAX;
  if (st.next_periodic_ns >= 0) due = st.next_periodic_ns;
  if (st.next_at < at.size()) due = std::min(due, st.start_ns + to_ns(at[st.next_at]));
  if (due == INT64_MAX) return;
  DILOCO_CHECK(due > now, "snapshot coordinator: the next snapshot is not in the future");
  set_timer(self, st.out, due - now, snapshot_tick{++st.tick_seq});
}

// The snapshot is done with, written or not: its directory goes unless committed.
void drop_collected(coordinator_state& st) {
  if (st.writer) {
    if (auto s = st.writer->abandon(); !s.ok()) spdlog::warn("snapshot: {}", s.to_string());
  }
  st.writer.reset();
  st.arrived.clear();
  st.parts_in = 0;
  st.collecting = 0;
}

// Snapshot n begins: this actor records first (as the initiator), then every actor gets a
// marker. The other actors' markers follow the channels from there.
void begin_snapshot(self_ptr self) {
  auto& st = self->state;
  if (st.collecting != 0) {
    // In a deployed (real-time) run a part can be lost for good: an actor's node went away
    // after the marker. A snapshot still incomplete long after it began is given up, so that
    // the run goes on taking snapshots. Simulation loses nothing: it keeps skipping.
    const int64_t stale_ns = std::max(to_ns(snapshot_give_up_min_s),
                                      snapshot_give_up_periods * to_ns(settings(self).every_s));
    if (st.out.scale != 1 || now_ns(self) - st.collecting_since_ns < stale_ns) {
      st.report.skipped += 1;
      return;
    }
    std::string missing;
    for (uint32_t i = 0; i < st.arrived.size(); ++i) {
      if (i != st.out.self_index && st.arrived[i] == 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    }
    spdlog::warn(
        "snapshot {}: given up after {:.1f} s without the parts of actors [{}] (their "
        "node went away?)",
        st.collecting, to_s(now_ns(self) - st.collecting_since_ns), missing);
    st.report.failed += 1;
    drop_collected(st);
  }
  DILOCO_CHECK(st.collecting == 0, "snapshot coordinator: a snapshot began over another");
  const uint64_t n = st.next++;
  DILOCO_CHECK(n > 0, "snapshot coordinator: snapshot 0 (the number of none)");
  st.collecting = n;
  st.collecting_since_ns = now_ns(self);
  st.arrived.assign(st.env->ids.count(), 0);
  DILOCO_CHECK(st.out.self_index < st.arrived.size(), "snapshot coordinator: an actor of the run");
  st.parts_in = 0;
  st.failure.clear();
  st.resume_tick = INT64_MAX;
  st.write_s = 0.0;
  st.bytes = 0;
  auto writer = snapshot_writer::open(settings(self).dir, n);
  if (writer) {
    st.writer = std::move(*writer);
  } else {
    st.failure = writer.error().to_string();
  }
  spdlog::debug("snapshot {}: started at {:.3f} s", n, to_s(observed_now_ns(self)));
  for (uint32_t i = 0; i < st.env->ids.count(); ++i) {
    if (i != st.out.self_index)
      post_marker(self, st.out, i, st.dir->at(i), marker_msg{st.out.self_index, n});
  }
  record_state(self, n);
}

// Every part is in (and written): the manifest, unless something went wrong on the way, in
// which case the snapshot is not written and the committed ones stay (pruning would otherwise
// delete a usable snapshot for it).
void commit(self_ptr self) {
  auto& st = self->state;
  const uint64_t n = st.collecting;
  DILOCO_CHECK(n != 0 && st.parts_in == st.arrived.size(),
               "snapshot coordinator: a commit without every part");
  if (!st.failure.empty()) {
    st.report.failed += 1;
    spdlog::error("snapshot {} not written: {}; earlier snapshots are kept", n, st.failure);
    drop_collected(st);
    return;
  }
  DILOCO_CHECK(st.writer != nullptr && st.resume_tick != INT64_MAX,
               "snapshot coordinator: a snapshot holds one part per actor and a cut");
  const auto wall0 = std::chrono::steady_clock::now();
  snapshot_manifest m;
  m.run_id = st.ctx ? st.ctx->run_id : 0;
  m.snapshot = n;
  m.tick_scale = st.env->tick_scale;
  m.resume_tick = st.resume_tick;
  if (st.ctx) m.config_text = st.ctx->config_text;
  auto written = st.writer->commit(std::move(m), st.arrived.size());
  st.write_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const uint64_t bytes = st.bytes;
  const double write_s = st.write_s;
  drop_collected(st);
  if (!written) {
    st.report.failed += 1;
    spdlog::error("snapshot {} not written: {}", n, written.error().to_string());
    return;
  }
  st.report.snapshots += 1;
  st.report.bytes_written += bytes;
  prune_snapshots(settings(self).dir, settings(self).keep, st.ctx ? st.ctx->run_id : 0);
  spdlog::debug("snapshot {}: {} ({:.1f} MB)", n, *written, static_cast<double>(bytes) / 1e6);
  st.report.write_wall_s += write_s;
  if (st.ctx && st.ctx->on_commit) st.ctx->on_commit(n, *written, bytes, write_s);
}

void on_part(self_ptr self, snapshot_part& part) {
  auto& st = self->state;
  if (part.snapshot < st.collecting || (st.collecting == 0 && part.snapshot < st.next)) {
    return;  // a late part of a snapshot given up on
  }
  if (part.snapshot != st.collecting || part.index >= st.arrived.size() ||
      st.arrived[part.index] != 0) {
    spdlog::error("snapshot coordinator: unexpected part of snapshot {} from actor {}",
                  part.snapshot, part.index);
    return;
  }
  DILOCO_CHECK(st.parts_in < st.arrived.size(), "snapshot coordinator: no more parts than actors");
  st.arrived[part.index] = 1;
  st.parts_in += 1;
  if (st.failure.empty() && part.summary == unsaved_state_summary) {
    // A part without its actor's state cannot be restored.
    st.failure =
        "actor " + std::to_string(part.index) + "'s state could not be saved (its error is above)";
    if (st.writer) (void)st.writer->abandon();
  }
  if (st.failure.empty()) {
    const auto wall0 = std::chrono::steady_clock::now();
    actor_file_header h;
    h.run_id = st.ctx ? st.ctx->run_id : 0;
    h.snapshot = st.collecting;
    h.index = part.index;
    h.role = static_cast<uint8_t>(role_of(st.env->ids, part.index));
    h.cut_tick = part.cut_tick;
    h.summary = part.summary;
    std::vector<byte_view> views;
    for (const auto& piece : part.payload) {
      views.push_back(piece.view());
      st.bytes += piece.size();
    }
    if (auto s = st.writer->write_part(h, views); !s.ok()) {
      st.failure = s.to_string();
      (void)st.writer->abandon();
    }
    st.resume_tick = std::min(st.resume_tick, part.cut_tick);
    st.write_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  }
  part.payload.clear();  // written: the part's bytes go now, not with the snapshot
  if (st.parts_in == st.arrived.size()) commit(self);
}

}  // namespace

coordinator_actor::behavior_type snapshot_coordinator(
    coordinator_actor::stateful_pointer<coordinator_state> self,
    std::shared_ptr<const actor_env> env, directory_ptr dir,
    std::shared_ptr<const snapshot_context> ctx) {
  auto& init = self->state;
  init.env = env;
  init.dir = std::move(dir);
  init.ctx = std::move(ctx);
  init.out.init(*env, env->ids.coordinator());
  return {
      [=](rewire_msg& m) { on_rewire(self->state, m); },
      [=](start_msg& msg) {
        if (start_or_restore(self, msg)) return;
        auto& st = self->state;
        st.start_ns = now_ns(self);
        if (st.ctx) st.next = std::max(st.next, st.ctx->first_snapshot);
        if (!settings(self).enabled()) return;
        if (settings(self).every_s > 0)
          st.next_periodic_ns = st.start_ns + to_ns(settings(self).every_s);
        arm_next(self);
      },
      [=](marker_msg& m) { on_marker(self, m); },
      [=](snapshot_part& part) { on_part(self, part); },
      received(self,
               [=](snapshot_request&) {
                 if (!self->state.stopped && settings(self).enabled()) begin_snapshot(self);
               }),
      [=](snapshot_tick tick) {
        timer_fired(self, tick);
        auto& st = self->state;
        if (tick.seq != st.tick_seq || st.stopped || !settings(self).enabled()) return;
        arm_next(self);  // first: the next one's timer is part of the state this snapshot saves
        begin_snapshot(self);
      },
      received(self,
               [=](stop_msg&) {
                 self->state.stopped = true;  // the run is ending: no new snapshots
               }),
      [=](report_request) {
        coordinator_report r = self->state.report;
        r.trace = self->state.out.trace;
        return r;
      },
  };
}

}  // namespace diloco
