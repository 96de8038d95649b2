"""The paper's four-bar in mbfg and in the peer libraries that are installed, side by side.

Four-bar ``mechanisms/fourbar.yaml`` released from rest under gravity, 5 s at dt = 1 ms.  Every
code's trajectory is converted to mbfg's coordinates q (the moving points' x, y) and compared
with the same tight DOP853 reference (rtol = atol = 1e-12): q RMSE [mm] over all coordinates
and steps, as in ``benchmarks/forward_dynamics.py``, and the largest |Phi_i(q)| of mbfg's
constraints on that q (for a peer, the loop closure's error shows there).  µs/step times the
stepping loop only (best of ``--repeat`` runs); building a peer's model is reported separately
(setup).  The mbfg rows time the whole ``simulate_*`` call, graph building included.

Peers (the optional ``bench`` extra: ``pip install -e ".[bench]"``), each built from the loaded
Mechanism's bodies (lengths, masses, centres of mass, inertias, initial configuration):

* Exudyn: 2D rigid bodies (nodes at the centres of mass) and revolute joints, its implicit
  generalized-alpha solver with default settings (spectral radius 0.9, index-3 constraints);
* MuJoCo: hinge joints in a spanning tree, the loop closed by an equality ``connect`` (a soft
  constraint: default solref/solimp), default solver and integrator (semi-implicit Euler),
  stepped by ``mj_step`` from a Python loop and, as a second row, by ``mujoco.rollout``;
* Pinocchio: revolute-z joints in the same tree, the loop closed by a ``RigidConstraintModel``
  (CONTACT_3D) solved by ``constraintDynamics`` at every stage of a classical RK4 step.

A peer that is not installed prints a row "not installed".

    python benchmarks/peers.py [--t-end 5] [--repeat 3] [--no-mbfg-smoother]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mbfg  # noqa: E402
from _machine import machine_info  # noqa: E402
from mbfg.drivers.forward_dynamics import simulate_batch, simulate_smoother  # noqa: E402
from mbfg.graphs import DEFAULT_INTEGRATOR  # noqa: E402
from mbfg.model import constraints as C  # noqa: E402
from mbfg.model.integrate import integrate_reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------
# The mechanism as planar rigid bodies joined by revolute joints (what the peers need)
# --------------------------------------------------------------------------------------------
@dataclass
class Body:
    """One body of the mechanism in its initial configuration.  Body frame as mbfg's: origin
    at ``points[0]``, +X toward ``points[1]``."""
    name: str
    mass: float
    inertia: float            # about the centre of mass [kg m^2]
    com: np.ndarray           # centre of mass in the body frame [m]
    origin: np.ndarray        # initial position of the frame's origin [m]
    angle: float              # initial angle of the frame's +X axis [rad]
    local: dict               # point index -> position in the body frame [m]


@dataclass
class PlanarModel:
    """Bodies, a spanning tree of revolute joints rooted at the ground and the joints that
    close loops.  Body index -1 is the ground."""
    bodies: list
    gravity: np.ndarray
    points: np.ndarray                       # initial positions of all points (n_points, 2)
    tree: list = field(default_factory=list)    # (body, parent, point), depth-first order
    loops: list = field(default_factory=list)   # (body, other body or -1, point)
    point_body: dict = field(default_factory=dict)  # moving point -> body that carries it
    q_points: list = field(default_factory=list)    # (point, axis) of each coordinate of q


def _rot(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s], [s, c]])


def planar_model(mech) -> PlanarModel:
    """Rigid bodies and revolute joints of a mechanism of point-defined bodies whose shared
    points (and fixed points) are revolute joints, such as the four-bar.  Relative angles,
    sliders, friction and motors are not translated (ValueError)."""
    spec = mech.spec
    if spec.relative_angles or spec.constraints or spec.friction or spec.motors:
        raise ValueError("only bodies joined by revolute joints at shared points are translated")
    P = mech.point_positions(mech.q0)
    bodies = []
    for k, b in enumerate(spec.bodies):
        origin = P[b.points[0]]
        d = P[b.points[1]] - origin
        angle = float(np.arctan2(d[1], d[0]))
        Rt = _rot(angle).T
        com = np.asarray(b.cog, float)
        bodies.append(Body(f"body{k}", float(b.mass), float(b.I0 - b.mass * com @ com), com,
                           origin.copy(), angle, {p: Rt @ (P[p] - origin) for p in b.points}))
    # joints: at every point, between the ground (fixed point) or the first body there and the
    # others there
    joints = []
    for p, pt in enumerate(spec.points):
        members = ([-1] if pt.fixed else []) + [k for k, b in enumerate(spec.bodies)
                                                if p in b.points]
        joints += [(members[0], other, p) for other in members[1:]]
    model = PlanarModel(bodies, np.asarray(mech.gravity, float), P)
    reached, queue, used = {-1}, deque([-1]), set()
    while queue:
        a = queue.popleft()
        for j, (u, v, p) in enumerate(joints):
            if j in used or a not in (u, v):
                continue
            other = v if u == a else u
            if other in reached:
                continue
            used.add(j)
            reached.add(other)
            queue.append(other)
            model.tree.append((other, a, p))
    if len(reached) != len(bodies) + 1:
        raise ValueError("some bodies are not connected to the ground by revolute joints")
    # depth-first order: Pinocchio's algorithms need every subtree's joints contiguous
    children = {}
    for edge in model.tree:
        children.setdefault(edge[1], []).append(edge)
    model.tree, stack = [], list(reversed(children.get(-1, [])))
    while stack:
        edge = stack.pop()
        model.tree.append(edge)
        stack += reversed(children.get(edge[0], []))
    order = {b: i for i, (b, _, _) in enumerate(model.tree)}
    for j, (u, v, p) in enumerate(joints):
        if j not in used:
            # the body deeper in the tree first (a loop to the ground: the body, then -1)
            u, v = (u, v) if order.get(u, -1) > order.get(v, -1) else (v, u)
            model.loops.append((u, v, p))
    for b, _, _ in model.tree:        # each moving point from the first body (in tree order)
        for p in bodies[b].local:
            if not spec.points[p].fixed:
                model.point_body.setdefault(p, b)
    for p, (ix, iy) in enumerate(mech.point_coords):
        if ix >= 0:
            model.q_points += [(ix, p, 0), (iy, p, 1)]
    return model


def q_from_poses(model: PlanarModel, n: int, origin: np.ndarray, angle: np.ndarray):
    """mbfg's q (T, n) from body poses: frame origins (T, B, 2) and angles (T, B)."""
    q = np.zeros((origin.shape[0], n))
    for i, p, axis in model.q_points:
        b = model.point_body[p]
        c, s = np.cos(angle[:, b]), np.sin(angle[:, b])
        lx, ly = model.bodies[b].local[p]
        q[:, i] = origin[:, b, axis] + (c * lx - s * ly if axis == 0 else s * lx + c * ly)
    return q


def poses_from_tree_angles(model: PlanarModel, theta: np.ndarray):
    """Body poses from the joint angles of the tree (T, B) in tree order, each relative to the
    initial configuration (the joint's zero), as both MuJoCo and Pinocchio models define it."""
    T, B = theta.shape[0], len(model.bodies)
    origin, angle = np.zeros((T, B, 2)), np.zeros((T, B))
    for i, (b, parent, p) in enumerate(model.tree):
        body = model.bodies[b]
        if parent < 0:
            joint, rel0, base = np.broadcast_to(model.points[p], (T, 2)), body.angle, 0.0
        else:
            pa = model.bodies[parent]
            c, s = np.cos(angle[:, parent]), np.sin(angle[:, parent])
            lx, ly = pa.local[p]
            joint = origin[:, parent] + np.stack([c * lx - s * ly, s * lx + c * ly], axis=1)
            rel0, base = body.angle - pa.angle, angle[:, parent]
        angle[:, b] = base + rel0 + theta[:, i]
        c, s = np.cos(angle[:, b]), np.sin(angle[:, b])
        lx, ly = body.local[p]
        origin[:, b] = joint - np.stack([c * lx - s * ly, s * lx + c * ly], axis=1)
    return origin, angle


def _version(dist):
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# Peers: each returns (q (steps + 1, n), stepping seconds, setup seconds, note)
# --------------------------------------------------------------------------------------------
def run_exudyn(mech, model: PlanarModel, t_end, dt):
    import exudyn as exu
    from exudyn.itemInterface import (LoadMassProportional, MarkerBodyMass, MarkerBodyPosition,
                                      NodeRigidBody2D, ObjectGround, ObjectJointRevolute2D,
                                      ObjectRigidBody2D, SensorNode)
    t0 = time.perf_counter()
    SC = exu.SystemContainer()
    mbs = SC.AddSystem()
    ground = mbs.AddObject(ObjectGround(referencePosition=[0, 0, 0]))
    objs, sensors = {}, []
    g = [*model.gravity, 0.0]
    for k, b in enumerate(model.bodies):       # node at the centre of mass
        com = b.origin + _rot(b.angle) @ b.com
        node = mbs.AddNode(NodeRigidBody2D(referenceCoordinates=[*com, b.angle]))
        objs[k] = mbs.AddObject(ObjectRigidBody2D(mass=b.mass, inertia=b.inertia,
                                                  nodeNumber=node))
        mbs.AddLoad(LoadMassProportional(markerNumber=mbs.AddMarker(
            MarkerBodyMass(bodyNumber=objs[k])), loadVector=g))
        sensors.append(mbs.AddSensor(SensorNode(
            nodeNumber=node, storeInternal=True, writeToFile=False,
            outputVariableType=exu.OutputVariableType.Coordinates)))

    def marker(k, p):
        if k < 0:
            return mbs.AddMarker(MarkerBodyPosition(bodyNumber=ground,
                                                    localPosition=[*model.points[p], 0.0]))
        b = model.bodies[k]
        return mbs.AddMarker(MarkerBodyPosition(bodyNumber=objs[k],
                                                localPosition=[*(b.local[p] - b.com), 0.0]))

    for b, parent, p in model.tree:
        mbs.AddObject(ObjectJointRevolute2D(markerNumbers=[marker(parent, p), marker(b, p)]))
    for b, other, p in model.loops:
        mbs.AddObject(ObjectJointRevolute2D(markerNumbers=[marker(other, p), marker(b, p)]))
    mbs.Assemble()
    steps = int(round(t_end / dt))
    s = exu.SimulationSettings()
    s.timeIntegration.numberOfSteps = steps
    s.timeIntegration.endTime = t_end
    s.timeIntegration.verboseMode = 0
    s.solution.file.write = False
    s.solution.sensors.writePeriod = dt
    s.show.statistics = False
    s.show.computationTime = False
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    ok = exu.SolveDynamic(mbs, s, solverType=exu.DynamicSolverType.GeneralizedAlpha,
                          showHints=False)
    stepping = time.perf_counter() - t0
    if not ok:
        raise RuntimeError("Exudyn's solver failed")
    # stored rows: [t, dx, dy, dphi] (displacements from the reference coordinates)
    data = [np.asarray(mbs.GetSensorStoredData(sn)) for sn in sensors]
    T = min(d.shape[0] for d in data)
    origin = np.zeros((T, len(model.bodies), 2))
    angle = np.zeros((T, len(model.bodies)))
    for k, (b, d) in enumerate(zip(model.bodies, data)):
        angle[:, k] = b.angle + d[:T, 3]
        com = b.origin + _rot(b.angle) @ b.com + d[:T, 1:3]
        c, s_ = np.cos(angle[:, k]), np.sin(angle[:, k])
        origin[:, k] = com - np.stack([c * b.com[0] - s_ * b.com[1],
                                       s_ * b.com[0] + c * b.com[1]], axis=1)
    return (q_from_poses(model, mech.n, origin, angle), stepping, setup,
            "generalized-α (ρ∞ = 0.9), index 3, default Newton")


def mujoco_xml(model: PlanarModel, dt) -> str:
    """MJCF of the tree (hinges about z in the x-y plane) and the loop-closing connects."""
    children = {}
    for b, parent, p in model.tree:
        children.setdefault(parent, []).append((b, p))

    def body_xml(b, parent, p, indent):
        body = model.bodies[b]
        if parent < 0:
            pos, rel = body.origin, body.angle
        else:
            pa = model.bodies[parent]
            pos = _rot(pa.angle).T @ (body.origin - pa.origin)
            rel = body.angle - pa.angle
        jx, jy = body.local[p]
        I = body.inertia   # only Izz acts on planar motion; Ixx = Iyy = Izz is a valid inertia
        lines = [f'{indent}<body name="{body.name}" pos="{pos[0]:.17g} {pos[1]:.17g} 0" '
                 f'euler="0 0 {rel:.17g}">',
                 f'{indent}  <joint name="j_{body.name}" type="hinge" axis="0 0 1" '
                 f'pos="{jx:.17g} {jy:.17g} 0"/>',
                 f'{indent}  <inertial pos="{body.com[0]:.17g} {body.com[1]:.17g} 0" '
                 f'mass="{body.mass:.17g}" diaginertia="{I:.17g} {I:.17g} {I:.17g}"/>']
        for c, pc in children.get(b, []):
            lines += body_xml(c, b, pc, indent + "  ")
        return lines + [f"{indent}</body>"]

    world = [line for b, p in children.get(-1, []) for line in body_xml(b, -1, p, "    ")]
    eq = []
    for b, other, p in model.loops:
        ax, ay = model.bodies[b].local[p]
        body2 = "world" if other < 0 else model.bodies[other].name
        eq.append(f'    <connect body1="{model.bodies[b].name}" body2="{body2}" '
                  f'anchor="{ax:.17g} {ay:.17g} 0"/>')
    gx, gy = model.gravity
    return "\n".join(['<mujoco model="mbfg-planar">', '  <compiler angle="radian"/>',
                      f'  <option timestep="{dt:.17g}" gravity="{gx:.17g} {gy:.17g} 0"/>',
                      "  <worldbody>", *world, "  </worldbody>",
                      "  <equality>", *eq, "  </equality>", "</mujoco>"])


def run_mujoco(mech, model: PlanarModel, t_end, dt, loop="python"):
    """``loop="python"``: mj_step called from a Python loop that records qpos; ``"rollout"``:
    the same steps in MuJoCo's C loop (``mujoco.rollout``), recording the full state."""
    import mujoco
    t0 = time.perf_counter()
    m = mujoco.MjModel.from_xml_string(mujoco_xml(model, dt))
    d = mujoco.MjData(m)
    adr = [int(m.jnt_qposadr[m.joint(f"j_{model.bodies[b].name}").id]) for b, _, _ in model.tree]
    steps = int(round(t_end / dt))
    qpos = np.empty((steps + 1, m.nq))
    qpos[0] = d.qpos
    if loop == "rollout":
        from mujoco import rollout
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS     # time, qpos, qvel, ...
        state0 = np.empty(mujoco.mj_stateSize(m, spec))
        mujoco.mj_getState(m, d, state0, spec)
        out = np.empty((1, steps, state0.size))
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    if loop == "rollout":
        rollout.rollout(m, d, state0[None], nstep=steps, state=out)
    else:
        step = mujoco.mj_step
        for k in range(1, steps + 1):
            step(m, d)
            qpos[k] = d.qpos
    stepping = time.perf_counter() - t0
    if loop == "rollout":
        qpos[1:] = out[0, :, 1:1 + m.nq]
    origin, angle = poses_from_tree_angles(model, qpos[:, adr])
    how = "mujoco.rollout (C loop)" if loop == "rollout" else "mj_step in a Python loop"
    return (q_from_poses(model, mech.n, origin, angle), stepping, setup,
            f"{how}, {('Euler', 'RK4', 'implicit', 'implicitfast')[m.opt.integrator]} "
            f"(default), soft connect (default solref {m.eq_solref[0][0]:g} s)")


def pinocchio_model(model: PlanarModel, baumgarte=(0.0, 0.0)):
    """Pinocchio model of the tree (revolute-z joints, frames at the joint points with the
    bodies' initial orientation, so q = 0 is the initial configuration) and the
    loop-closing constraint models."""
    import pinocchio as pin
    pm = pin.Model()
    pm.gravity = pin.Motion(np.array([*model.gravity, 0.0]), np.zeros(3))
    jid, jpoint = {-1: 0}, {}

    def rz(a):
        return pin.utils.rotate("z", a)

    for b, parent, p in model.tree:
        body = model.bodies[b]
        if parent < 0:   # joint frame: at the joint point, body orientation at q = 0
            placement = pin.SE3(rz(body.angle), np.array([*model.points[p], 0.0]))
        else:
            pa = model.bodies[parent]
            placement = pin.SE3(rz(body.angle - pa.angle),
                                np.array([*(pa.local[p] - pa.local[jpoint[parent]]), 0.0]))
        jid[b] = pm.addJoint(jid[parent], pin.JointModelRZ(), placement, f"j_{body.name}")
        jpoint[b] = p
        lever = np.array([*(body.com - body.local[p]), 0.0])
        pm.appendBodyToJoint(jid[b], pin.Inertia(body.mass, lever, body.inertia * np.eye(3)),
                             pin.SE3.Identity())
    cms = []
    for b, other, p in model.loops:
        body = model.bodies[b]
        pl1 = pin.SE3(np.eye(3), np.array([*(body.local[p] - body.local[jpoint[b]]), 0.0]))
        if other < 0:
            pl2 = pin.SE3(np.eye(3), np.array([*model.points[p], 0.0]))
        else:
            ob = model.bodies[other]
            pl2 = pin.SE3(np.eye(3), np.array([*(ob.local[p] - ob.local[jpoint[other]]), 0.0]))
        cm = pin.RigidConstraintModel(pin.ContactType.CONTACT_3D, pm, jid[b], pl1, jid[other],
                                      pl2, pin.ReferenceFrame.LOCAL)
        kp, kd = baumgarte
        if kp or kd:
            cm.setBaumgarteCorrectorParameters(pin.BaumgarteCorrectorParameters(kp, kd))
        cms.append(cm)
    return pm, cms


def run_pinocchio(mech, model: PlanarModel, t_end, dt, baumgarte=(0.0, 0.0)):
    import pinocchio as pin
    t0 = time.perf_counter()
    pm, cms = pinocchio_model(model, baumgarte)
    data = pm.createData()
    cmodels = pin.StdVec_RigidConstraintModel()
    cdatas = pin.StdVec_RigidConstraintData()
    for cm in cms:
        cmodels.append(cm)
        cdatas.append(cm.createData())
    pin.initConstraintDynamics(pm, data, cmodels, cdatas)
    # mu > 0: the planar loop's z row of the 3D contact is empty; the proximal iterations
    # remove the damping's effect on the other rows
    prox = pin.ProximalSettings(1e-12, 1e-12, 20)
    steps = int(round(t_end / dt))
    tau = np.zeros(pm.nv)
    q, v = pin.neutral(pm), np.zeros(pm.nv)
    qs = np.empty((steps + 1, pm.nq))
    setup = time.perf_counter() - t0

    def acc(q, v):
        return pin.constraintDynamics(pm, data, q, v, tau, cmodels, cdatas, prox)

    h2, h6 = dt / 2, dt / 6
    t0 = time.perf_counter()
    qs[0] = q
    for k in range(1, steps + 1):   # RK4 (RZ joints: q is the angle vector, nq = nv)
        a1 = acc(q, v)
        v2 = v + h2 * a1
        a2 = acc(q + h2 * v, v2)
        v3 = v + h2 * a2
        a3 = acc(q + h2 * v2, v3)
        v4 = v + dt * a3
        a4 = acc(q + dt * v3, v4)
        q = q + h6 * (v + 2 * v2 + 2 * v3 + v4)
        v = v + h6 * (a1 + 2 * a2 + 2 * a3 + a4)
        qs[k] = q
    stepping = time.perf_counter() - t0
    origin, angle = poses_from_tree_angles(model, qs)
    note = "constraintDynamics (CONTACT_3D, proximal μ = 1e-12) + RK4"
    if baumgarte[0] or baumgarte[1]:
        note += f", Baumgarte Kp = {baumgarte[0]:g}, Kd = {baumgarte[1]:g}"
    return q_from_poses(model, mech.n, origin, angle), stepping, setup, note


PEERS = [("Exudyn", "exudyn", "exudyn", run_exudyn),
         ("MuJoCo", "mujoco", "mujoco", run_mujoco),
         ("MuJoCo", "mujoco", "mujoco", lambda *a: run_mujoco(*a, loop="rollout")),
         ("Pinocchio", "pinocchio", "pin", run_pinocchio)]


# --------------------------------------------------------------------------------------------
def _errors(mech, q, ref):
    q = q[:ref.shape[0], :ref.shape[1]]
    rmse = 1e3 * np.sqrt(np.mean((q - ref) ** 2))
    phi = np.abs(C.position_constraints(mech, q)).max()
    return rmse, phi


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--t-end", type=float, default=5.0)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; best time is shown")
    ap.add_argument("--mechanism", default=str(ROOT / "mechanisms" / "fourbar.yaml"))
    ap.add_argument("--no-mbfg-smoother", action="store_true", help="skip the smoother row")
    args = ap.parse_args(argv)
    t_end, dt = args.t_end, args.dt
    steps = int(round(t_end / dt))
    repeat = max(1, args.repeat)

    mech = mbfg.load_mechanism(args.mechanism)
    model = planar_model(mech)
    print(f"Machine: {machine_info()}\n")
    t0 = time.perf_counter()
    ref = integrate_reference(mech, t_end, dt, rtol=1e-12, atol=1e-12).q
    print(f"{Path(args.mechanism).name} from rest, g = {np.linalg.norm(model.gravity):g}, "
          f"dt = {dt * 1e3:g} ms, {t_end:g} s ({steps} steps); reference DOP853 "
          f"rtol = atol = 1e-12 ({time.perf_counter() - t0:.1f} s).  Best of {repeat} runs.\n")
    print("| code | version | model / integrator | µs/step | mbfg batch ÷ this | setup [ms] "
          "| q RMSE [mm] | max abs Φ |")
    print("|---|---|---|---|---|---|---|---|")

    base = {}

    def emit(name, ver, note, stepping, setup, q):
        us = 1e6 * stepping / steps
        base.setdefault("us", us)
        rmse, phi = _errors(mech, q, ref)
        setup_s = "—" if setup is None else f"{1e3 * setup:.1f}"
        print(f"| {name} | {ver} | {note} | {us:.1f} | {base['us'] / us:.2f} | {setup_s} | "
              f"{rmse:.2e} | {phi:.1e} |", flush=True)

    mbfg_ver = _version("mbfg") or "dev"
    rule = f"{DEFAULT_INTEGRATOR} rule (the default)"
    mbfg_runs = [("mbfg batch", f"dependent coordinates, {rule}, batch Gauss-Newton "
                  "(500-step segments)", lambda: simulate_batch(mech, t_end, dt))]
    if not args.no_mbfg_smoother:
        mbfg_runs.append(("mbfg smoother", f"dependent coordinates, {rule}, fixed-lag "
                          "smoother N_w = 2", lambda: simulate_smoother(mech, t_end, dt,
                                                                         window=2)))
    for name, note, run in mbfg_runs:
        best = None
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = run()
            elapsed = time.perf_counter() - t0
            best = elapsed if best is None else min(best, elapsed)
        emit(name, mbfg_ver, note, best, None, res.q)

    missing = set()
    for name, module, dist, run in PEERS:
        try:
            __import__(module)
        except ImportError:
            if name not in missing:
                print(f"| {name} | not installed | | | | | | |", flush=True)
            missing.add(name)
            continue
        try:
            best = None
            for _ in range(repeat):
                q, stepping, setup, note = run(mech, model, t_end, dt)
                if best is None or stepping < best[1]:
                    best = (q, stepping, setup, note)
        except Exception as exc:  # a peer's failure is a row, not a crash
            print(f"| {name} | {_version(dist)} | failed: {type(exc).__name__}: {exc} "
                  f"| | | | | |", flush=True)
            continue
        q, stepping, setup, note = best
        emit(name, _version(dist), note, stepping, setup, q)


if __name__ == "__main__":
    main()
