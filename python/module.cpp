// The `diloco._diloco` extension: the runtime's simulation and command line for Python, with
// the user's PyTorch learner in place of the built-in MLP (python/diloco/__init__.py wraps it).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.hpp"
#include "checkpoint/layout_file.hpp"
#include "config/printing.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"
#include "python/py_learner.hpp"
#include "tensor/model.hpp"

namespace py = pybind11;
using namespace diloco;

namespace {

using key_values = std::vector<std::pair<std::string, std::string>>;

run_config resolve(const std::string& cluster_file, const key_values& sets) {
  auto config = resolve_config(cluster_file, sets);
  if (!config) throw py::value_error(config.error().to_string());
  return *config;
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// The run's final global model, {name: array} in the model's own tensor shapes (a PyTorch
// module's parameter shapes; rows x cols for the built-in MLP); None when the run trained none.
py::object final_model(const sim_result& r) {
  if (!r.model || r.params.size() != r.model->layout().buffer_floats()) return py::none();
  const auto shapes = r.model->tensor_shapes();
  py::dict out;
  const auto& tensors = r.model->layout().tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const tensor_info& t = tensors[i];
    std::vector<py::ssize_t> shape;
    if (shapes.empty()) {
      shape = {static_cast<py::ssize_t>(t.rows), static_cast<py::ssize_t>(t.cols)};
    } else {
      for (int64_t dim : shapes[i]) shape.push_back(static_cast<py::ssize_t>(dim));
    }
    py::array_t<float> a(shape);
    std::memcpy(a.mutable_data(), r.params.data() + t.offset, t.size() * sizeof(float));
    out[py::str(t.name)] = a;
  }
  py::object model = std::move(out);
  return model;
}

py::dict result_dict(const sim_result& r) {
  py::dict d;
  d["seed"] = r.config.seed;
  d["eval_loss"] = r.eval_loss;
  d["eval_error"] = r.eval_error;
  d["trace_hash"] = hex(r.trace_hash);
  d["events"] = r.events;
  d["virtual_s"] = r.virtual_s;
  d["wall_s"] = r.wall_s;
  d["run_wall_s"] = r.run_wall_s;
  d["tokens"] = r.tokens();
  d["learner_bytes"] = r.learner_bytes();
  const double tokens = static_cast<double>(r.tokens());
  d["bytes_per_token"] = tokens > 0 ? static_cast<double>(r.learner_bytes()) / tokens : 0.0;
  d["goodput"] = r.goodput();
  d["interrupted"] = r.interrupted;
  py::list diverged;
  for (const auto& m : r.run.diverged) diverged.append(py::make_tuple(m.learner, m.step, m.what));
  d["failed_learners"] = diverged;
  py::list learners;
  for (const auto& l : r.learners) {
    py::dict x;
    x["learner"] = l.learner;
    x["steps"] = l.steps;
    x["tokens"] = l.tokens;
    x["last_loss"] = l.last_loss;
    x["incarnation"] = l.incarnation;
    x["bytes_sent"] = l.bytes_sent;
    x["bytes_received"] = l.bytes_received;
    learners.append(x);
  }
  d["learners"] = learners;
  d["violations"] = check_invariants(r);
  d["entropy_rate"] = r.entropy_rate >= 0 ? py::object(py::float_(r.entropy_rate)) : py::none();
  d["eval_floor"] = r.eval_floor >= 0 ? py::object(py::float_(r.eval_floor)) : py::none();
  d["model"] = final_model(r);
  return d;
}

// One learner's computation outside any run (`diloco.learner_compute`): the interface the
// learner actor drives, driven step by step from Python.
class compute_handle {
 public:
  compute_handle(const run_config& config, py::object learner, int index)
      : config_(config), family_(python::family_for(config, std::move(learner))) {
    if (index < 0 || index >= config.learner_capacity())
      throw py::value_error("index " + std::to_string(index) + ": the run has learners 0.." +
                            std::to_string(config.learner_capacity() - 1));
    auto c =
        family_->make(learner_spec{index, config.learner_capacity(), config.seed, 0, 0, nullptr});
    if (!c) throw std::runtime_error(c.error().to_string());
    compute_ = std::move(c).value();
  }
  py::dict step(int64_t schedule_step) {
    auto s = compute_->step(config_.inner, schedule_step);
    if (!s) throw std::runtime_error(s.error().to_string());
    py::dict d;
    d["loss"] = s->loss;
    d["tokens"] = s->tokens;
    d["grad_norm"] = s->grad_norm;
    d["lr"] = s->lr;
    return d;
  }
  double evaluate() {
    auto e = compute_->evaluate();
    if (!e) throw std::runtime_error(e.error().to_string());
    return *e;
  }
  py::dict params() const {
    py::dict out;
    const float_buffer& p = compute_->params();
    for (const auto& t : family_->layout().tensors()) {
      py::array_t<float> a({static_cast<py::ssize_t>(t.rows), static_cast<py::ssize_t>(t.cols)});
      std::memcpy(a.mutable_data(), p.data() + t.offset, t.size() * sizeof(float));
      out[py::str(t.name)] = a;
    }
    return out;
  }
  std::string describe() const { return family_->describe(); }

 private:
  run_config config_;
  std::shared_ptr<const model_family> family_;
  std::unique_ptr<learner_compute> compute_;
};

}  // namespace

PYBIND11_MODULE(_diloco, m) {
  m.doc() = "diloco's runtime (C++): simulation and command line with PyTorch learners";
  python::bind_learner_types(m);
  py::class_<model_config>(m, "ModelConfig")
      .def(py::init([](int vocab, int context, int embed_dim, int hidden, int hidden_layers) {
             return model_config{vocab, context, embed_dim, hidden, hidden_layers, ""};
           }),
           py::arg("vocab"), py::arg("context"), py::arg("embed_dim"), py::arg("hidden"),
           py::arg("hidden_layers"));

  m.def(
      "simulate_command",
      [](const std::vector<std::string>& args, py::object learner, const std::string& name) {
        // `diloco simulate ARGS` with the user's learner as the process's model, for the
        // duration of the call.
        struct model_guard {
          ~model_guard() { set_process_model({}); }
        } guard;
        if (!learner.is_none()) set_process_model(python::learner_model(std::move(learner)), name);
        std::vector<const char*> raw;  // the flags alone, as run_command_line hands them over
        for (const auto& a : args) raw.push_back(a.c_str());
        const uint64_t taken0 = python::copies().ahead_taken.load();
        const uint64_t put_back0 = python::copies().ahead_put_back.load();
        std::vector<std::pair<std::string, sim_result>> results;
        int rc = 0;
        take_last_error();
        {
          py::gil_scoped_release release;
          rc = run_simulate(static_cast<int>(raw.size()), raw.data(),
                            [&results](const std::string& system, const sim_result& r) {
                              results.emplace_back(system, r);
                            });
        }
        py::list systems;
        for (const auto& [system, r] : results) {
          py::dict d = result_dict(r);
          d["system"] = system;
          systems.append(d);
        }
        py::dict ahead;
        ahead["taken"] = python::copies().ahead_taken.load() - taken0;
        ahead["put_back"] = python::copies().ahead_put_back.load() - put_back0;
        return py::make_tuple(rc, systems, take_last_error(), ahead);
      },
      py::arg("args"), py::arg("learner"), py::arg("name") = "");

  m.def(
      "main",
      [](const std::vector<std::string>& argv, py::object learner, const std::string& name) {
        if (!learner.is_none()) set_process_model(python::learner_model(std::move(learner)), name);
        std::vector<const char*> args;
        for (const auto& a : argv) args.push_back(a.c_str());
        int rc = 0;
        {
          py::gil_scoped_release release;
          rc = run_command_line(static_cast<int>(args.size()), args.data());
        }
        set_process_model({});
        return rc;
      },
      py::arg("argv"), py::arg("learner"), py::arg("name") = "");

  m.def(
      "on_node_reported",
      [](py::object callback) {
        if (callback.is_none()) {
          set_node_reported_hook({});
          return;
        }
        auto keep = std::make_shared<py::object>(std::move(callback));
        set_node_reported_hook([keep](int code) {
          py::gil_scoped_acquire gil;
          try {
            (*keep)(code);
          } catch (py::error_already_set& e) {
            std::fprintf(stderr, "diloco node: after the report: %s\n", e.what());
          }
        });
      },
      py::arg("callback"),
      "Calls callback(exit_code) once `diloco node` has reported its outcome (None: no call).");

  m.def(
      "config_yaml",
      [](const std::string& cluster_file, const key_values& sets) {
        return config_as_yaml(resolve(cluster_file, sets));
      },
      py::arg("cluster_file"), py::arg("sets"));

  m.def(
      "builtin_initial_params",
      [](const model_config& mc, uint64_t seed) {
        if (auto s = mc.validate(); !s.ok()) throw py::value_error(s.to_string());
        mlp_lm model(mc);
        float_buffer params(model.layout().buffer_floats());
        model.init(params, seed);
        py::dict out;
        for (const auto& t : model.layout().tensors()) {
          py::array_t<float> a(
              {static_cast<py::ssize_t>(t.rows), static_cast<py::ssize_t>(t.cols)});
          std::memcpy(a.mutable_data(), params.data() + t.offset, t.size() * sizeof(float));
          out[py::str(t.name)] = a;
        }
        return out;
      },
      py::arg("model"), py::arg("seed"));

  py::class_<compute_handle>(m, "Compute")
      .def(py::init([](const std::string& cluster_file, const key_values& sets, py::object learner,
                       int index) {
             return new compute_handle(resolve(cluster_file, sets), std::move(learner), index);
           }),
           py::arg("cluster_file"), py::arg("sets"), py::arg("learner"), py::arg("index"))
      .def("step", &compute_handle::step, py::arg("schedule_step"))
      .def("evaluate", &compute_handle::evaluate)
      .def("params", &compute_handle::params)
      .def("describe", &compute_handle::describe);

  m.def(
      "export_model",
      [](const std::string& cluster_file, const key_values& sets, py::object learner,
         const std::string& path) {
        run_config config = resolve(cluster_file, sets);
        config.model.file.clear();  // the model is the learner's own, not a file's
        if (learner.is_none()) throw py::value_error("export_model: needs a learner");
        auto family = python::family_for(config, std::move(learner));
        layout_model out;
        out.layout = family->layout();
        out.initial = float_buffer(out.layout.buffer_floats());
        family->init(out.initial, config.seed);
        out.description = family->describe();
        if (auto s = save_layout_model(path, out); !s.ok()) throw std::runtime_error(s.to_string());
        return out.description;
      },
      py::arg("cluster_file"), py::arg("sets"), py::arg("learner"), py::arg("path"));

  m.def(
      "open_data",
      [](const std::string& cluster_file, const key_values& sets, int index) {
        const run_config config = resolve(cluster_file, sets);
        auto data = data_source::build(config.data, config.model.context);
        if (!data) throw py::value_error(data.error().to_string());
        if (index < 0 || index >= config.learner_capacity())
          throw py::value_error("index " + std::to_string(index) + " is not a learner of the run");
        return python::open_data(*data, config, index);
      },
      py::arg("cluster_file"), py::arg("sets"), py::arg("index"));

  // What the extension was built with: what a crash report needs beside torch's own versions.
  m.def("build_info", [] {
    py::dict d;
    d["pybind11"] = std::to_string(PYBIND11_VERSION_MAJOR) + "." +
                    std::to_string(PYBIND11_VERSION_MINOR) + "." +
                    std::to_string(PYBIND11_VERSION_PATCH);
    d["pybind11_internals"] = std::string(PYBIND11_INTERNALS_ID);
    d["compiler"] = std::string(__VERSION__);
    d["python_built_for"] = std::string(PY_VERSION);
    return d;
  });

  m.def("copy_counts", [] {
    auto& c = python::copies();
    py::dict d;
    d["initial"] = c.initial_copies.load();
    d["eval"] = c.eval_copies.load();
    return d;
  });
  // Tests only: steps ahead are never called off before they begin (python::set_never_call_off).
  m.def("_never_call_off", &python::set_never_call_off, py::arg("on"));
}
