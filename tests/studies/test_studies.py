"""Studies (issue 13): study files, cases as pure functions of their inputs, the tidy table,
resume, and the same rows serially and on a real Dask LocalCluster of 2 worker processes."""
from __future__ import annotations

import ast
import csv
import textwrap
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import mbfg
from mbfg.cli import main
from mbfg.errors import MbfgError, SchemaError, YamlSyntaxError
from mbfg.studies import load_study, parse_study, study_from_dict, sweep
from mbfg.studies import runner

from conftest import MOTOR_FOURBAR

# tiny cases: 0.1 s of forward dynamics; a coupler of 5 kg has I0 < m |c|^2, so it fails
SIMULATE = textwrap.dedent("""\
    study: tiny
    mechanism: fourbar
    run:
      kind: simulate
      t_end: 0.1
      dt: 0.002
    vary:
      grid:
        planar_bodies[1].mass: [1.0, 5.0]
        run.solver: [smoother, batch]
      zip:
        gravity[1]: [-9.81, -9.0]
        planar_bodies[0].mass: [1.0, 0.8]
    metrics: [steps, max_phi, energy_drift, ms_per_step]
""")
ESTIMATE = {
    "study": "noise", "mechanism": "fourbar-review",
    "run": {"kind": "estimate", "t_end": 0.4, "dt": 0.005, "sensors": "encoder",
            "model_overrides": {"gravity[1]": -8.81}, "initial_offset": {"theta0": "pi/16"},
            "after": 0.2},
    "sensor_sets": {"encoder": [{"type": "encoder", "coordinate": "theta0", "sigma_deg": 1.0}]},
    "vary": {"grid": {"run.method": ["ekf", "fg-online"]}},
    "seeds": 2,
}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "tiny.yaml"
    path.write_text(SIMULATE)
    return path


@pytest.fixture(scope="module")
def serial(study):
    return sweep(study, scheduler="serial")


@pytest.fixture(scope="module")
def cluster():
    """A real LocalCluster of 2 single-threaded worker processes (its address is passed as
    --scheduler, so the existing-scheduler path is exercised too)."""
    distributed = pytest.importorskip("distributed")
    import logging
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.ERROR) as c:
        yield c.scheduler_address


def test_cases_columns_and_keys(study):
    s = load_study(study)
    assert len(s.cases) == 2 * 2 * 2
    assert s.columns == ("case", "mechanism", "planar_bodies[1].mass", "solver", "gravity[1]",
                         "planar_bodies[0].mass", "seed", "steps", "max_phi", "energy_drift",
                         "ms_per_step", "status", "error", "wall_s", "worker")
    assert s.timing_columns == ("ms_per_step", "wall_s", "worker")
    # the key hashes the inputs only: the same case in another study has the same key
    again = load_study(study)
    assert [c.key for c in again.cases] == [c.key for c in s.cases]
    assert len({c.key for c in s.cases}) == len(s.cases)
    one = parse_study(SIMULATE.replace("[1.0, 5.0]", "[5.0]"), "other.yaml")
    assert {c.key for c in one.cases} < {c.key for c in s.cases}


def test_serial_rows_and_failure_rows(serial):
    assert len(serial.rows) == 8 and serial.failed == 4
    for row in serial.rows:
        if row["planar_bodies[1].mass"] == 5.0:
            assert row["status"] == "failed" and row["max_phi"] is None
            assert row["error"].startswith("UsageError: planar_bodies[1]: I0")
        else:
            assert row["status"] == "ok" and row["error"] is None
            assert row["steps"] == 50 and row["max_phi"] < 1e-9


def test_two_workers_give_the_serial_rows(study, serial, cluster, tmp_path):
    out = tmp_path / "r.csv"
    dist = sweep(study, scheduler=cluster, out=out, progress=False)
    assert dist.scheduler == cluster and dist.workers == 2
    assert dist.deterministic_rows() == serial.deterministic_rows()
    assert all(w and ":" in w for w in dist.column("worker"))
    # the table read back from the CSV is the same, bit for bit
    again = sweep(study, scheduler="serial", out=out)
    assert again.ran == 0 and again.skipped == 8
    assert again.deterministic_rows() == serial.deterministic_rows()
    if runner.parquet_available():
        import pyarrow.parquet as pq
        table = pq.read_table(out.with_suffix(".parquet"))
        assert table.column_names == list(serial.columns) and table.num_rows == 8
        assert table.column("max_phi").to_pylist() == serial.column("max_phi")


def test_noise_seeds_same_rows_on_two_workers():
    """sweep's own LocalCluster (scheduler "local", 2 worker processes)."""
    pytest.importorskip("distributed")
    s = study_from_dict(ESTIMATE)
    a = sweep(s, scheduler="serial")
    b = sweep(s, scheduler="local", workers=2, progress=False)
    assert b.scheduler == "local" and b.workers == 2
    assert a.failed == 0 and len(a.rows) == 4
    assert a.deterministic_rows() == b.deterministic_rows()
    pos = a.column("pos_rmse")
    assert pos[0] != pos[1]  # the seed changes the readings
    assert a.column("smoothed_pos_rmse")[0] is None  # ekf does not smooth
    assert a.column("smoothed_pos_rmse")[2] is not None


def test_longest_cases_are_submitted_first():
    s = parse_study("mechanism: pendulum1\nrun: {kind: simulate, dt: 0.01}\nvary:\n  grid:\n"
                    "    run.t_end: [0.05, 0.2, 0.1]\nseeds: 2\n", "s.yaml")
    groups = runner._submission_groups(s, list(s.cases))
    assert [p for p, _ in groups] == [3, 2, 1]
    assert [[c.index for c in g] for _, g in groups] == [[2, 3], [4, 5], [0, 1]]


def test_resume_after_an_interruption(study, serial, cluster, tmp_path):
    out = tmp_path / "r.csv"
    sweep(study, scheduler="serial", out=out)
    lines = out.read_text().splitlines()
    # interrupted: the header, three finished cases and a row torn in the middle
    out.write_text("\n".join(lines[:4]) + "\n" + lines[4][:20])
    resumed = sweep(study, scheduler=cluster, out=out)
    assert resumed.skipped == 3 and resumed.ran == 5
    assert resumed.deterministic_rows() == serial.deterministic_rows()
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["case"] for r in rows] == [c.key for c in serial.study.cases]
    # failed rows are kept unless asked to retry them
    assert sweep(study, scheduler="serial", out=out).ran == 0
    assert sweep(study, scheduler="serial", out=out, retry_failed=True).ran == 4


def test_resume_refuses_another_studys_output(study, tmp_path):
    out = tmp_path / "r.csv"
    sweep(parse_study(SIMULATE.replace("[1.0, 5.0]", "[1.0, 2.0]"), "x.yaml"),
          scheduler="serial", out=out)
    with pytest.raises(MbfgError, match="not in this study"):
        sweep(study, scheduler="serial", out=out)


def test_keep_arrays(tmp_path):
    s = parse_study(SIMULATE.replace("[1.0, 5.0]", "[1.0]").replace("[smoother, batch]",
                                                                     "[batch]"), "a.yaml")
    res = sweep(s, scheduler="serial", keep_arrays=tmp_path / "arrays")
    files = sorted((tmp_path / "arrays").glob("*.npz"))
    assert [f.stem for f in files] == sorted(res.column("case"))
    with np.load(files[0]) as z:
        assert z["q"].shape == (51, len(z["coords"])) and "t" in z and "qdd" in z


def test_without_dask_the_sweep_runs_serially_and_says_so(study, serial, monkeypatch):
    monkeypatch.setattr(runner, "dask_available", lambda: False)
    notices = []
    res = sweep(study, workers=2, log=notices.append)
    assert res.scheduler == "serial" and "not installed" in notices[0]
    assert res.deterministic_rows() == serial.deterministic_rows()
    with pytest.warns(UserWarning, match="mbfg\\[cluster\\]"):
        sweep(study, workers=2)


def test_random_draws_and_seeds():
    text = textwrap.dedent("""\
        mechanism: pendulum1
        run: {kind: simulate, t_end: 0.02, dt: 0.01}
        vary:
          random:
            count: 3
            seed: 7
            values:
              planar_bodies[0].mass: {loguniform: [0.5, 2.0]}
              run.solver: {choice: [smoother, batch]}
        seeds: [4, 9]
    """)
    s = parse_study(text, "r.yaml")
    masses = [dict(c.labels)["planar_bodies[0].mass"] for c in s.cases]
    assert len(s.cases) == 6 and [c.seed for c in s.cases] == [4, 9] * 3
    assert masses[0] == masses[1] and len(set(masses)) == 3
    assert all(0.5 <= m <= 2.0 for m in masses)
    assert masses == [dict(c.labels)["planar_bodies[0].mass"]
                      for c in parse_study(text, "r.yaml").cases]


def test_inverse_kind_reads_the_trajectory_once(tmp_path):
    t = np.arange(0.0, 0.2001, 0.01)
    np.savetxt(tmp_path / "crank.txt", np.column_stack([t, 1.0 + 2.0 * t]))
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""\
        mechanism: fourbar-crank-angle
        run: {kind: inverse, trajectory: crank.txt, imposed: theta0}
        vary:
          grid:
            planar_bodies[1].mass: [1.0, 2.0]
    """))
    res = sweep(tmp_path / "s.yaml", scheduler="serial")
    assert res.failed == 0
    rms = res.column("force_rms")
    assert rms[1] > rms[0] > 0 and max(res.column("max_following_error")) < 1e-6
    (tmp_path / "crank.txt").unlink()  # the cases carry the trajectory, not its file name
    assert res.study.cases[0].settings_dict["trajectory_t"][-1] == pytest.approx(0.2)


# identification on the motor four-bar: 2 recordings of 0.5 s (the second carries a known
# payload), motor gain, coupler mass and gyroscope bias from a start 0.2 off in the chart
IDENTIFY = {
    "study": "ident", "mechanism": "motor-fourbar.yaml",
    "run": {"kind": "identify", "t_end": 0.5, "dt": 0.01, "sensors": "encoder-gyro",
            "recordings": 2, "payload": [{"body": 1, "mass": 2.0, "cog": [3.0, 0.2], "I_G": 0.5}],
            "parameters": ["motors[0].gain", "planar_bodies[1].mass", "sensors[1].bias"]},
    "sensor_sets": {"encoder-gyro": [
        {"type": "encoder", "coordinate": "theta0", "sigma_deg": 0.05},
        {"type": "gyroscope", "body": 1, "sigma": 0.005, "bias": 0.02}]},
    "seeds": 2,
}


def test_identify_kind_same_rows_on_two_workers(cluster, tmp_path):
    (tmp_path / "motor-fourbar.yaml").write_text(MOTOR_FOURBAR)
    s = study_from_dict(IDENTIFY, base_dir=tmp_path)
    per_parameter = [f"{m}({n})" for n in ("motors[0].gain", "planar_bodies[1].mass",
                                           "sensors[1].bias") for m in ("rel_error", "rel_std")]
    assert s.metrics[-6:] == tuple(per_parameter) and "max_z" in s.metrics
    assert s.timing_columns == ("seconds", "wall_s", "worker")
    a = sweep(s, scheduler="serial", keep_arrays=tmp_path / "arrays")
    b = sweep(s, scheduler=cluster, progress=False)
    assert a.failed == 0 and a.deterministic_rows() == b.deterministic_rows()
    for row in a.rows:
        assert row["converged"] is True and 0 < row["iterations"] <= 40
        assert abs(row["rel_error(motors[0].gain)"]) < 4 * row["rel_std(motors[0].gain)"]
        assert row["max_z"] < 4 and row["max_rel_std"] > 0
        assert row["max_z"] <= row["max_z_sampling"] * (1 + 1e-3) and row["max_z_sampling"] < 4.5
        # the one inertial base parameter here (the coupler's mass) within 4 std
        assert row["base_max_error"] > 0 and row["base_max_z"] < 4
    assert a.column("rel_error(planar_bodies[1].mass)")[0] != \
        a.column("rel_error(planar_bodies[1].mass)")[1]  # the seed changes the readings
    with np.load(tmp_path / "arrays" / f"{a.rows[0]['case']}.npz") as z:
        assert list(z["names"]) == ["motors[0].gain", "planar_bodies[1].mass", "sensors[1].bias"]
        assert np.all(z["sampling_std"] <= z["std"] * (1 + 1e-3))
        np.testing.assert_allclose(z["true"], [5.0, 7.5, 0.02])
        assert np.all(z["start"] != z["true"])
    # a chosen metric of one parameter only
    one = study_from_dict({**IDENTIFY, "metrics": ["rel_error(planar_bodies[1].mass)"]},
                          base_dir=tmp_path)
    assert one.metrics == ("rel_error(planar_bodies[1].mass)",)


BAD = {
    "syntax": ("mechanism: fourbar\nrun: {kind: simulate\n", YamlSyntaxError, "bad.yaml:"),
    "no run": ("mechanism: fourbar\n", SchemaError, "missing required key 'run'"),
    "kind": ("mechanism: fourbar\nrun:\n  kind: simulat\n", SchemaError, "run.kind"),
    "setting": ("mechanism: fourbar\nrun:\n  kind: simulate\n  t_end: -1\n", SchemaError,
                "bad.yaml:4: run.t_end: expected a positive finite number"),
    "unknown setting": ("mechanism: fourbar\nrun:\n  kind: simulate\n  tend: 1\n", SchemaError,
                        "did you mean 't_end'"),
    "override": ("mechanism: fourbar\nrun: {kind: simulate}\nvary:\n  grid:\n"
                 "    planar_bodies[7].mass: [1]\n", SchemaError, "bad.yaml:5: vary.grid."),
    "mechanism": ("mechanism: nosuch\nrun: {kind: simulate}\n", SchemaError, "no mechanism file"),
    "metric": ("mechanism: fourbar\nrun: {kind: simulate}\nmetrics: [max_ph]\n", SchemaError,
               "did you mean 'max_phi'"),
    "zip": ("mechanism: fourbar\nrun: {kind: simulate}\nvary:\n  zip:\n"
            "    planar_bodies[0].mass: [1, 2]\n    planar_bodies[1].mass: [1]\n", SchemaError,
            "equal lengths"),
    "sensors": ("mechanism: fourbar-review\nrun: {kind: estimate, sensors: nope}\n", SchemaError,
                "no sensor set 'nope'"),
    "method": ("mechanism: fourbar-review\nrun: {kind: estimate, sensors: s, method: kf}\n"
               "sensor_sets:\n  s: [{type: encoder, coordinate: theta0, sigma: 0.01}]\n",
               SchemaError, "unknown estimator 'kf'"),
    "seeds": ("mechanism: fourbar\nrun: {kind: simulate}\nseeds: 0\n", SchemaError, "seeds"),
    "reading stride": ("mechanism: fourbar-review\nrun: {kind: estimate, sensors: s, "
                       "reading_stride: 0}\nsensor_sets:\n  s: [{type: encoder, coordinate: "
                       "theta0, sigma: 0.01}]\n", SchemaError, "run.reading_stride"),
    "sensor noise": ("mechanism: fourbar-review\nrun: {kind: estimate, sensors: s, "
                     "sensor_noise: -3}\nsensor_sets:\n  s: [{type: encoder, coordinate: "
                     "theta0, sigma: 0.01}]\n", SchemaError, "run.sensor_noise: expected a positive finite number"),
    "prototype override": ("mechanism: fourbar-review\nrun:\n  kind: estimate\n  sensors: s\n"
                           "  prototype_overrides: {\"planar_bodies[9].mass\": 1}\nsensor_sets:\n"
                           "  s: [{type: encoder, coordinate: theta0, sigma: 0.01}]\n",
                           SchemaError, "prototype_overrides: "),
    "label": ("mechanism: fourbar-review\nrun: {kind: estimate, sensors: s, label: [a]}\n"
              "sensor_sets:\n  s: [{type: encoder, coordinate: theta0, sigma: 0.01}]\n",
              SchemaError, "expected a text"),
    "trajectory": ("mechanism: fourbar-crank-angle\nrun: {kind: inverse, trajectory: no.txt, "
                   "imposed: theta0}\n", SchemaError, "trajectory"),
    "identify without parameters": ("mechanism: fourbar-review\nrun: {kind: identify, sensors: s}\n"
                                    "sensor_sets:\n  s: [{type: encoder, coordinate: theta0, "
                                    "sigma: 0.01}]\n", SchemaError,
                                    "run.parameters: missing required setting 'parameters'"),
    "identify parameter": ("mechanism: fourbar-review\nrun:\n  kind: identify\n  sensors: s\n"
                           "  parameters: planar_bodies[1].mass, motors[0].gain\nsensor_sets:\n"
                           "  s: [{type: encoder, coordinate: theta0, sigma: 0.01}]\n", SchemaError,
                           "bad.yaml:5: run.parameters: parameter 'motors[0].gain': "
                           "motor index 0 out of range"),
    "identify bias": ("mechanism: fourbar-review\nrun:\n  kind: identify\n  sensors: s\n"
                      "  parameters: sensors[0].bias\nsensor_sets:\n"
                      "  s: [{type: encoder, coordinate: theta0, sigma: 0.01}]\n", SchemaError,
                      "only gyroscopes have one"),
    "identify payload": ("mechanism: fourbar-review\nrun:\n  kind: identify\n  sensors: s\n"
                         "  parameters: planar_bodies[1].mass\n  payload: [{body: 1, mass: 2, "
                         "cog: [0, 0], I_G: 0.1}]\nsensor_sets:\n"
                         "  s: [{type: encoder, coordinate: theta0, sigma: 0.01}]\n", SchemaError,
                         "bad.yaml:6: run.payload: the payload is carried in the "
                         "recordings after the first"),
    "identify excitation": ("mechanism: fourbar-review\nrun:\n  kind: identify\n  sensors: s\n"
                            "  parameters: planar_bodies[1].mass\n  excitation: {amplitudes: [1],"
                            " frequencies: [0]}\nsensor_sets:\n  s: [{type: encoder, coordinate: "
                            "theta0, sigma: 0.01}]\n", SchemaError,
                            "run.excitation: expected a positive finite number, got 0"),
    "identify metric": ("mechanism: fourbar-review\nrun:\n  kind: identify\n  sensors: s\n"
                        "  parameters: planar_bodies[1].mass\nsensor_sets:\n  s: [{type: encoder,"
                        " coordinate: theta0, sigma: 0.01}]\nmetrics:\n"
                        "  - rel_error(planar_bodies[1].I0)\n", SchemaError,
                        "did you mean 'rel_error(planar_bodies[1].mass)'"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_study_files_are_typed_errors_and_one_cli_line(name, tmp_path, capsys):
    text, error, message = BAD[name]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(error) as info:
        load_study(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mbfg sweep: error: ") and message in err
    assert not (tmp_path / "o.csv").exists()


def test_cli_sweep_writes_the_table(study, tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["sweep", str(study), "--workers", "1", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "4 ok, 4 failed" in printed and str(out) in printed
    assert main(["sweep", str(study), "--workers", "0", "--out", str(out)]) == 2
    assert main(["sweep", str(study), "--out", str(tmp_path / "t.txt")]) == 2


@pytest.mark.parametrize("condition", ["noise x3", "every 4th step", "coupler +20 %"])
def test_estimate_kind_conditions_give_the_review_harness_rows(condition):
    """The bundled conditions study (benchmarks/estimation_seeds.py) gives, case by case, what
    the review harness of mbfg.benchmarking.estimation_review gives for the same condition:
    sensor noise (readings and assumed sigma), a reading every 4th step, a heavier prototype
    coupler (its mass and I0 by YAML override, the harness by scaling the loaded spec).  The
    factor graph's rows agree to about 1e-9, not bit for bit: the harness stores the offset
    start as the model's q0, at which the scale-derived constraint sigmas are evaluated."""
    from mbfg.benchmarking import estimation_review as ER
    from mbfg.resources import resolve_study
    import yaml
    spec = yaml.safe_load(resolve_study("fourbar-estimation-conditions").read_text())
    zipped = spec["vary"]["zip"]
    i = zipped["run.label"].index(condition)
    spec["vary"]["zip"] = {k: [v[i]] for k, v in zipped.items()}
    spec["vary"]["grid"] = {"run.sensors": ["encoder"], "run.method": ["fg-online", "ekf"]}
    spec["seeds"], spec["run"]["t_end"] = [1003], 0.8
    rows = sweep(study_from_dict(spec), scheduler="serial").rows
    proto, model, q0, setups, stride = ER.review_condition(condition)
    truth = ER.simulate_prototype(proto, 0.8, 0.005)
    readings = ER.thin_readings(setups["encoder"].synthesize(
        proto, *truth, rng=np.random.default_rng(1003)), stride)
    k = model.coordinate_index(ER.CRANK)
    for row in rows:
        opts = {"covariance": True} if row["method"].startswith("fg-") else {}
        res = mbfg.estimate(model, setups["encoder"], readings, 0.005, len(truth[0]),
                            method=row["method"], q0=q0, qd0=np.zeros(model.n), seed=1003,
                            **opts)
        m = ER.metrics(res, truth, k, 0.005)
        assert row["status"] == "ok" and row["label"] == condition
        assert row["pos_rmse"] == pytest.approx(m["pos_rmse"], rel=1e-6)
        assert row["coverage_2sigma"] == pytest.approx(m["coverage_2sigma"], rel=1e-6)
        assert 0.0 <= row["coverage_2sigma"] <= 1.0


def test_bundled_example_studies_parse():
    folder = Path(str(resources.files("mbfg") / "data" / "studies"))
    paths = sorted(folder.glob("*.yaml"))
    assert paths
    for p in paths:
        assert load_study(p).cases
    assert callable(mbfg.sweep)


def test_only_the_runner_imports_dask():
    root = Path(str(resources.files("mbfg")))
    users = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in ("dask", "distributed") for n in names):
                users.append(path.relative_to(root).as_posix())
    assert set(users) == {"studies/runner.py"}
