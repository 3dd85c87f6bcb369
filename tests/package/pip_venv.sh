#!/bin/sh
# `pip install .` as a user with a virtual environment and PyTorch 2.x from PyPI does it: a fresh
# venv, `pip install torch==2.13.0` (the CPU build), then `pip install SOURCE`, and from the
# installed package (not the build tree): `import diloco`, the `diloco` command, `python -m
# diloco simulate --learner ...`, and the PyTorch learner tests.
# A plain torch==2.13.0 from the index is a CUDA build of several GB: the test takes torch only
# from a local wheel directory (pip's find-links) and is skipped (77), saying so, without one.
# usage: pip_venv.sh SOURCE_DIR BUILD_DIR [PYTHON]
set -eu
src=$1
build=$2
python=${3:-/usr/bin/python3}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.txt; do [ -f "$f" ] && { echo "== $f"; tail -30 "$f"; }; done >&2; exit 1; }

"$python" -m venv "$work/venv" >"$work/venv.txt" 2>&1 || fail "python -m venv (python3-venv)"
py="$work/venv/bin/python"
pip="$work/venv/bin/pip"
if ! "$pip" download --no-deps --no-index -d "$work/wheel" torch==2.13.0 >"$work/find.txt" 2>&1; then
  echo "SKIPPED: no torch 2.13.0 wheel in a local wheel directory (PIP_FIND_LINKS); not downloading a CUDA build"
  exit 77
fi
"$pip" install -q "$work"/wheel/torch-*.whl numpy >"$work/torch.txt" 2>&1 || fail "pip install torch"
version=$("$py" -c 'import torch; print(torch.__version__)')
case $version in 2.*) ;; *) fail "torch $version in the venv, not 2.x" ;; esac

# The extension builds in BUILD_DIR/pip-venv, kept between runs (CMake makes a second install
# quick); with the main build's compiler and -Werror, so that both share ccache's objects and
# only what differs (the extension's Python and pybind11) compiles again.
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
start=$(date +%s)
CXX=${cxx:-c++} "$pip" install -v "$src" --config-settings=build-dir="$build/pip-venv" \
  --config-settings=cmake.define.DILOCO_WERROR=ON >"$work/install.txt" 2>&1 ||
  fail "pip install $src"
echo "pip install: $(($(date +%s) - start)) s"

cd "$work"  # nothing of the source or build tree on the path from here
"$py" -c 'import diloco, sys; assert "site-packages" in diloco.__file__, diloco.__file__' ||
  fail "diloco does not import from the venv's site-packages"
"$work/venv/bin/diloco" --version >"$work/version.txt" 2>&1 || fail "the diloco command"
"$work/venv/bin/diloco" simulate --help >/dev/null 2>&1 || fail "diloco simulate --help"

tests="$src/tests/python"
PYTHONPATH="$tests" "$py" -m diloco simulate --learner mlp_twin:make_learner --budget 32000 \
  --set model.hidden=32 --set model.embed_dim=8 --save-model "$work/m.safetensors" \
  >"$work/simulate.txt" 2>&1 || fail "python -m diloco simulate --learner with torch $version"
grep -q "learner: mlp_twin:make_learner (PyTorch $version" "$work/simulate.txt" ||
  fail "the run does not name torch $version"
grep -q "final model saved to $work/m.safetensors (safetensors)" "$work/simulate.txt" ||
  fail "no model saved"

cd "$tests"
PYTHONPATH="$tests" "$py" -m unittest -v \
  test_learners.Oracle.test_twin_follows_the_builtin_learner_step_by_step \
  test_learners.BadLearners test_learners.ModelOut test_learners.Mirror test_learners.Torch2Step \
  test_sharded \
  >"$work/unittest.txt" 2>&1 || fail "the Python tests with torch $version"
echo "pip install . into a fresh venv with torch $version: $(grep '^Ran ' "$work/unittest.txt"), $(tail -1 "$work/unittest.txt")"

# FSDP inside an island (fully_shard, which this torch has): a deployed run on loopback with a
# 2-rank sharded island killed and restarted (tests/cli/python_fsdp_cli.sh), the leader being the
# venv's own `diloco` command.
rc=0
PYTHONPATH="$tests" sh "$src/tests/cli/python_fsdp_cli.sh" "$work/venv/bin/diloco" "$py" \
  >"$work/fsdp.txt" 2>&1 || rc=$?
# On failure, all the test's report: what each node and island said (a tail shows the last).
report=$(sed -n '/^FAILED:/,$p' "$work/fsdp.txt" | head -400)
case $rc in
  0) tail -1 "$work/fsdp.txt" ;;
  77) echo "FSDP island: $(tail -1 "$work/fsdp.txt")" ;;
  *) fail "FSDP island with torch $version: $report" ;;
esac
