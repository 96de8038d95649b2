"""mbfg: planar multibody dynamics, kinematics and estimation as factor graphs on GTSAM.

Quick start::

    import mbfg
    mech = mbfg.load_mechanism("fourbar")   # a bundled mechanism, or a path to your YAML
    mech.coordinate_names, mech.q0, mech.constraints(mech.q0), mech.mass_matrix()
"""
from __future__ import annotations

from mbfg import errors
from mbfg.errors import MbfgError
from mbfg.model import Mechanism, build_mechanism

__version__ = "0.1.0"


def load_mechanism(path, overrides: dict | None = None) -> Mechanism:
    """Read a mechanism YAML file, or a bundled mechanism by name (``"fourbar"``; see
    :func:`mbfg.resources.bundled_mechanisms`), and build its assembled model.

    ``overrides``: physical values replaced by YAML path before the model is built, e.g.
    ``{"planar_bodies[1].mass": 2.5, "gravity": (0, -9.8)}``
    (:func:`mbfg.model.parameters.apply_overrides`).

    Raises a subclass of :class:`mbfg.errors.MechanismError` naming the file, YAML path and
    line for any invalid input."""
    from mbfg.loader import load_spec
    from mbfg.resources import resolve_mechanism
    spec = load_spec(resolve_mechanism(path))
    if overrides:
        from mbfg.model.parameters import apply_overrides
        spec = apply_overrides(spec, overrides)
    return _build(spec)


def mechanism_from_yaml(text: str, source: str | None = None) -> Mechanism:
    """Build a mechanism from YAML text (``source`` is used in error messages)."""
    from mbfg.loader import parse_spec
    return _build(parse_spec(text, source=source))


def _build(spec) -> Mechanism:
    """Build and assemble; numerical breakdowns on absurd input become an AssemblyError."""
    import numpy as np
    try:
        with np.errstate(all="ignore"):
            return build_mechanism(spec)
    except (np.linalg.LinAlgError, FloatingPointError, OverflowError, ZeroDivisionError) as e:
        raise errors.AssemblyError(f"the initial configuration cannot be assembled: {e}",
                                   file=spec.source) from None


__all__ = ["load_mechanism", "mechanism_from_yaml", "Mechanism", "build_mechanism",
           "MbfgError", "errors", "__version__"]
