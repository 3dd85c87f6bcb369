// The manual page and the shell completion, both made from what `diloco CMD --help` prints, so
// they never disagree with the command line they describe.
#include "apps/manual.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <sstream>
#include <vector>

#include "base/check.hpp"

namespace diloco {

namespace {

// One command's help text in parts: the usage line, the summary paragraph, and its sections
// ("arguments", "options"), each a list of (term, description).
struct help_parts {
  std::string usage, summary;
  struct item {
    std::string term, text;
  };
  std::vector<std::pair<std::string, std::vector<item>>> sections;
};

help_parts parse_help(const std::string& text) {
  help_parts h;
  std::istringstream in(text);
  std::string line;
  enum { usage, summary, section } at = usage;
  while (std::getline(in, line)) {
    if (at == usage) {
      if (line.rfind("usage: ", 0) == 0) h.usage = line.substr(7), at = summary;
      continue;
    }
    if (!line.empty() && line[0] != ' ' && line.back() == ':') {
      h.sections.push_back({line.substr(0, line.size() - 1), {}});
      at = section;
      continue;
    }
    if (at == summary) {
      if (!line.empty()) h.summary += (h.summary.empty() ? "" : " ") + line;
      continue;
    }
    if (h.sections.empty() || line.empty()) continue;
    auto& items = h.sections.back().second;
    if (line.rfind("      ", 0) == 0 && !items.empty()) {
      items.back().text += (items.back().text.empty() ? "" : " ") + line.substr(6);
    } else if (line.rfind("  ", 0) == 0) {
      items.push_back({line.substr(2), ""});
    }
  }
  return h;
}

// Text as roff reads it: a backslash escaped, a line never starting with a control character,
// hyphens of options as minus signs.
std::string roff(const std::string& text, bool option = false) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\e";
    else if (c == '-' && option)
      out += "\\-";
    else
      out += c;
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

}  // namespace

std::string capture_stdout(const std::function<void()>& f) {
  std::fflush(stdout);
  std::FILE* tmp = std::tmpfile();
  DILOCO_CHECK(tmp != nullptr, "manual: a temporary file for a command's help");
  const int saved = dup(STDOUT_FILENO);
  DILOCO_CHECK(saved >= 0 && dup2(fileno(tmp), STDOUT_FILENO) >= 0,
               "manual: standard output redirected");
  f();
  std::fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  std::rewind(tmp);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) text.append(buf, n);
  std::fclose(tmp);
  return text;
}

std::string manual_page(const std::string& version, const std::string& summary,
                        const std::vector<command_help>& commands) {
  std::ostringstream o;
  o << ".TH DILOCO 1 \"\" \"diloco " << roff(version) << "\" \"User Commands\"\n"
    << ".SH NAME\ndiloco \\- " << roff(summary) << "\n"
    << ".SH SYNOPSIS\n.B diloco\n.I command\n[\\fIoptions\\fR]\n.br\n.B diloco\n"
    << "\\-\\-version | \\-\\-help\n"
    << ".SH DESCRIPTION\n"
    << "Learners, syncer shards, the fragment scheduler and the snapshot coordinator are actors "
       "that talk only by messages, so the same actors run in one process on virtual time "
       "(\\fBsimulate\\fR), across hosts (\\fBnode\\fR) and again from a recording "
       "(\\fBreplay\\fR).\n"
    << ".SH COMMANDS\n";
  for (const auto& c : commands) {
    o << ".TP\n.B " << c.name << "\n" << roff(c.summary) << "\n";
  }
  for (const auto& c : commands) {
    const help_parts h = parse_help(c.help);
    std::string name = "DILOCO " + c.name;
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    o << ".SH \"" << name << "\"\n"
      << ".B " << roff(h.usage, true) << "\n.PP\n"
      << roff(h.summary) << "\n";
    for (const auto& [title, items] : h.sections) {
      std::string heading = title;
      if (!heading.empty())
        heading[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(heading[0])));
      o << ".SS " << roff(heading) << "\n";
      for (const auto& it : items)
        o << ".TP\n.B " << roff(it.term, true) << "\n" << roff(it.text) << "\n";
    }
  }
  o << ".SH \"EXIT STATUS\"\n"
    << "0: done; 1: the job failed; 2: bad usage or input (nothing ran); 3: a learner's "
       "numerics went non-finite or its step failed; 128 + N: stopped by signal N "
       "(\\fBnode\\fR).\n"
    << ".SH FILES\n"
    << "/usr/share/doc/diloco: the documentation (config.md: every key of a cluster file; "
       "deploy.md; observability.md) and examples.\n"
    << ".br\n/usr/share/diloco/alerts.rules.yml: Prometheus alerting rules.\n"
    << ".br\n/usr/lib/systemd/system/diloco-node@.service: a node as a systemd service.\n";
  return o.str();
}

std::string bash_completion(const std::vector<command_help>& commands) {
  std::ostringstream o;
  o << "# bash completion for diloco (diloco completion bash)\n"
    << "_diloco() {\n"
    << "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=\"\" i\n"
    << "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
    << "    case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac\n"
    << "  done\n"
    << "  if [[ -z $cmd ]]; then\n"
    << "    COMPREPLY=($(compgen -W \"";
  for (const auto& c : commands) o << c.name << " ";
  o << "--help --version\" -- \"$cur\"))\n    return\n  fi\n"
    << "  case $prev in\n"
    << "    --log-level) COMPREPLY=($(compgen -W \"trace debug info warn error off\" -- "
       "\"$cur\")); "
       "return ;;\n"
    << "    --log-format) COMPREPLY=($(compgen -W \"text json\" -- \"$cur\")); return ;;\n"
    << "    --mode) COMPREPLY=($(compgen -W \"decoupled diloco dp\" -- \"$cur\")); return ;;\n"
    << "    --codec) COMPREPLY=($(compgen -W \"fp32 bf16 int8 int4 fp4 int2 sign1 topk\" -- "
       "\"$cur\")); return ;;\n"
    << "  esac\n"
    << "  local opts\n"
    << "  case $cmd in\n";
  for (const auto& c : commands) {
    std::string flags;
    for (const auto& [title, items] : parse_help(c.help).sections) {
      for (const auto& it : items) {
        if (it.term.rfind("--", 0) != 0) continue;
        flags += (flags.empty() ? "" : " ") + it.term.substr(0, it.term.find(' '));
      }
    }
    o << "    " << c.name << ") opts=\"" << flags << "\" ;;\n";
  }
  o << "    *) opts=\"--help\" ;;\n"
    << "  esac\n"
    << "  if [[ $cur == -* ]]; then\n"
    << "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
    << "  else\n"
    << "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
    << "  fi\n"
    << "}\n"
    << "complete -o filenames -F _diloco diloco\n";
  return o.str();
}

}  // namespace diloco
