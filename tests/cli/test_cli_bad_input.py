"""Bad command-line input: every case is a typed error, exit code 2 and exactly one line on
stderr naming what was wrong and what was expected (never a traceback, never RuntimeWarning
lines), found before any long computation."""
import subprocess
import sys

import numpy as np
import pytest

from mbfg import errors
from mbfg.cli import commands
from mbfg.cli import main

FOURBAR = "fourbar"


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *words):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Warning" not in err
    assert ": error: " in lines[0]
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture
def no_computation(monkeypatch):
    """Fail loudly (exit 1, 'internal error') if a solver is reached: the option checks must
    come first."""
    import mbfg.model.integrate
    import mbfg.drivers.forward_dynamics
    import mbfg.drivers.forward_dynamics

    def boom(*a, **k):
        raise AssertionError("the computation started")
    monkeypatch.setattr(mbfg.drivers.forward_dynamics, "simulate_smoother", boom)
    monkeypatch.setattr(mbfg.drivers.forward_dynamics, "simulate_batch", boom)
    monkeypatch.setattr(mbfg.model.integrate, "integrate_reference", boom)


@pytest.fixture
def ram_16gb(monkeypatch):
    """The memory estimate against a fixed RAM size (the test must not depend on the machine,
    nor run for ever where os.sysconf has no answer)."""
    monkeypatch.setattr(commands, "physical_memory", lambda: 16 * 10 ** 9)


@pytest.fixture
def files(tmp_path):
    """Small sensors / readings / trajectory files."""
    d = tmp_path
    (d / "marker.yaml").write_text("sensors:\n  - {type: marker, point: 1, sigma: 1.0}\n")
    t = np.arange(21) * 0.01
    good = "\n".join(f"{tk:g} {1 + 0.01 * tk:.6f} {0.001 * tk:.6f}" for tk in t)
    (d / "readings.txt").write_text("% t x y\n" + good + "\n")
    (d / "huge.txt").write_text("\n".join(f"{tk:g} 1e300 0" for tk in t) + "\n")
    (d / "large.txt").write_text("\n".join(f"{tk:g} 1e150 1e150" for tk in t) + "\n")
    (d / "slow.txt").write_text("\n".join(f"{5000 * k:g} 1 0" for k in range(21)) + "\n")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (d / "two.txt").write_text("0 0.1\n0.01 0.2\n")
    (d / "crank.txt").write_text("".join(f"{0.01 * k:g} {0.1 * k:g}\n" for k in range(10)))
    return d


# --------------------------------------------------------------------------- simulate
@pytest.mark.parametrize("args,words", [
    (["--t-end", "inf"], ["--t-end", "finite"]),
    (["--t-end", "nan"], ["--t-end", "finite"]),
    (["--dt=-inf"], ["--dt must be positive"]),
    (["--dt", "1e-300"], ["memory", "GB", "--dt"]),
    (["--t-end", "1e9"], ["memory", "TB", "--t-end"]),
    (["--dt", "10", "--t-end", "0.1"], ["--dt 10 s", "longer than the duration", "--t-end"]),
    (["--dt", "5000", "--t-end", "10000"], ["--dt 5000 s", "period", "expected a step"]),
    (["--window", "1000000000"], ["--window 1000000000", "5001", "expected 1 <= --window"]),
    (["--window", "0"], ["--window must be >= 1"]),
    (["--out", "result.xyz"], ["--out result.xyz", ".npz or .csv"]),
    (["--out", "result"], ["--out result", "no suffix"]),
    (["--out", "/nonexistent-dir/r.npz"], ["/nonexistent-dir", "does not exist"]),
    (["--plot", "x.xyz"], ["--plot x.xyz", ".png"]),
])
def test_simulate_bad_options(capsys, no_computation, ram_16gb, args, words):
    code, out, err = run(["simulate", FOURBAR, "--quiet"] + args, capsys)
    assert_one_line_error(code, err, *words)
    assert out == ""


def test_out_and_plot_suffix_checked_before_the_run(tmp_path, capsys, no_computation):
    good = tmp_path / "r.npz"
    code, _, err = run(["simulate", FOURBAR, "--quiet", "--t-end", "0.01", "--out", good,
                        "--plot", tmp_path / "p.xyz"], capsys)
    assert_one_line_error(code, err, "--plot")
    assert not good.exists()


# --------------------------------------------------------------------------- inverse
@pytest.mark.parametrize("args,words", [
    (["--trajectory", "{d}/binary.txt"], ["binary.txt", "not a text file"]),
    (["--trajectory", "{d}/two.txt"], ["two.txt", "2 data rows", "at least 3"]),
    (["--trajectory", "{d}/crank.txt", "--out", "{d}/id.xyz"], ["--out", ".npz or .csv"]),
    (["--trajectory", "{d}/crank.txt", "--plot", "{d}/id.xyz"], ["--plot", "image"]),
    (["--point-path", "{d}/crank.txt", "--point=-1"], ["--point -1", "out of range"]),
])
def test_inverse_bad_input(files, capsys, args, words):
    args = [a.format(d=files) for a in args]
    code, _, err = run(["inverse", "fourbar-crank-angle", "--imposed", "theta0", "--quiet"] + args,
                       capsys)
    assert_one_line_error(code, err, *words)


# --------------------------------------------------------------------------- synthesize
@pytest.mark.parametrize("args,words", [
    (["--seed=-1"], ["--seed", "non-negative"]),
    (["--dt", "nan"], ["--dt", "finite"]),
    (["--t-end", "0"], ["--t-end must be positive"]),
    (["--t-end", "1e9"], ["memory"]),
    (["--dt", "5000", "--t-end", "10000"], ["period"]),
    (["--dt", "1", "--t-end", "0.5"], ["longer than the duration"]),
    (["--truth", "{d}/truth.csv"], ["--truth", ".npz"]),
    (["--out", "{d}/missing/readings.txt"], ["does not exist"]),
])
def test_synthesize_bad_options(files, capsys, no_computation, ram_16gb, args, words):
    args = [a.format(d=files) for a in args]
    if "--out" not in args:
        args += ["--out", str(files / "out.txt")]
    code, _, err = run(["synthesize", FOURBAR, "--sensors", files / "marker.yaml"] + args, capsys)
    assert_one_line_error(code, err, *words)
    assert not (files / "out.txt").exists()


# --------------------------------------------------------------------------- estimate
@pytest.mark.parametrize("readings,args,words", [
    ("readings.txt", ["--seed", "-1"], ["--seed", "non-negative"]),
    ("readings.txt", ["--window", "1000000000"], ["--window", "21", "expected 1 <= --window"]),
    ("readings.txt", ["--window", "0"], ["--window must be >= 1"]),
    ("readings.txt", ["--out", "{d}/est.csv"], ["--out", ".npz"]),
    ("binary.txt", [], ["binary.txt", "not a text file"]),
    ("huge.txt", [], ["huge.txt", "1e+300", "sigma"]),
    ("slow.txt", [], ["slow.txt", "5000 s", "period"]),
])
def test_estimate_bad_input(files, capsys, readings, args, words):
    args = [a.format(d=files) for a in args]
    code, _, err = run(["estimate", FOURBAR, "--sensors", files / "marker.yaml", "--readings",
                        files / readings, "--quiet"] + args, capsys)
    assert_one_line_error(code, err, *words)


def test_default_window_is_clamped_to_a_short_file(files, capsys):
    short = files / "short.txt"
    short.write_text("".join(ln + "\n" for ln in (files / "readings.txt").read_text()
                             .splitlines()[:5]))
    code, out, err = run(["estimate", FOURBAR, "--sensors", files / "marker.yaml", "--readings",
                          short, "--method", "smoother", "--quiet"], capsys)
    assert code == 0, err
    assert "4 steps" in out


@pytest.mark.parametrize("gate", [None, "0.999"])
@pytest.mark.parametrize("method", ["ekf", "pf"])
def test_absurd_readings_no_warning_lines(files, capsys, method, gate):
    """Readings 1e150 (finite when whitened, absurd for a 1 m mechanism): numpy's overflow
    warnings are off; a non-finite estimate is a typed error, a finite one a result.  (The
    EKF diverged to nan on these readings while its correction fell back to the linearized
    Eq. 76; it now takes a correction only as far as the mechanism goes, here none of it.)
    With gating too: the particles' mixture covariance is numerically singular against such
    an innovation (a LinAlgError in the gate before), and the gate rejects the reading."""
    code, _, err = run(["estimate", FOURBAR, "--sensors", files / "marker.yaml", "--readings",
                        files / "large.txt", "--method", method, "--quiet"]
                       + (["--gate", gate] if gate else []), capsys)
    assert "RuntimeWarning" not in err and "Traceback" not in err
    if method == "pf" and code != 0:  # no particle explains such readings: refused
        assert_one_line_error(code, err, "pf lost the mode")
    elif code != 0:
        assert_one_line_error(code, err, f"{method} diverged", "not finite from step")
    else:
        assert err == ""


# --------------------------------------------------------------------------- mechanisms
BODY = """    length: {length}
    mass: 1.0
    I0: 0.4
    cog: [0.5, 0.0]
"""


def pendulum(extra_point="", length="auto", tail=""):
    return ("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 1, y: 0}\n" + extra_point
            + "planar_bodies:\n  - points: [0, 1]\n" + BODY.format(length=length) + tail)


@pytest.mark.parametrize("command", [["check"], ["simulate", "--t-end", "0.01", "--quiet"]])
def test_massless_free_point(tmp_path, capsys, command):
    path = tmp_path / "free.yaml"
    path.write_text(pendulum("  - {x: 3, y: 3}\n"))
    code, _, err = run([command[0], path] + command[1:], capsys)
    assert_one_line_error(code, err, "free.yaml", "points[2]", "point 2", "no body")


def test_massless_point_held_by_two_sliders_is_fine(tmp_path, capsys):
    path = tmp_path / "held.yaml"
    path.write_text(pendulum("  - {x: 3, y: 3}\n") + "constraints:\n"
                    "  - {type: fixed_slider, point: 2, line: [[0, 3], [1, 3]]}\n"
                    "  - {type: fixed_slider, point: 2, line: [[3, 0], [3, 1]]}\n")
    code, out, err = run(["check", path], capsys)
    assert code == 0, err


def test_singular_mass_error_is_a_mechanism_error():
    import mbfg
    with pytest.raises(errors.SingularMassError) as exc:
        mbfg.mechanism_from_yaml(pendulum("  - {x: 3, y: 3}\n"), "m.yaml")
    assert isinstance(exc.value, errors.MechanismError)
    assert exc.value.file == "m.yaml" and exc.value.path == "points[2]"


@pytest.mark.parametrize("length,words", [
    ("1.1e-320", ["planar_bodies[0].length", "subnormal"]),
    ("1e-200", ["planar_bodies[0].length", "subnormal"]),
    ("1e200", ["planar_bodies[0].length", "infinite"]),
])
def test_unrepresentable_length(tmp_path, capsys, length, words):
    path = tmp_path / "tiny.yaml"
    path.write_text(pendulum(length=length))
    code, _, err = run(["check", path], capsys)
    assert_one_line_error(code, err, "tiny.yaml:", *words)


def test_length_far_below_the_others(tmp_path, capsys):
    path = tmp_path / "ratio.yaml"
    path.write_text(pendulum("  - {x: 1, y: 1}\n", tail="  - points: [1, 2]\n"
                             + BODY.format(length="1e-13")))
    code, _, err = run(["check", path], capsys)
    assert_one_line_error(code, err, "ratio.yaml:", "planar_bodies[1].length", "largest body length")


def test_duplicate_yaml_key(tmp_path, capsys):
    path = tmp_path / "dup.yaml"
    path.write_text(pendulum().replace("    mass: 1.0\n", "    mass: 1.0\n    mass: 2.0\n"))
    code, _, err = run(["check", path], capsys)
    assert_one_line_error(code, err, "dup.yaml:8", "duplicate key 'mass'", "line 7")


def test_duplicate_key_in_a_sensors_file(files, capsys):
    sensors = files / "dup-sensors.yaml"
    sensors.write_text("sensors:\n  - {type: marker, point: 1, sigma: 1.0, sigma: 2.0}\n")
    code, _, err = run(["estimate", FOURBAR, "--sensors", sensors, "--readings",
                        files / "readings.txt"], capsys)
    assert_one_line_error(code, err, "dup-sensors.yaml:2", "duplicate key 'sigma'")


def test_merge_keys_may_still_be_overridden():
    from mbfg.yaml_document import YamlDocument
    data = YamlDocument("a: &A {x: 1, y: 2}\nb:\n  <<: *A\n  x: 3\n", "m.yaml", "a mapping").data
    assert data["b"] == {"x": 3, "y": 2}


# --------------------------------------------------------------------------- numerics
@pytest.mark.parametrize("exc", [
    np.linalg.LinAlgError("Singular matrix"),
    RuntimeError("Indeterminate linear system detected while working near variable 7. Thrown "
                 "when a linear system is ill-posed."),
])
def test_numerical_breakdown_is_a_solver_error(exc):
    with pytest.raises(errors.SolverError, match="broke down numerically"):
        with commands.numerics("the simulation"):
            raise exc


def test_other_runtime_errors_stay_bugs():
    with pytest.raises(RuntimeError):
        with commands.numerics("the simulation"):
            raise RuntimeError("something else")


def test_non_finite_result_is_a_solver_error():
    q = np.zeros((3, 2))
    q[2, 1] = np.nan
    with pytest.raises(errors.SolverError, match="non-finite.*t = 0.02 s"):
        commands.check_finite("the run", np.array([0.0, 0.01, 0.02]), q=q)


def _fake_command(body):
    def register(sub):
        p = sub.add_parser("fake")
        p.set_defaults(func=body)
    return register


def test_warnings_of_a_successful_command_are_one_line_each(monkeypatch, capsys):
    import warnings

    import mbfg.cli

    def body(args):
        np.ones(2) / np.zeros(2)                       # numpy warning: silenced
        for _ in range(3):
            warnings.warn("3 of 10 windows did not converge", RuntimeWarning)
        return 0
    monkeypatch.setattr(mbfg.cli, "_EXTRA_COMMANDS", [_fake_command(body)])
    code, _, err = run(["fake"], capsys)
    assert code == 0
    assert err.splitlines() == ["mbfg fake: warning: 3 of 10 windows did not converge"]


def test_warnings_of_a_failed_command_are_dropped(monkeypatch, capsys):
    import warnings

    import mbfg.cli

    def body(args):
        warnings.warn("something odd", RuntimeWarning)
        raise errors.UsageError("--x must be positive")
    monkeypatch.setattr(mbfg.cli, "_EXTRA_COMMANDS", [_fake_command(body)])
    code, _, err = run(["fake"], capsys)
    assert_one_line_error(code, err, "--x must be positive")


# --------------------------------------------------------------------------- broken pipe
def test_broken_pipe_is_silent(monkeypatch, capsys):
    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = main(["check", FOURBAR])
    monkeypatch.undo()
    assert code == 141
    assert capsys.readouterr().err == ""


def test_broken_pipe_in_a_real_pipe():
    """``mbfg check fourbar | head -0``: the reader is gone before mbfg writes."""
    proc = subprocess.Popen([sys.executable, "-m", "mbfg", "check", FOURBAR],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141
    assert err == b""


def test_unrepresentable_sensor_sigma(files, capsys):
    sensors = files / "tiny-sigma.yaml"
    sensors.write_text("sensors:\n  - {type: marker, point: 1, sigma: 1e-170}\n")
    code, _, err = run(["estimate", FOURBAR, "--sensors", sensors, "--readings",
                        files / "readings.txt"], capsys)
    assert_one_line_error(code, err, "tiny-sigma.yaml:2", "sensors[0].sigma", "subnormal")
