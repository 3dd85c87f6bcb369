// Learner training throughput: tokens/s and model FLOP/s of the bare inner loop, with the
// single-thread Eigen GEMM rate (n = 512) measured in the same run as the yardstick.
// bench/train_vs_pytorch.sh adds the PyTorch baseline.
#include <Eigen/Core>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/bench_util.hpp"
#include "tensor/trainer.hpp"

using namespace diloco;

namespace {

double gemm_gflops(int n) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  const double t = bench::median_time_s(7, [&] { c.noalias() = a * b; });
  bench::do_not_optimize(c(0, 0));
  return 2.0 * n * n * n / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 64;
  int steps = 3000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batch") == 0) batch = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  Eigen::setNbThreads(1);
  const double gemm = gemm_gflops(512);

  model_config mc;
  auto data = data_source::build(data_config{}, mc.context);
  if (!data) return 1;
  inner_trainer trainer(mc, *data, batch, 1, 0, 1);
  adamw_config oc;
  oc.total_steps = steps;
  for (int s = 0; s < 100; ++s) trainer.step(oc);  // warm caches and the allocator
  const double start = bench::now_s();
  for (int s = 0; s < steps; ++s) trainer.step(oc);
  const double elapsed = bench::now_s() - start;
  const double tok_s = static_cast<double>(steps) * batch / elapsed;
  const double gflops = tok_s * trainer.model().train_flops_per_token() / 1e9;
  std::printf("model_params=%zu batch=%d steps=%d\n", trainer.model().layout().param_count(), batch,
              steps);
  std::printf("gemm512_gflops=%.1f\n", gemm);
  std::printf("tokens_per_s=%.1f\n", tok_s);
  std::printf("model_gflops=%.2f\n", gflops);
  std::printf("ratio_vs_gemm=%.3f\n", gflops / gemm);
  return 0;
}
