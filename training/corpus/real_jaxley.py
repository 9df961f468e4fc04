"""Jaxley programs as its users write them: morphologies of compartments and branches
with Hodgkin-Huxley channels, a step-current stimulus, recorded voltages, parameters made
trainable, and ``jx.integrate`` (an implicit-Euler time loop with a tree solve of the
cable equation per step) under ``value_and_grad``.

A single branched cell of growing morphology and simulated time, and a two-layer network
of such cells connected all-to-all by ionotropic synapses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import library_quiet, real_family, uses
from .registry import param_grid, sds


def _binary_tree(levels: int) -> list[int]:
    """Parent index of each branch of a binary branching tree with ``levels`` levels."""
    return [-1] + [(b - 1) // 2 for b in range(1, 2**levels - 1)]


def _cell(levels: int, ncomp: int):
    import jaxley as jx
    from jaxley.channels import HH

    cell = jx.Cell(jx.Branch(jx.Compartment(), ncomp=ncomp), parents=_binary_tree(levels))
    cell.insert(HH())
    return cell


def _simulate(module, t_max: float, grad: bool):
    """``(fn, args)`` integrating ``module`` for ``t_max`` ms; with ``grad``, the gradient
    of the mean squared voltage with respect to its trainable parameters."""
    import jaxley as jx

    params = [{k: sds(v.shape, v.dtype) for k, v in p.items()} for p in module.get_parameters()]

    def voltages(params):
        with library_quiet():
            return jx.integrate(module, params=params, delta_t=0.025, t_max=t_max)

    if grad:
        def fn(params):
            return jax.value_and_grad(lambda p: jnp.mean(voltages(p) ** 2))(params)
    else:
        def fn(params):
            return voltages(params)

    return fn, (params,)


def build_jaxley_cell(levels: int, ncomp: int, t_max: float, grad: bool):
    """A ``2**levels - 1``-branch cell with ``ncomp`` compartments per branch, HH sodium
    and potassium conductances and radii trainable, stimulated at the root."""
    with library_quiet():
        return _build_cell(levels, ncomp, t_max, grad)


def _build_cell(levels: int, ncomp: int, t_max: float, grad: bool):
    import jaxley as jx

    cell = _cell(levels, ncomp)
    root = cell.branch(0).comp(0)
    root.stimulate(jx.step_current(1.0, t_max, 0.2, 0.025, t_max), verbose=False)
    cell.branch(0).comp(0).record("v", verbose=False)
    cell.branch(2**levels - 2).comp(ncomp - 1).record("v", verbose=False)
    for name in ("HH_gNa", "HH_gK", "radius"):
        cell.make_trainable(name, verbose=False)
    return _simulate(cell, t_max, grad)


def build_jaxley_network(cells: int, t_max: float, grad: bool):
    """Two layers of ``cells`` cells each, fully connected by ``IonotropicSynapse``s whose
    conductances are trainable; the first layer is stimulated, the second recorded."""
    with library_quiet():
        return _build_network(cells, t_max, grad)


def _build_network(cells: int, t_max: float, grad: bool, levels: int = 2, ncomp: int = 2):
    import jaxley as jx
    from jaxley.synapses import IonotropicSynapse

    net = jx.Network([_cell(levels, ncomp) for _ in range(2 * cells)])
    jx.fully_connect(net.cell(range(cells)), net.cell(range(cells, 2 * cells)), IonotropicSynapse())
    net.cell(range(cells)).branch(0).comp(0).stimulate(
        jx.step_current(1.0, t_max, 0.3, 0.025, t_max), verbose=False)
    net.cell(range(cells, 2 * cells)).branch(0).comp(0).record("v", verbose=False)
    net.make_trainable("IonotropicSynapse_gS", verbose=False)
    net.make_trainable("HH_gNa", verbose=False)
    return _simulate(net, t_max, grad)


if uses("jaxley", "jaxley"):
    real_family("jaxley", "jaxley_cell",
                "Jaxley branched HH cell integrated with jx.integrate, voltages or their gradient.",
                build_jaxley_cell,
                param_grid(levels=(1, 3, 5), ncomp=(2, 8), t_max=(5.0, 50.0), grad=(False, True)))
    real_family("jaxley", "jaxley_network",
                "Jaxley two-layer network of HH cells with ionotropic synapses, gradient in gS.",
                build_jaxley_network,
                param_grid(cells=(2, 8, 16), t_max=(5.0, 50.0), grad=(False, True)))
