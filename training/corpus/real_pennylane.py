"""PennyLane programs through its JAX interface, as its users write them: a ``qnode`` on the
``default.qubit`` simulator with a template ansatz, differentiated by JAX's backprop
through the state vector (a rank-``qubits`` complex tensor that every gate contracts and
transposes).

A variational classifier's train step (angle embedding, strongly entangling layers, a
batch under ``vmap``, mean squared error, an optax Adam update) and a variational
eigensolver's energy and gradient for a transverse-field Ising ring. PennyLane's JAX
documentation turns on ``jax_enable_x64`` (the simulator asks for complex128), so the
families are float64 too.
"""

from __future__ import annotations

import numpy as np

from .real_support import library_quiet, optax_step, real_family, uses
from .registry import param_grid, sds

CLASSIFIER_BATCH = 16


def build_pennylane_classifier_step(qubits: int, layers: int):
    """One Adam step of a ``qubits``-wire classifier of ``layers`` strongly entangling
    layers on a batch of ``CLASSIFIER_BATCH`` feature vectors."""
    with library_quiet():
        import jax
        import jax.numpy as jnp
        import optax
        import pennylane as qml

        device = qml.device("default.qubit", wires=qubits)

        @qml.qnode(device, interface="jax")
        def circuit(weights, features):
            qml.AngleEmbedding(features, wires=range(qubits))
            qml.StronglyEntanglingLayers(weights, wires=range(qubits))
            return qml.expval(qml.PauliZ(0))

    def loss(weights, features, labels):
        with library_quiet():
            outputs = jax.vmap(circuit, in_axes=(None, 0))(weights, features)
        return jnp.mean((outputs - labels) ** 2)

    optimizer = optax.adam(1e-2)
    weights = sds((layers, qubits, 3), np.float64)
    with jax.enable_x64(True):  # the family is float64: so is Adam's state
        opt_state = jax.eval_shape(optimizer.init, weights)
    return optax_step(loss, optimizer), (weights, opt_state, sds((CLASSIFIER_BATCH, qubits), np.float64),
                                         sds((CLASSIFIER_BATCH,), np.float64))


def build_pennylane_vqe(qubits: int, layers: int):
    """The energy of a ``qubits``-site transverse-field Ising ring under a ``layers``-layer
    RY entangler ansatz, and its gradient in the angles."""
    with library_quiet():
        import jax
        import pennylane as qml

        device = qml.device("default.qubit", wires=qubits)
        couplings = [qml.PauliZ(i) @ qml.PauliZ((i + 1) % qubits) for i in range(qubits)]
        fields = [qml.PauliX(i) for i in range(qubits)]
        hamiltonian = qml.Hamiltonian([1.0] * qubits + [0.5] * qubits, couplings + fields)

        @qml.qnode(device, interface="jax")
        def energy(angles):
            qml.BasicEntanglerLayers(angles, wires=range(qubits), rotation=qml.RY)
            return qml.expval(hamiltonian)

    def energy_and_gradient(angles):
        with library_quiet():
            return jax.value_and_grad(energy)(angles)

    return energy_and_gradient, (sds((layers, qubits), np.float64),)


if uses("pennylane", "pennylane"):
    real_family("pennylane", "pennylane_classifier_step",
                "PennyLane variational classifier (default.qubit, JAX backprop): vmapped batch, "
                "strongly entangling layers, Adam step.",
                build_pennylane_classifier_step,
                param_grid(qubits=(4, 6, 8), layers=(2, 6)), x64=True)
    real_family("pennylane", "pennylane_vqe",
                "PennyLane VQE on a transverse-field Ising ring (default.qubit, JAX backprop): "
                "energy and gradient.",
                build_pennylane_vqe,
                param_grid(qubits=(4, 6, 8), layers=(2, 6)), x64=True)
