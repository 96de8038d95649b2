"""Exception hierarchy of mbfg.

Every error the library raises on purpose derives from :class:`MbfgError`, so a caller
(or the CLI) can catch one type.  Input errors carry *where* the problem is: the file,
the YAML path (``planar_bodies[2].mass``) and, when known, the line number.
"""
from __future__ import annotations


class MbfgError(Exception):
    """Base class of every error raised by mbfg."""


class MechanismError(MbfgError):
    """A mechanism description is invalid.

    Parameters
    ----------
    message : str
        What is wrong and what was expected.
    file : str, optional
        The YAML file the mechanism came from.
    path : str, optional
        YAML path of the offending node, e.g. ``planar_bodies[2].mass``.
    line : int, optional
        1-based line number in the file.
    """

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None,
                 line: int | None = None):
        self.reason = message
        self.file = file
        self.path = path
        self.line = line
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file) + (f":{self.line}" if self.line else ""))
        elif self.line:
            where.append(f"line {self.line}")
        if self.path:
            where.append(self.path)
        prefix = ": ".join(where)
        return f"{prefix}: {self.reason}" if prefix else self.reason

    def located(
        self,
        *,
        file: str | None = None,
        path: str | None = None,
        line: int | None = None,
    ) -> "MechanismError":
        """Return a copy with missing location fields filled in."""
        err = type(self)(self.reason, file=self.file or file, path=self.path or path,
                         line=self.line or line)
        return err


class YamlSyntaxError(MechanismError):
    """The file is not valid YAML."""


class SchemaError(MechanismError):
    """A key is missing, unknown, or has a value of the wrong type or range."""


class ExpressionError(MechanismError):
    """An expression could not be parsed (syntax) or refers to an unknown name."""


class ExpressionSyntaxError(ExpressionError):
    """An expression is not valid in the expression grammar (includes any attempt to run code)."""


class UndefinedVariableError(ExpressionError):
    """An expression uses a variable that is not defined at that point."""


class AssemblyError(MechanismError):
    """The initial configuration cannot be assembled (position problem did not converge)."""


class SingularMassError(MechanismError):
    """The mass matrix is singular on the constraint manifold: some motion the constraints
    allow carries no mass (e.g. a moving point that belongs to no body), so the dynamics
    cannot determine its acceleration."""


class SolverError(MbfgError):
    """A numerical solver failed."""


class ConvergenceError(SolverError):
    """An iterative solver stopped without meeting its tolerance.

    Attributes
    ----------
    residual : float
        The final residual (norm or cost) when the solver gave up.
    iterations : int
        Number of iterations performed.
    partial : object or None
        What a long run computed before it failed (a driver sets it: for the simulation
        drivers a :class:`~mbfg.results.TrajectoryResult` up to the last good step).
    time : float
        Simulated time [s] of the step that failed (NaN when the solver is not a time
        stepper; a driver sets it with :meth:`at_time`).
    """

    partial = None

    def __init__(self, message: str, *, residual: float = float("nan"), iterations: int = 0,
                 time: float = float("nan")):
        self.message = message
        self.residual = float(residual)
        self.iterations = int(iterations)
        self.time = float(time)
        super().__init__(self._format())

    def _format(self) -> str:
        when = "" if self.time != self.time else f", at t = {self.time:.6g} s"
        return (f"{self.message} (residual {self.residual:.3e} after {self.iterations} "
                f"iterations{when})")

    def at_time(self, time: float) -> "ConvergenceError":
        """Set the time [s] of the failing step (also in the message); returns self."""
        self.time = float(time)
        self.args = (self._format(),)
        return self


class LockupError(SolverError):
    """The mechanism reached a configuration where the motion is not determined (a branch
    point, where the constraint Jacobian loses rank), so a simulation cannot continue.

    Attributes
    ----------
    time : float
        When [s].
    coordinates : tuple of str
        The coordinates that move in the lost direction.
    partial : TrajectoryResult
        The trajectory up to that time.
    """

    def __init__(self, message: str, *, time: float, coordinates=(), partial=None):
        self.time = float(time)
        self.coordinates = tuple(coordinates)
        self.partial = partial
        super().__init__(message)


class DataError(MbfgError):
    """A data file (trajectory, readings, sensors) is malformed."""


class FactorJacobianError(MbfgError):
    """A factor produced a Jacobian or error of the wrong shape or type."""


class UsageError(MbfgError):
    """A command-line option or a driver argument is invalid (e.g. an unknown coordinate)."""


__all__ = ["MbfgError", "MechanismError", "YamlSyntaxError", "SchemaError", "ExpressionError",
           "ExpressionSyntaxError", "UndefinedVariableError", "AssemblyError",
           "SingularMassError", "SolverError", "ConvergenceError", "LockupError", "DataError",
           "FactorJacobianError", "UsageError"]
