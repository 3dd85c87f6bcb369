// Syncer merge and codec throughput, each against memcpy of the same bytes in the same run.
//
//   merge:  M inputs of `mib` MiB each (default 8 x 16 MiB), RDA and weighted average, and the
//           syncer's whole merge (RDA with the per-tensor cosines); the baseline copies the same
//           M inputs (memcpy of M x mib MiB).
//   codecs: one `mib` MiB fragment encoded and decoded by each codec; the baseline is memcpy of
//           the fragment. Also the compression ratio actually achieved.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/job_pool.hpp"
#include "bench/bench_util.hpp"
#include "tensor/codec.hpp"
#include "tensor/fragment.hpp"
#include "tensor/merge.hpp"
#include "tensor/params.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

void fill_normal(float_buffer& b, uint64_t seed) {
  rng g(seed);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(g.normal() * 1e-3);
}

void bench_merge(int inputs, size_t floats, int reps) {
  std::vector<float_buffer> in;
  for (int i = 0; i < inputs; ++i) {
    in.emplace_back(floats);
    fill_normal(in.back(), static_cast<uint64_t>(i) + 1);
  }
  float_buffer out(floats), copy(floats * inputs);
  const double bytes = static_cast<double>(floats) * 4 * inputs;
  const double t_copy = bench::median_time_s(reps, [&] {
    for (int i = 0; i < inputs; ++i)
      std::memcpy(copy.data() + floats * i, in[i].data(), floats * 4);
  });
  std::printf("merge: %d inputs x %.0f MiB\n", inputs, floats * 4 / 1048576.0);
  std::printf("  memcpy            %7.2f GB/s\n", bytes / t_copy / 1e9);
  std::vector<merge_input> mi;
  for (int i = 0; i < inputs; ++i) mi.push_back({in[i].all(), 1000.0 + i});
  const local_ranges all = {{0, floats}};
  for (auto rule : {merge_rule::rda, merge_rule::weighted_average}) {
    const double t = bench::median_time_s(reps, [&] {
      auto st = merge(rule, span<const merge_input>(mi.data(), mi.size()), all, out.all());
      if (!st.ok()) std::abort();
    });
    std::printf("  %-16s  %7.2f GB/s  ratio_vs_memcpy=%.2f\n", to_string(rule), bytes / t / 1e9,
                t_copy / t);
  }
  // What the syncer runs: RDA on a fragment (here one tensor) and the learners' mean cosine.
  fragment f;
  f.spans = {{0, floats, false, 0}};
  f.size = floats;
  std::vector<tensor_agreement> agreement;
  const double t = bench::median_time_s(reps, [&] {
    auto st = merge_fragment(f, merge_rule::rda, span<const merge_input>(mi.data(), mi.size()),
                             out.all(), &agreement);
    if (!st.ok()) std::abort();
  });
  std::printf("  %-16s  %7.2f GB/s  ratio_vs_memcpy=%.2f\n", "rda + cosines", bytes / t / 1e9,
              t_copy / t);
  // The same with a pool of one worker beside the calling thread (a shard's merge on two
  // cores); the result must be the same to the bit.
  const float_buffer one_thread = out;
  const std::vector<tensor_agreement> one_agreement = agreement;
  job_pool pool(1);
  const double t2 = bench::median_time_s(reps, [&] {
    auto st = merge_fragment(f, merge_rule::rda, span<const merge_input>(mi.data(), mi.size()),
                             out.all(), &agreement, &pool);
    if (!st.ok()) std::abort();
  });
  const bool same = std::memcmp(out.data(), one_thread.data(), floats * 4) == 0 &&
                    agreement.size() == one_agreement.size() &&
                    agreement[0].cosine == one_agreement[0].cosine;
  std::printf("  %-16s  %7.2f GB/s  ratio_vs_memcpy=%.2f  same_bits=%s\n", "rda + cos, 2 thr",
              bytes / t2 / 1e9, t_copy / t2, same ? "yes" : "NO");
  if (!same) std::exit(1);
}

void bench_codecs(size_t floats, int reps) {
  float_buffer values(floats), decoded(floats), copy(floats), residual(floats);
  fill_normal(values, 99);
  const double bytes = static_cast<double>(floats) * 4;
  const double t_copy =
      bench::median_time_s(reps, [&] { std::memcpy(copy.data(), values.data(), floats * 4); });
  std::printf("codecs: one %.0f MiB fragment\n", bytes / 1048576.0);
  std::printf("  memcpy  %7.2f GB/s\n", bytes / t_copy / 1e9);
  std::printf("  %-6s %3s %10s %8s %10s %8s %8s %10s\n", "codec", "ef", "enc GB/s", "enc/cpy",
              "dec GB/s", "dec/cpy", "ratio", "rel.err");
  std::vector<uint8_t> blob;
  for (int k = 0; k < codec_kind_count; ++k) {
    const codec_config c = codec_config::make(static_cast<codec_kind>(k));
    residual.fill(0.0f);
    const double t_enc =
        bench::median_time_s(reps, [&] { (void)encode(c, values.all(), residual.all(), blob); });
    const double t_dec = bench::median_time_s(reps, [&] {
      if (!decode(byte_view(blob.data(), blob.size()), decoded.all()).ok()) std::abort();
    });
    // The error of one encoding from a zero residual (the timed runs fed theirs forward).
    residual.fill(0.0f);
    (void)encode(c, values.all(), residual.all(), blob);
    if (!decode(byte_view(blob.data(), blob.size()), decoded.all()).ok()) std::abort();
    double err = 0, norm = 0;
    for (size_t i = 0; i < floats; ++i) {
      err += (static_cast<double>(decoded[i]) - values[i]) *
             (static_cast<double>(decoded[i]) - values[i]);
      norm += static_cast<double>(values[i]) * values[i];
    }
    std::printf("  %-6s %3s %10.2f %8.2f %10.2f %8.2f %8.2f %10.4f\n", to_string(c.kind),
                c.error_feedback ? "on" : "off", bytes / t_enc / 1e9, t_copy / t_enc,
                bytes / t_dec / 1e9, t_copy / t_dec, bytes / static_cast<double>(blob.size()),
                std::sqrt(err / norm));
  }
}

}  // namespace

int main(int argc, char** argv) {
  double mib = 16;
  int inputs = 8, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--inputs") == 0) inputs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  const auto floats = static_cast<size_t>(mib * 1048576.0 / 4);
  bench_merge(inputs, floats, reps);
  bench_codecs(floats, reps);
  return 0;
}
