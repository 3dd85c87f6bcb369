"""The BLAS kernels under torch (python/diloco/_blas.py): the choice as a pure function of the
kernels OpenBLAS picked and the CPU's flags, and in a fresh process (run by ctest as
python_Blas)."""

import json
import os
import subprocess
import sys
import unittest

from diloco import _blas

AVX512_BF16 = {"sse3", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
               "avx512_bf16"}
AVX512 = AVX512_BF16 - {"avx512_bf16"}
AVX2 = {"sse3", "avx", "avx2", "fma"}
AVX = {"sse3", "avx"}


class Choice(unittest.TestCase):
    def test_kernels_without_avx2_on_a_cpu_with_it_are_chosen_again(self):
        self.assertEqual(_blas.choose("Prescott", AVX512_BF16, forced=False), "Cooperlake")
        self.assertEqual(_blas.choose("Prescott", AVX512, forced=False), "SkylakeX")
        self.assertEqual(_blas.choose("Prescott", AVX2, forced=False), "Haswell")
        self.assertEqual(_blas.choose("Sandybridge", AVX2, forced=False), "Haswell")
        self.assertEqual(_blas.choose("Nehalem", AVX512, forced=False), "SkylakeX")

    def test_openblas_choice_stands_when_it_found_vector_kernels(self):
        # Zen on an AVX-512 CPU is OpenBLAS's considered choice (AMD's), not a fallback.
        self.assertIsNone(_blas.choose("Zen", AVX512_BF16, forced=False))
        self.assertIsNone(_blas.choose("Haswell", AVX512, forced=False))
        self.assertIsNone(_blas.choose("SkylakeX", AVX512_BF16, forced=False))

    def test_nothing_better_fits_or_the_user_chose(self):
        self.assertIsNone(_blas.choose("Sandybridge", AVX, forced=False))
        self.assertIsNone(_blas.choose("Prescott", {"sse3"}, forced=False))
        self.assertIsNone(_blas.choose("Prescott", AVX512_BF16, forced=True))

    def test_widths_and_flags(self):
        self.assertEqual([_blas.width(c) for c in ("cooperlake", "Haswell", "Sandybridge",
                                                   "Prescott", None)], [3, 2, 1, 0, 0])
        text = ("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                "flags\t\t: fpu sse3 avx avx2 fma avx512f\nbugs\t\t: spectre_v1\n")
        self.assertEqual(_blas.cpu_flags(text), {"fpu", "sse3", "avx", "avx2", "fma", "avx512f"})
        self.assertEqual(_blas.cpu_flags("no flags here\n"), set())
        self.assertIsNone(_blas.fitting({"avx512f", "avx2"}))  # AVX-512 needs AVX2 and FMA too
        self.assertEqual(_blas.fitting({"avx512f", "avx2", "fma"}), "Haswell")


# In a fresh process: torch is imported first, as a user's script does, then diloco.
PROBE = r"""
import json, os, sys
import torch
if sys.argv[1] == "weak":
    del os.environ["OPENBLAS_CORETYPE"]  # loaded with Prescott's kernels; now unset
import diloco
from diloco import _blas
torch.manual_seed(0)
a, b = torch.randn(64, 256), torch.randn(256, 256)
err = float(((a @ b).double() - a.double() @ b.double()).abs().max())
lib = _blas.openblas()
print(json.dumps({"info": _blas.INFO, "openblas": lib is not None,
                  "now": _blas._corename(lib) if lib else None,
                  "env": os.environ.get("OPENBLAS_CORETYPE"), "err": err,
                  "line": _blas.describe()}))
"""


def probe(mode, coretype=None):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError(f"probe failed: {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class InProcess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plain = probe("plain")
        if not cls.plain["openblas"]:
            raise unittest.SkipTest("torch does not run on OpenBLAS here")

    def test_kernels_without_avx2_are_replaced_by_the_fitting_ones(self):
        fit = _blas.fitting(_blas.cpu_flags())
        if fit is None:
            self.skipTest("this CPU has no AVX2")
        r = probe("weak", coretype="Prescott")
        self.assertEqual(r["info"]["detected"], "Prescott")
        self.assertEqual(r["info"]["chosen_by"], "diloco")
        self.assertEqual(r["now"], fit)
        self.assertEqual(r["env"], fit)  # processes started from it load the same kernels
        self.assertIn("chose again", r["line"])
        self.assertLess(r["err"], 1e-3)  # the new kernels compute the same product

    def test_a_users_choice_stands(self):
        r = probe("plain", coretype="Prescott")
        self.assertEqual(r["now"], "Prescott")
        self.assertEqual(r["info"]["chosen_by"], "OPENBLAS_CORETYPE")
        self.assertIn("as OPENBLAS_CORETYPE says", r["line"])

    def test_left_alone_a_process_runs_vector_kernels_where_the_cpu_has_them(self):
        r = self.plain
        self.assertEqual(r["now"], r["info"]["kernels"])
        if _blas.fitting(_blas.cpu_flags()) is not None:
            self.assertGreaterEqual(_blas.width(r["now"]), 2, r)
        if r["info"]["chosen_by"] == "OpenBLAS":
            self.assertEqual(r["now"], r["info"]["detected"])
            self.assertIsNone(r["env"])


if __name__ == "__main__":
    unittest.main()
