// The manual page (roff) and the bash completion of the `diloco` command line, made from the
// commands' own --help texts.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace diloco {

struct command_help {
  std::string name, summary, help;  // help: what `diloco NAME --help` prints
};

// What f writes to standard output (file descriptor 1) while it runs.
std::string capture_stdout(const std::function<void()>& f);

std::string manual_page(const std::string& version, const std::string& summary,
                        const std::vector<command_help>& commands);
std::string bash_completion(const std::vector<command_help>& commands);

}  // namespace diloco
