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


PAYLOAD = "payload:\n  - {body: 1, mass: 2.0, cog: [4.2, -0.1], inertia: 0.5}\n"
"""2 kg on the coupler at its own centre of mass: the loaded coupler has m = 9.5 and
I0 = 170 + 0.5 + 2 |c|^2."""


def test_identify_with_a_payload_recording(files, capsys):
    """--payload K:FILE adds a known payload to the K-th recording's dynamics: a recording of
    the loaded mechanism then gives the unloaded coupler's mass and K."""
    d = files
    I0 = 170 + 0.5 + 2.0 * (4.2 ** 2 + 0.1 ** 2)
    (d / "loaded.yaml").write_text(MOTOR_FOURBAR.replace("mass: 7.5, I0: 170",
                                                         f"mass: 9.5, I0: {I0!r}"))
    (d / "payload.yaml").write_text(PAYLOAD)
    code = main(["synthesize", str(d / "loaded.yaml"), "--sensors", str(d / "s_true.yaml"),
                 "--inputs", str(d / "u2.txt"), "--t-end", "3", "--dt", "0.005",
                 "--seed", "3", "--out", str(d / "r_loaded.txt")])
    assert code == 0
    capsys.readouterr()
    code = main(["identify", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                 "--readings", str(d / "r1.txt"), str(d / "r_loaded.txt"),
                 "--inputs", str(d / "u1.txt"), str(d / "u2.txt"),
                 "--payload", f"2:{d / 'payload.yaml'}",
                 "--parameters", "planar_bodies[1].mass,planar_bodies[1].I0,motors[0].gain,"
                                 "sensors[1].bias",
                 "--out", str(d / "res_payload.json"), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    values = {p["name"]: p["value"]
              for p in json.loads((d / "res_payload.json").read_text())["parameters"]}
    assert abs(values["planar_bodies[1].mass"] - 7.5) < 0.02 * 7.5
    assert abs(values["motors[0].gain"] - 5.0) < 0.02 * 5.0
    # mbfg validate --payload: the loaded recording is predicted with its payload
    costs = []
    for extra in (["--payload", str(d / "payload.yaml")], []):
        code = main(["validate", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                     "--readings", str(d / "r_loaded.txt"), "--inputs", str(d / "u2.txt"),
                     "--result", str(d / "res_payload.json")] + extra)
        out, err = capsys.readouterr()
        assert code == 0, err
        costs.append(float(out.split("cost per reading")[1].split()[0]))
    assert costs[0] < 2.0 and costs[1] > 3.0 * costs[0]


@pytest.mark.parametrize("payload,text,msg", [
    ("{file}", None, "--payload"),
    ("3:{file}", None, "recording 3 does not exist"),
    ("1:{dir}/nope.yaml", None, "file not found"),
    ("1:{file}", "payload:\n  - {body: 1, mass: -2.0, cog: [0, 0]}\n", "payload[0].mass"),
    ("1:{file}", "payload:\n  - {body: 7, mass: 2.0, cog: [0, 0]}\n", "payload[0].body"),
    ("1:{file}", "payload:\n  - {body: 1, mass: 2.0, cog: [0]}\n", "payload[0].cog"),
    ("1:{file}", "payload:\n  - {body: 1, mass: 2.0, cog: [0, 0], mas: 1}\n", "unknown key"),
    ("1:{file}", "masses: []\n", "'payload'"),
])
def test_bad_payload_is_one_line_exit_2(files, tmp_path, capsys, payload, text, msg):
    d = files
    f = tmp_path / "p.yaml"
    f.write_text(text if text is not None else PAYLOAD)
    code = main(["identify", str(d / "guess.yaml"), "--sensors", str(d / "s_guess.yaml"),
                 "--readings", str(d / "r1.txt"), "--inputs", str(d / "u1.txt"),
                 "--parameters", "gravity", "--payload",
                 payload.format(file=f, dir=tmp_path), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert msg in err and len(err.strip().splitlines()) == 1
    if "{file}" in payload and text is not None:
        assert str(f) in err
