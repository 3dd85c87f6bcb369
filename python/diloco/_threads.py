"""Thread counts of the math libraries under a run. torch's own (intra-op) threads are set with
torch.set_num_threads; a BLAS that torch calls (Debian's torch uses the system libblas.so.3,
OpenBLAS when libopenblas0 is installed) keeps its own pool, whose size can change the last bits
of a matrix product. A run pins both so that its result does not depend on the machine's cores.
"""

import contextlib
import ctypes


def _openblas():
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if line.strip() else ""
                if "openblas" in path and ".so" in path:
                    lib = ctypes.CDLL(path)
                    if hasattr(lib, "openblas_set_num_threads"):
                        return lib
    except OSError:
        pass
    return None


@contextlib.contextmanager
def pinned(threads):
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    blas = _openblas()
    blas_saved = blas.openblas_get_num_threads() if blas is not None else None
    if blas is not None:
        blas.openblas_set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
        if blas is not None:
            blas.openblas_set_num_threads(blas_saved)
