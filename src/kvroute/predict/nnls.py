"""Non-negative least squares (Lawson and Hanson's active-set method), for the step fit.

``min ||A x - b||`` subject to ``x >= 0``. The systems here are small (a few hundred
rows, eight columns), so a dense active-set loop over numpy's ``lstsq`` is enough.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def nnls(a: FloatArray, b: FloatArray, *, max_iter: int | None = None) -> FloatArray:
    """The non-negative ``x`` minimising ``||a @ x - b||``."""
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * max(m, n) * max(float(np.abs(a).max(initial=0.0)), 1.0)
    limit = max_iter if max_iter is not None else 3 * n
    for _ in range(limit):
        w = a.T @ (b - a @ x)
        free = ~passive & (w > tol)
        if not free.any():
            break
        j = int(np.argmax(np.where(free, w, -np.inf)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg])))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x
