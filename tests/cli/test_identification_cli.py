"""mbfg identify and mbfg validate end to end: readings synthesized by mbfg synthesize from a
true mechanism, parameters identified from a perturbed YAML.

The sensors are named: an unnamed gyroscope's label contains its bias, and the readings
file's header must match the (guessed, bias-free) sensors file's labels.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import mbfg
from mbfg.cli import main

from conftest import MOTOR_FOURBAR

SENSORS = """sensors:
  - {type: encoder, coordinate: theta0, sigma: 4.4e-4, name: crank}
  - {type: gyroscope, body: 1, sigma: 0.005, bias: %s, name: coupler-gyro}
"""


def _inputs(path, phase):
    t = np.arange(0, 3.0 + 1e-9, 0.005)
    u = 0.8 * np.sin(1.3 * t + phase) + 0.5 * np.sin(3.1 * t + 1) + 0.3 * np.sin(7.3 * t + 2)
    np.savetxt(path, np.column_stack([t, u]))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("identify")
    (d / "truth.yaml").write_text(MOTOR_FOURBAR)
    (d / "guess.yaml").write_text(MOTOR_FOURBAR.replace("mass: 7.5, I0: 170", "mass: 9.0, I0: 200")
                                  .replace("gain: 5.0", "gain: 4.0"))
    (d / "s_true.yaml").write_text(SENSORS % "0.03")
    (d / "s_guess.yaml").write_text(SENSORS % "0.0")
    for k, phase in ((1, 0.0), (2, 0.7)):
        _inputs(d / f"u{k}.txt", phase)
        code = main(["synthesize", str(d / "truth.yaml"), "--sensors", str(d / "s_true.yaml"),
                     "--inputs", str(d / f"u{k}.txt"), "--t-end", "3", "--dt", "0.005",
                     "--seed", str(k), "--out", str(d / f"r{k}.txt")])
        assert code == 0
    return d


def test_identify_writes_result_report_and_yaml(files, capsys):
    d = files
    code = main(["identify", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                 "--readings", str(d / "r1.txt"), "--inputs", str(d / "u1.txt"),
                 "--parameters", "planar_bodies[1].mass,planar_bodies[1].I0,motors[0].gain,"
                                 "sensors[1].bias",
                 "--out", str(d / "res.json"), "--report", str(d / "rep.md"),
                 "--write-yaml", str(d / "identified.yaml"),
                 "--validate", str(d / "r2.txt"), "--validate-inputs", str(d / "u2.txt"),
                 "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "converged" in out and "validation:" in out
    res = json.loads((d / "res.json").read_text())
    values = {p["name"]: p["value"] for p in res["parameters"]}
    assert abs(values["planar_bodies[1].mass"] - 7.5) < 0.02 * 7.5
    assert abs(values["motors[0].gain"] - 5.0) < 0.02 * 5.0
    assert abs(values["sensors[1].bias"] - 0.03) < 0.002
    assert "Cross-validation" in (d / "rep.md").read_text()
    new = mbfg.load_mechanism(d / "identified.yaml")
    assert new.spec.bodies[1].mass == pytest.approx(values["planar_bodies[1].mass"], rel=1e-9)
    assert new.spec.motors[0].gain == pytest.approx(values["motors[0].gain"], rel=1e-9)
    # the validate command with the saved result
    code = main(["validate", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                 "--readings", str(d / "r2.txt"), "--inputs", str(d / "u2.txt"),
                 "--result", str(d / "res.json"), "--out", str(d / "steps.csv")])
    out, err = capsys.readouterr()
    assert code == 0, err
    cost = float(out.split("cost per reading")[1].split()[0])
    assert cost < 2.0
    rows = np.loadtxt(d / "steps.csv", delimiter=",", skiprows=1)
    assert rows.shape == (601, 4)


@pytest.mark.parametrize("extra,msg", [
    (["--parameters", "planar_bodies[9].mass"], "out of range"),
    (["--parameters", "foo"], "unknown parameter"),
    (["--parameters", "gravity", "--out", "x.txt"], "expected a .json"),
])
def test_bad_input_is_one_line_exit_2(files, capsys, extra, msg):
    d = files
    code = main(["identify", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                 "--readings", str(d / "r1.txt"), "--inputs", str(d / "u1.txt"), "--quiet"]
                + extra)
    out, err = capsys.readouterr()
    assert code == 2
    assert msg in err and len(err.strip().splitlines()) == 1


def test_missing_inputs_for_a_motor_is_refused(files, capsys):
    d = files
    code = main(["identify", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                 "--readings", str(d / "r1.txt"), "--parameters", "gravity", "--quiet"])
    _, err = capsys.readouterr()
    assert code == 2 and "--inputs" in err


def test_identified_yaml_of_a_bundled_mechanism_name():
    """--write-yaml works for a mechanism given by bundled name, like every other command."""
    import mbfg
    from mbfg.cli.identify import identified_yaml
    mech = mbfg.load_mechanism("fourbar")
    heavier = mbfg.load_mechanism("fourbar", overrides={"planar_bodies[1].mass": 2.5})
    text = identified_yaml("fourbar", heavier)
    again = mbfg.mechanism_from_yaml(text)
    assert again.spec.bodies[1].mass == 2.5
    assert again.spec.bodies[0].mass == mech.spec.bodies[0].mass
