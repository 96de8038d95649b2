"""The one adapter between numpy residual functions and ``gtsam.CustomFactor``.

gtsam's Python ``CustomFactor`` trusts its callback: a Jacobian with the wrong number of rows
(or an unassigned one) crashes the interpreter, a wrong number of columns silently corrupts
the linear system (measured in docs/benchmarks.md, "Factor linearization").  Every nonlinear mbfg
factor therefore goes through :func:`custom_factor`, which checks the error vector and each
Jacobian (shape, dtype, finiteness) before handing them to gtsam and raises
:class:`~mbfg.errors.FactorJacobianError` naming the factor, the key and the expected shape.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import gtsam
import numpy as np

from mbfg.errors import FactorJacobianError
from mbfg.factors.keys import key_name

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def noise_model(sigmas: ArrayLike, dim: int) -> gtsam.noiseModel.Base:
    """Diagonal noise model from a scalar or per-component standard deviation(s)."""
    s = np.asarray(sigmas, float)
    if s.ndim == 0:
        if not s > 0:
            raise ValueError(f"sigma must be positive, got {float(s)}")
        return gtsam.noiseModel.Isotropic.Sigma(dim, float(s))
    if s.shape != (dim,) or not np.all(s > 0):
        raise ValueError(f"sigmas must be {dim} positive numbers, got shape {s.shape}")
    return gtsam.noiseModel.Diagonal.Sigmas(s)


def _check(name, what, array, shape, key=None):
    """Raise FactorJacobianError unless ``array`` is a finite float64 array of ``shape``
    (``what`` names it; with ``key`` it is a Jacobian w.r.t. that key, named lazily)."""
    if (isinstance(array, np.ndarray) and array.dtype == np.float64 and array.shape == shape
            and np.isfinite(array).all()):
        return
    if key is not None:
        what = f"Jacobian w.r.t. {key_name(key)}"
    if not isinstance(array, np.ndarray) or array.dtype != np.float64:
        raise FactorJacobianError(f"{name}: {what} must be a float64 numpy array, got "
                                  f"{type(array).__name__} {getattr(array, 'dtype', '')}")
    if array.shape != shape:
        raise FactorJacobianError(f"{name}: {what} has shape {array.shape}, expected {shape}")
    raise FactorJacobianError(f"{name}: {what} is not finite")


class FactorSpec:
    """A nonlinear factor as plain data: keys, their dimensions and a residual function.

    Parameters
    ----------
    name : str
        Factor type (for messages), e.g. ``"f_dyn^d"``.
    residual : callable
        A residual family of :mod:`mbfg.factors.residuals` (``f(p, jacobians) -> e, {slot: J}``,
        with ``f.slots``).
    keys : sequence of int
        One gtsam key per slot of ``residual.slots``, in that order.
    dims : sequence of int
        Dimension of each key.
    error_dim : int
    """

    def __init__(self, name, residual, keys, dims, error_dim):
        self.name = name
        self.residual = residual
        self.slots = tuple(residual.slots)
        self.keys = tuple(int(k) for k in keys)
        self.dims = tuple(int(d) for d in dims)
        self.error_dim = int(error_dim)
        if len(self.keys) != len(self.slots) or len(self.dims) != len(self.slots):
            raise ValueError(f"{name}: {len(self.slots)} slots {self.slots} need as many keys and dims")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"{name}: repeated key in {[key_name(k) for k in self.keys]}")

    def evaluate(self, xs: list, jacobians: bool = True) -> tuple:
        """Error (r,) and, if asked, the list of Jacobians (r, dim_i), validated."""
        p = {}
        for slot, x, d, k in zip(self.slots, xs, self.dims, self.keys):
            x = np.asarray(x, dtype=float)
            if x.shape != (d,):
                raise FactorJacobianError(f"{self.name}: variable {key_name(k)} has shape "
                                          f"{x.shape}, expected ({d},)")
            p[slot] = x[None]
        e, J = self.residual(p, jacobians)
        e = np.ascontiguousarray(e[0], dtype=float) if isinstance(e, np.ndarray) else e
        _check(self.name, "error", e, (self.error_dim,))
        if not jacobians:
            return e, None
        Hs = []
        for slot, d, k in zip(self.slots, self.dims, self.keys):
            if slot not in J:
                raise FactorJacobianError(f"{self.name}: no Jacobian for {key_name(k)}")
            Hk = np.ascontiguousarray(J[slot][0]) if isinstance(J[slot], np.ndarray) else J[slot]
            _check(self.name, None, Hk, (self.error_dim, d), key=k)
            Hs.append(Hk)
        return e, Hs


class MultibodyFactor(gtsam.CustomFactor):
    """A ``gtsam.CustomFactor`` evaluating a :class:`FactorSpec` through the checked adapter.

    ``factor.spec`` gives access to the residual (for tests and introspection).  Exceptions
    raised by the residual propagate out of ``linearize``/``error``.  Like every CustomFactor
    it cannot be pickled.
    """

    def __init__(self, spec: FactorSpec, sigmas):
        keys = spec.keys

        def callback(this, values, H):
            xs = [values.atVector(k) for k in keys]
            if H is None:
                return spec.evaluate(xs, False)[0]
            e, Hs = spec.evaluate(xs, True)
            for i, Hi in enumerate(Hs):
                H[i] = Hi
            return e

        super().__init__(noise_model(sigmas, spec.error_dim), list(keys), callback)
        self.spec = spec

    def __repr__(self):
        return (f"<{self.spec.name} factor on "
                f"{', '.join(key_name(k) for k in self.spec.keys)}>")


def custom_factor(spec: FactorSpec, sigmas: list | float) -> MultibodyFactor:
    """Wrap a :class:`FactorSpec` in a checked CustomFactor with diagonal noise ``sigmas``."""
    return MultibodyFactor(spec, sigmas)


__all__ = [
    "noise_model", "FactorSpec", "MultibodyFactor", "custom_factor"
]
