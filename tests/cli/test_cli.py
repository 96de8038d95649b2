"""The simulate and inverse commands end to end (issue 4, item 7)."""
import csv
import subprocess
import sys

import numpy as np
import pytest

from conftest import MECHANISMS, reference_file
from mbfg.cli import main


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("solver,coords,mech", [
    ("smoother", "dependent", "fourbar"),
    ("batch", "dependent", "fourbar"),
    ("smoother", "independent", "fourbar-crank-angle"),
    ("batch", "independent", "slider-crank"),
])
def test_simulate_writes_results_and_plot(tmp_path, capsys, solver, coords, mech):
    out_file, png = tmp_path / "run.npz", tmp_path / "run.png"
    code, out, err = run(["simulate", str(MECHANISMS / f"{mech}.yaml"), "--t-end", "0.2",
                          "--solver", solver, "--coords", coords, "--out", str(out_file),
                          "--plot", str(png), "--quiet"], capsys)
    assert code == 0, err
    assert err == ""          # --quiet: no progress bar
    data = np.load(out_file)
    for name in ("t", "q", "qd", "qdd", "Q", "coords"):
        assert name in data
    assert data["q"].shape == (201, len(data["coords"]))
    np.testing.assert_allclose(data["t"][-1], 0.2)
    assert np.max(data["position_residual"]) < 1e-6
    assert png.stat().st_size > 1000
    assert "max |Phi|" in out


def test_simulate_csv_output(tmp_path, capsys):
    path = tmp_path / "run.csv"
    code, _, err = run(["simulate", str(MECHANISMS / "pendulum1.yaml"), "--t-end", "0.05",
                        "--out", str(path), "--quiet"], capsys)
    assert code == 0, err
    rows = list(csv.reader(path.open()))
    assert rows[0][:3] == ["t", "q_x1", "q_y1"]
    assert len(rows) == 1 + 51


@pytest.mark.parametrize("args,message", [
    (["--dt", "-1"], "--dt must be positive"),
    (["--window", "0"], "--window must be >= 1"),
])
def test_simulate_bad_options_one_line_exit_2(capsys, args, message):
    code, _, err = run(["simulate", str(MECHANISMS / "fourbar.yaml"), "--quiet"] + args, capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_usage_errors_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:   # argparse exits by itself
        main(["simulate", str(MECHANISMS / "fourbar.yaml"), "--solver", "magic"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "invalid choice" in err and len(err.strip().splitlines()) == 1


def test_inverse_command(tmp_path, capsys):
    src = reference_file("ground-truth", "fourbars1-with-rel-angle-trajectory.txt")
    lines = src.read_text().splitlines()
    short = tmp_path / "crank.txt"
    head = [ln for ln in lines if ln.startswith("%")]
    data = [ln for ln in lines if ln.strip() and not ln.startswith("%")][:200]
    short.write_text("\n".join(head + data) + "\n")
    out_file = tmp_path / "id.csv"
    code, out, err = run(["inverse", str(MECHANISMS / "fourbar-crank-angle.yaml"), "--trajectory",
                          str(short), "--imposed", "theta0", "--out", str(out_file), "--quiet",
                          "--plot", str(tmp_path / "id.png")], capsys)
    assert code == 0, err
    rows = list(csv.reader(out_file.open()))
    assert len(rows) == 201 and "Q_theta0" in rows[0]
    assert "Q[theta0]" in out


def test_inverse_point_path_through_inverse_kinematics(tmp_path, capsys):
    t = np.arange(41) * 5e-3
    path = tmp_path / "path.txt"
    np.savetxt(path, np.column_stack([t, -0.5 + 0 * t, -5.0 + 0.5 * t ** 2]), header="t x y",
               comments="# ")
    code, out, err = run(["inverse", str(MECHANISMS / "pick-and-place-robot.yaml"), "--point-path",
                          str(path), "--point", "6", "--imposed", "20,21", "--quiet"], capsys)
    assert code == 0, err
    assert "inverse kinematics" in out


@pytest.mark.parametrize("args,message", [
    (["--imposed", "99", "--trajectory", "x.txt"], "out of range"),
    (["--imposed", "theta7", "--trajectory", "x.txt"], "neither an index nor a coordinate name"),
    (["--imposed", "4"], "exactly one of --trajectory"),
    (["--imposed", "4", "--trajectory", "/nonexistent/file.txt"], "file.txt"),
])
def test_inverse_bad_input_one_line_exit_2(capsys, args, message):
    code, _, err = run(["inverse", str(MECHANISMS / "fourbar-crank-angle.yaml"), "--quiet"] + args,
                       capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_python_dash_m_simulate_help():
    proc = subprocess.run([sys.executable, "-m", "mbfg", "simulate", "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--window" in proc.stdout


def test_batch_independent_switches_coordinates(capsys):
    """fourbar.yaml has only point coordinates, each singular somewhere on the fall; the batch
    driver ends a segment before its coordinates degrade and continues with better ones."""
    code, out, err = run(["simulate", str(MECHANISMS / "fourbar.yaml"), "--coords", "independent",
                          "--solver", "batch", "--t-end", "1.5", "--quiet"], capsys)
    assert code == 0, err
    assert "max |Phi|" in out


def test_synthesize_then_estimate(tmp_path, capsys):
    sensors = tmp_path / "sensors.yaml"
    sensors.write_text("sensors:\n  - {type: encoder, coordinate: theta0, sigma_deg: 1}\n"
                       "  - {type: gyroscope, body: 1, sigma: 9.839e-4, period: 2}\n")
    readings, truth = tmp_path / "readings.txt", tmp_path / "truth.npz"
    mech = str(MECHANISMS / "fourbar-review.yaml")
    code, out, err = run(["synthesize", mech, "--sensors", str(sensors), "--t-end", "0.5",
                          "--out", str(readings), "--truth", str(truth)], capsys)
    assert code == 0, err
    rows = [ln for ln in readings.read_text().splitlines() if not ln.startswith("%")]
    assert len(rows) == 101 and rows[1].split()[2] == "nan"   # the gyroscope reads every 2nd step
    true_q = np.load(truth)["q"]
    for method in ("smoother", "ekf"):
        est = tmp_path / f"{method}.npz"
        code, out, err = run(["estimate", mech, "--sensors", str(sensors), "--readings",
                              str(readings), "--method", method, "--out", str(est), "--quiet"],
                             capsys)
        assert code == 0, err
        q = np.load(est)["q"]
        assert q.shape == true_q.shape
        # the model is exact here: the crank angle is tracked well below the 1 deg encoder noise
        assert np.sqrt(np.mean((q[:, 4] - true_q[:, 4]) ** 2)) < 0.5 * np.radians(1.0)


def test_estimate_with_unknown_force(tmp_path, capsys):
    """--unknown-force points: the estimated forces are saved; a bad name is a usage error."""
    sensors = tmp_path / "sensors.yaml"
    sensors.write_text("sensors:\n  - {type: encoder, coordinate: theta0, sigma_deg: 1}\n")
    readings = tmp_path / "readings.txt"
    mech = str(MECHANISMS / "fourbar-review.yaml")
    code, _, err = run(["synthesize", mech, "--sensors", str(sensors), "--t-end", "0.3",
                        "--out", str(readings)], capsys)
    assert code == 0, err
    est = tmp_path / "est.npz"
    code, _, err = run(["estimate", mech, "--sensors", str(sensors), "--readings", str(readings),
                        "--unknown-force", "points", "--out", str(est), "--quiet"], capsys)
    assert code == 0, err
    forces = np.load(est)["Q"]
    assert forces.shape == (61, 5) and np.all(forces[:, 4] == 0.0)   # none on theta0
    for bad, method in (("x1,nope", "smoother"), ("points", "ekf")):
        code, _, err = run(["estimate", mech, "--sensors", str(sensors), "--readings",
                            str(readings), "--unknown-force", bad, "--method", method], capsys)
        assert code == 2 and "--unknown-force" in err and len(err.strip().splitlines()) == 1


def test_estimate_bad_readings_file(tmp_path, capsys):
    sensors = tmp_path / "sensors.yaml"
    sensors.write_text("sensors:\n  - {type: encoder, coordinate: theta0, sigma_deg: 1}\n")
    bad = tmp_path / "r.txt"
    bad.write_text("0 1.0\n0.005 abc\n")
    code, _, err = run(["estimate", str(MECHANISMS / "fourbar-review.yaml"), "--sensors",
                        str(sensors), "--readings", str(bad)], capsys)
    assert code == 2 and "r.txt:2" in err and len(err.strip().splitlines()) == 1


def test_a_failed_simulation_saves_what_it_computed(tmp_path, capsys, monkeypatch):
    """A run that stops (here: one Gauss-Newton update allowed per 20 ms step) reports one
    line, exits 2 and still writes the trajectory up to the failure."""
    import mbfg.drivers.forward_dynamics
    real = mbfg.drivers.forward_dynamics.simulate_smoother
    monkeypatch.setattr(mbfg.drivers.forward_dynamics, "simulate_smoother",
                        lambda *a, **k: real(*a, **{**k, "max_iterations": 1}))
    out = tmp_path / "partial.npz"
    code, _, err = run(["simulate", str(MECHANISMS / "fourbar.yaml"), "--dt", "0.02",
                        "--t-end", "1", "--out", str(out), "--quiet"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "saved in" in err
    with np.load(out) as data:
        assert 1 <= data["q"].shape[0] < 51
