"""The Python and PyTorch versions diloco runs with, checked when it is imported.

Supported (tested by the project's suite): Python 3.9 to 3.13; PyTorch 1.13 (Debian 12's
python3-torch), 2.6 (Debian 13's) and 2.x from PyPI (2.13 tested; CPU or CUDA builds). Older
releases are refused with a message saying what to install; a newer major release than the ones
known (3.x) is let through with a warning.
"""

import sys
import warnings

PYTHON_MIN = (3, 9)
TORCH_MIN = (1, 13)
TORCH_KNOWN_MAJOR = 2


def _release(text):
    """(major, minor) of a version string such as '2.13.0+cpu' or '1.13.0a0+git'."""
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return tuple(parts)


def check(python=None, torch_version=None):
    """Raises ImportError naming what to install when this Python or the installed torch cannot
    run diloco. Returns the torch version found."""
    python = tuple(sys.version_info[:2]) if python is None else tuple(python)
    if python < PYTHON_MIN:
        raise ImportError(f"diloco needs Python {PYTHON_MIN[0]}.{PYTHON_MIN[1]} or newer; this is "
                          f"Python {python[0]}.{python[1]}")
    if torch_version is None:
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                "diloco needs PyTorch (1.13 or newer) in this environment and cannot import it "
                f"({e}). Install it first: `pip install torch==2.13.0` (a CPU build from a pinned "
                "release) or Debian's `apt install python3-torch`") from None
        torch_version = torch.__version__
    found = _release(str(torch_version))
    if found < TORCH_MIN:
        raise ImportError(f"diloco needs PyTorch {TORCH_MIN[0]}.{TORCH_MIN[1]} or newer; this "
                          f"environment has {torch_version}")
    if found[0] > TORCH_KNOWN_MAJOR:
        warnings.warn(f"diloco was tested with PyTorch 1.13 to 2.x; this is {torch_version}",
                      RuntimeWarning, stacklevel=3)
    return str(torch_version)
