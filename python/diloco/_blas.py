"""The BLAS under torch, and its choice of kernels for this CPU.

Debian's torch does its matrix products in the system's libblas.so.3, OpenBLAS when
libopenblas0 is installed. OpenBLAS carries kernels for many CPU generations and picks one set
when it loads, from the CPU's model number. Debian bookworm's OpenBLAS (0.3.21) does not know
every CPU that came after it: on a Xeon of the Sapphire Rapids generation it picks its Prescott
kernels (SSE3, 2004), and a 64 x 256 by 256 x 256 product takes 3.4 times as long as with the
AVX-512 kernels the CPU can run. A PyTorch learner's step is mostly such products.

When diloco is imported it asks the process's OpenBLAS which kernels it runs. If they use no
AVX2 while the CPU has AVX2 and FMA (or AVX-512), it has OpenBLAS choose again with
OPENBLAS_CORETYPE set to the set that fits: Haswell (AVX2, FMA), SkylakeX (AVX-512) or
Cooperlake (AVX-512 with bf16). OpenBLAS's own choice stands whenever it found vector kernels
of AVX2 or wider, and a user's OPENBLAS_CORETYPE is never overridden. The variable stays set,
so that processes started from this one load the same kernels. `INFO` says what was found and
what was done; runs report it.

The kernels decide the last bits of every product, so a PyTorch run's trace hash is the same
on machines whose OpenBLAS runs the same kernels, not across kernel sets.
"""

import ctypes
import os

# OpenBLAS's x86-64 kernel sets (openblas_get_corename), by the widest vector instructions
# they use: 3 AVX-512, 2 AVX2 and FMA, 1 AVX; every other name (Prescott, Core2, Nehalem,
# Barcelona, ...) is SSE only.
_WIDTH = {
    "sapphirerapids": 3, "cooperlake": 3, "skylakex": 3,
    "haswell": 2, "zen": 2, "excavator": 2,
    "sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1,
}

_NAMES = {3: "AVX-512", 2: "AVX2", 1: "AVX", 0: "SSE"}

INFO = {"library": None, "kernels": None, "detected": None, "chosen_by": None}
_LIB = []  # the process's OpenBLAS once found (it is never unloaded)
_TOLD = []


def width(core):
    """The vector width class (0 to 3) of an OpenBLAS kernel set's name."""
    return _WIDTH.get((core or "").lower(), 0)


def cpu_flags(cpuinfo=None):
    """The CPU's feature flags, from /proc/cpuinfo's first "flags" line (or the text given)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return set(value.split())
    return set()


def fitting(flags):
    """The OpenBLAS kernel set that fits a CPU with these flags, or None (SSE or AVX only)."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def choose(detected, flags, forced):
    """The kernel set to switch to, or None to keep OpenBLAS's choice: only when it chose one
    without AVX2 on a CPU that has it, and the user did not set OPENBLAS_CORETYPE."""
    if forced or width(detected) >= 2:
        return None
    fit = fitting(flags)
    if fit is None or width(fit) <= width(detected):
        return None
    return fit


def openblas():
    """The process's OpenBLAS (as torch loaded it), or None if it runs another BLAS or none."""
    if _LIB:
        return _LIB[0]
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                path = fields[-1] if len(fields) >= 6 else ""
                if "openblas" in path and ".so" in path:
                    lib = ctypes.CDLL(path)
                    if hasattr(lib, "openblas_set_num_threads"):
                        _LIB.append(lib)
                        return lib
    except OSError:
        pass
    return None


def _corename(lib):
    if not hasattr(lib, "openblas_get_corename"):
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    name = lib.openblas_get_corename()
    return name.decode() if name else None


def fit_kernels():
    """Checks (and if need be corrects) the process's OpenBLAS kernels; fills INFO. Called once
    by `import diloco`, after torch is loaded and before any learner computes: nothing may be
    in a BLAS call while OpenBLAS chooses again."""
    lib = openblas()
    if lib is None:
        INFO.update(library="not OpenBLAS", kernels=None, detected=None, chosen_by=None)
        return INFO
    detected = _corename(lib)
    forced = "OPENBLAS_CORETYPE" in os.environ
    INFO.update(library="OpenBLAS", kernels=detected, detected=detected,
                chosen_by="OPENBLAS_CORETYPE" if forced else "OpenBLAS")
    target = choose(detected, cpu_flags(), forced)
    if target is None or not all(hasattr(lib, f) for f in ("gotoblas_dynamic_quit",
                                                           "gotoblas_dynamic_init")):
        return INFO
    os.environ["OPENBLAS_CORETYPE"] = target
    lib.gotoblas_dynamic_quit()
    lib.gotoblas_dynamic_init()  # reads OPENBLAS_CORETYPE again
    INFO.update(kernels=_corename(lib), chosen_by="diloco")
    return INFO


def describe():
    """One line for a run's header: which kernels, and who chose them."""
    if INFO["library"] != "OpenBLAS":
        return f"BLAS: {INFO['library'] or 'not checked'}"
    k = INFO["kernels"]
    line = f"OpenBLAS {k} kernels ({_NAMES[width(k)]})"
    if INFO["chosen_by"] == "diloco":
        line += (f"; OpenBLAS chose {INFO['detected']} ({_NAMES[width(INFO['detected'])]}) "
                 "on this CPU, diloco chose again (OPENBLAS_CORETYPE)")
    elif INFO["chosen_by"] == "OPENBLAS_CORETYPE":
        line += ", as OPENBLAS_CORETYPE says"
    return line


def tell_once(stream):
    """Says on `stream`, once per process, that diloco chose the kernels (nothing otherwise)."""
    if INFO["chosen_by"] == "diloco" and not _TOLD:
        _TOLD.append(True)
        print(f"diloco: {describe()}", file=stream, flush=True)
