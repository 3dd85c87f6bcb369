"""Thread counts of the math libraries under a run. torch's own (intra-op) threads are set with
torch.set_num_threads; a BLAS that torch calls (Debian's torch uses the system libblas.so.3,
OpenBLAS when libopenblas0 is installed) keeps its own pool, whose size can change the last bits
of a matrix product. A run pins both so that its result does not depend on the machine's cores.
"""

import contextlib

from ._blas import openblas


@contextlib.contextmanager
def pinned(threads):
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    blas = openblas()
    blas_saved = blas.openblas_get_num_threads() if blas is not None else None
    if blas is not None:
        blas.openblas_set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
        if blas is not None:
            blas.openblas_set_num_threads(blas_saved)
