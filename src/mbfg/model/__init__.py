"""Mechanism model layer: pure numpy kernels of an immutable :class:`Mechanism`."""
from mbfg.model.mechanism import Mechanism, build_mechanism
from mbfg.model.spec import (BodySpec, FixedSliderSpec, MechanismSpec, MobileSliderSpec,
                             PointSpec, RelativeAngleSpec)

__all__ = ["Mechanism", "build_mechanism", "MechanismSpec", "PointSpec", "BodySpec",
           "RelativeAngleSpec", "FixedSliderSpec", "MobileSliderSpec"]
