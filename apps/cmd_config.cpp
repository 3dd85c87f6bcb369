// `diloco config convert FILE`: a cluster file of the published form (global_config,
// synchronizer, learner_N, network) in ours, each key commented with where it came from.
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "apps/commands.hpp"
#include "config/cluster_file.hpp"
#include "config/published.hpp"
#include "config/resolve.hpp"

namespace diloco {

int run_config_command(int argc, const char* const* argv) {
  std::string action, file, out_path;
  cli::arg_parser p("diloco config",
                    "convert: reads a cluster file of the published form (global_config,\n"
                    "synchronizer, learner_0, ..., network) and writes ours, each key with a\n"
                    "comment naming the key it came from. 'diloco simulate --cluster' reads the\n"
                    "published form directly through the same conversion.");
  p.positional("ACTION", &action, "convert");
  p.positional("FILE", &file, "the cluster file to convert");
  p.option("output", &out_path, "write the result here instead of standard output");
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco config", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (action != "convert") {
    return report_error(
        "diloco config",
        status(errc::invalid_argument, "unknown action '" + action + "' (expected convert)"));
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    return report_error("diloco config", status(errc::not_found, file + ": cannot read the file"));
  } catch (const YAML::ParserException& e) {
    return report_error("diloco config", status(errc::invalid_argument,
                                                file + ":" + std::to_string(e.mark.line + 1) + ":" +
                                                    std::to_string(e.mark.column + 1) +
                                                    ": not valid YAML: " + e.msg));
  }
  if (!is_published_form(root)) {
    return report_error("diloco config",
                        status(errc::invalid_argument,
                               file + ": not the published form (no global_config, "
                                      "synchronizer, network or learner_N): it is read as it is"));
  }
  auto ours = convert_published(root, file);
  if (!ours) return report_error("diloco config", ours.error());
  // The result must load and validate as it stands.
  if (!ours->assumed.empty())
    std::fprintf(stderr, "diloco config: %s: assuming %s\n", file.c_str(), ours->assumed.c_str());
  auto loaded = load_cluster_text(ours->yaml, file + " (converted)", builtin_run_config());
  if (!loaded) return report_error("diloco config", loaded.error());
  derive_dependent(loaded->config);
  if (auto st = validate_with_lines(loaded->config, file + " (converted)", loaded->key_lines);
      !st.ok())
    return report_error("diloco config", st);
  if (out_path.empty()) {
    std::fputs(ours->yaml.c_str(), stdout);
    return 0;
  }
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  out << ours->yaml;
  if (!out.flush()) {
    return report_error("diloco config",
                        status(errc::io_error, out_path + ": cannot write the converted file"));
  }
  std::printf("wrote %s\n", out_path.c_str());
  return 0;
}

}  // namespace diloco
