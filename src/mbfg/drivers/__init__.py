"""Drivers: pure functions of (model, inputs, settings, seed) that build a problem's graphs,
solve them and return a frozen result (:mod:`mbfg.results`).

* :mod:`mbfg.drivers.forward_dynamics`: :func:`simulate_batch`, :func:`simulate_smoother`;
* :mod:`mbfg.drivers.inverse_dynamics`: :func:`solve_inverse_dynamics`.

State estimation has its own package, :mod:`mbfg.estimation`.  The top-level
:func:`mbfg.simulate`, :func:`mbfg.solve_inverse_dynamics` and :func:`mbfg.estimate` are the
usual entry points.
"""
from mbfg.drivers.forward_dynamics import simulate_batch, simulate_smoother
from mbfg.drivers.inverse_dynamics import solve_inverse_dynamics

__all__ = ["simulate_batch", "simulate_smoother", "solve_inverse_dynamics"]
