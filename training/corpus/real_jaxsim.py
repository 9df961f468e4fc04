"""JaxSim programs as its users write them: a floating-base multibody model built from a
model description, then either simulated (``js.model.step`` in a ``scan``, ``vmap``-ed over
a batch of initial states, optionally differentiated with respect to the joint torques, as
in differentiable-physics control) or queried for its rigid-body dynamics (mass matrix,
bias forces and Jacobians for a computed-torque controller, inverse dynamics under
``grad``, articulated-body forward dynamics).

The robots are legged: a box torso with ``legs`` chains of ``segments`` box links, each
joint revolute. JaxSim reads SDF without any system tools (URDF needs Gazebo's converter),
so the description is written as SDF here. JaxSim turns on ``jax_enable_x64`` when imported,
so its users' programs are float64 and the families are too.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import library_quiet, real_family, uses
from .registry import param_grid, sds

# Robots as (legs, segments per leg): 2, 8 and 18 joints.
ROBOTS = ((2, 1), (4, 2), (6, 3))
STEPS = 10  # simulated steps per rollout (a scan: its length does not change the program)
BATCH = 4  # initial states per rollout


def _box_link(name: str, mass: float, size: tuple[float, float, float],
              at: tuple[float, float, float], centre_z: float = 0.0) -> str:
    """An SDF link at ``at`` (model frame) whose box and inertia sit ``centre_z`` below
    its frame, so a leg segment hangs from its joint."""
    x, y, z = size
    inertia = (f"<ixx>{mass * (y * y + z * z) / 12}</ixx><ixy>0</ixy><ixz>0</ixz>"
               f"<iyy>{mass * (x * x + z * z) / 12}</iyy><iyz>0</iyz>"
               f"<izz>{mass * (x * x + y * y) / 12}</izz>")
    centre = f"<pose>0 0 {centre_z} 0 0 0</pose>"
    return (f'<link name="{name}"><pose>{at[0]} {at[1]} {at[2]} 0 0 0</pose>'
            f"<inertial>{centre}<mass>{mass}</mass><inertia>{inertia}</inertia></inertial>"
            f'<collision name="{name}_box">{centre}<geometry><box><size>{x} {y} {z}</size>'
            "</box></geometry></collision></link>")


def _revolute(name: str, parent: str, child: str, axis: str) -> str:
    limit = "<lower>-1.5</lower><upper>1.5</upper><effort>50</effort><velocity>10</velocity>"
    return (f'<joint name="{name}" type="revolute"><parent>{parent}</parent>'
            f"<child>{child}</child><axis><xyz>{axis}</xyz><limit>{limit}</limit></axis></joint>")


def legged_sdf(legs: int, segments: int) -> str:
    """An SDF model: a torso with ``legs`` legs spaced around it, each ``segments`` links
    long, hip joints about x and knees alternating y and x."""
    parts = [_box_link("torso", 5.0, (0.6, 0.3, 0.1), (0.0, 0.0, 0.0))]
    for leg in range(legs):
        angle = 2 * math.pi * leg / legs
        hip = (round(0.3 * math.cos(angle), 4), round(0.15 * math.sin(angle), 4))
        parent = "torso"
        for s in range(segments):
            name = f"leg{leg}_link{s}"
            parts.append(_box_link(name, 0.5, (0.05, 0.05, 0.2), (*hip, -0.05 - 0.2 * s), -0.1))
            parts.append(_revolute(f"leg{leg}_joint{s}", parent, name, "0 1 0" if s % 2 else "1 0 0"))
            parent = name
    return '<sdf version="1.7"><model name="legged">' + "".join(parts) + "</model></sdf>"


def _jaxsim():
    """``jaxsim.api``, imported without leaving ``jax_enable_x64`` switched on for the rest
    of the process (JaxSim turns it on when first imported; the family asks for x64 where
    it is measured, and other programs of the same process must not change dtype)."""
    enabled = jax.config.jax_enable_x64
    import jaxsim.api as js

    jax.config.update("jax_enable_x64", enabled)
    return js


def _model(js, legs: int, segments: int, contact: str = "soft",
           integrator: str = "SemiImplicitEuler"):
    """The legged robot as a ``JaxSimModel`` (``js``: `_jaxsim`'s module)."""
    import jaxsim.rbda.contacts as contacts
    from jaxsim.api.model import IntegratorType

    with jax.enable_x64(True):  # as JaxSim builds it for its users: float64 parameters
        contact_model = {"soft": contacts.SoftContacts, "rigid": contacts.RigidContacts,
                         "relaxed_rigid": contacts.RelaxedRigidContacts}[contact].build()
        return js.model.JaxSimModel.build_from_model_description(
            legged_sdf(legs, segments), is_urdf=False, time_step=0.001,
            contact_model=contact_model, integrator=IntegratorType[integrator])


def build_jaxsim_rollout(legs: int, segments: int, contact: str, integrator: str, grad: bool):
    """``BATCH`` rollouts of ``STEPS`` steps from given joint positions under given joint
    torques, scored by the torso height and final joint excursion; with ``grad``, the
    score and its gradient in the torques (rigid contacts solve a QP in a ``while_loop``,
    which reverse mode cannot differentiate, so gradients use soft or relaxed-rigid ones)."""
    with library_quiet():
        js = _jaxsim()
        model = _model(js, legs, segments, contact, integrator)
    dofs = model.dofs()

    def score(q0, torques):
        data = js.data.JaxSimModelData.build(
            model=model, base_position=jnp.array([0.0, 0.0, 1.0]), joint_positions=q0)

        def step(data, tau):
            data = js.model.step(model=model, data=data, joint_force_references=tau)
            return data, data.base_position[2]

        final, heights = jax.lax.scan(step, data, torques)
        return jnp.sum(heights) + jnp.sum(final.joint_positions ** 2)

    def batch_score(q0, torques):
        return jax.vmap(score)(q0, torques).mean()

    fn = jax.value_and_grad(batch_score, argnums=1) if grad else batch_score
    return fn, (sds((BATCH, dofs), np.float64), sds((BATCH, STEPS, dofs), np.float64))


def build_jaxsim_dynamics(legs: int, segments: int, task: str, batch: int):
    """Rigid-body dynamics over a batch of ``batch`` joint states: ``computed_torque``
    (mass matrix, bias forces and the free-floating Jacobian), ``inverse_dynamics_grad``
    (the gradient of squared inverse-dynamics torques in the joint positions) or
    ``forward_dynamics`` (articulated-body accelerations under given torques)."""
    with library_quiet():
        js = _jaxsim()
        model = _model(js, legs, segments)
    dofs = model.dofs()

    def state(q, qd):
        return js.data.JaxSimModelData.build(model=model, joint_positions=q, joint_velocities=qd)

    def computed_torque(q, qd, qdd):
        data = state(q, qd)
        mass = js.model.free_floating_mass_matrix(model, data)
        bias = js.model.free_floating_bias_forces(model, data)
        jacobian = js.model.generalized_free_floating_jacobian(model, data)
        return mass[6:, 6:] @ qdd + bias[6:], jnp.sum(jacobian ** 2)

    def torque_cost(q, qd, qdd):
        _, tau = js.model.inverse_dynamics(model, state(q, qd), joint_accelerations=qdd)
        return jnp.sum(tau ** 2)

    def accelerations(q, qd, tau):
        _, qdd = js.model.forward_dynamics_aba(model, state(q, qd), joint_forces=tau)
        return qdd

    if task == "computed_torque":
        fn = jax.vmap(computed_torque)
    elif task == "inverse_dynamics_grad":
        fn = jax.grad(lambda q, qd, qdd: jax.vmap(torque_cost)(q, qd, qdd).mean())
    elif task == "forward_dynamics":
        fn = jax.vmap(accelerations)
    else:
        raise ValueError(f"unknown jaxsim dynamics task {task!r}")
    return fn, tuple(sds((batch, dofs), np.float64) for _ in range(3))


def _robot(point: dict) -> bool:
    return (point["legs"], point["segments"]) in ROBOTS


if uses("jaxsim", "jaxsim"):
    real_family("jaxsim", "jaxsim_rollout",
                "JaxSim legged robot: vmapped scan of js.model.step, by contact model and "
                "integrator, or its gradient in the torques.",
                build_jaxsim_rollout,
                param_grid(_robot, legs=(2, 4, 6), segments=(1, 2, 3),
                           contact=("soft", "relaxed_rigid", "rigid"),
                           integrator=("SemiImplicitEuler", "RungeKutta4"), grad=(False,))
                + param_grid(lambda p: _robot(p) and p["legs"] < 6, legs=(2, 4), segments=(1, 2),
                             contact=("soft", "relaxed_rigid"), integrator=("SemiImplicitEuler",),
                             grad=(True,)),
                x64=True)
    real_family("jaxsim", "jaxsim_dynamics",
                "JaxSim legged robot dynamics over a batch of states: computed torque, "
                "inverse-dynamics gradient, articulated-body forward dynamics.",
                build_jaxsim_dynamics,
                param_grid(_robot, legs=(2, 4, 6), segments=(1, 2, 3),
                           task=("computed_torque", "inverse_dynamics_grad", "forward_dynamics"),
                           batch=(64,)),
                x64=True)
