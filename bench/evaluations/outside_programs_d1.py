"""A fourth suite of outside programs, first part: built with public JAX libraries that no
corpus family, other bench or training row uses, as their users write them. As in
`bench/evaluations/outside_programs_c.py`, each builder returns a new function and abstract
arguments (parameters, optimizer and simulator states, keys and data are arguments, not
captured constants); `OUTSIDE_FAMILIES` registers one family per builder (prefix
`outside_d1`), its grid the sizes measured.

- e3nn-jax (flax linen modules): a NequIP-style energy-and-forces train step (forces by grad
  w.r.t. positions inside the loss), batched inference of a point-cloud classifier, a dipole
  train step with tensor squares and S2-grid activations.
- dynamiqs: a driven lossy Kerr cavity batched over drives (mesolve), a GRAPE step on a
  transmon X gate (grad through sesolve with piecewise-constant drives), a two-photon-loss cat
  qubit (Rouchon fixed-step mesolve), Jaynes-Cummings populations vmapped over two parameters.
- qujax: a VQE Adam step on a hardware-efficient ansatz, a hybrid MLP-encoder circuit classifier
  step, a noisy VQE energy and gradient on density tensors (depolarising Kraus channels), QAOA
  MaxCut multi-starts with a scanned repeated layer and sampled expectations.
- s2fft (method "jax", MW sampling): power spectra and beam smoothing of map batches,
  Kaiser-Squires mass maps from shear (precomputed-kernel spin-2 transforms, the kernels
  arguments), a masked-sky reconstruction (Adam in scan through the inverse transform),
  directional filtering through an inverse Wigner transform on SO(3).
- jaxkan (flax nnx; parameters and the rest of the state split, the rest's PRNG keys as raw
  data): spline-KAN regression steps, a physics-informed Chebyshev KAN on Burgers' equation with
  residual-based attention, spline grid extension (least-squares refit), an RGAKAN
  physics-informed Helmholtz step.

optax supplies optimizers. dynamiqs solves through diffrax, whose Equinox runtime checks put
host callbacks in error branches (none with EQX_ON_ERROR=nan, as the TPU benches set). Left out:
e3nn-jax's experimental point convolution, transformer and voxel modules (they import dm-haiku,
not installed), s2fft's healpy, ssht and CUDA methods (host or GPU code).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from _outside_common import KEY, apply_grads, c64, f32, i32, mlp, mlp_init, shapes, train

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders

# ------------------------------------------------------------------------------------------ e3nn


def _e3nn_interaction(hidden: str, lmax: int, radial: int, cutoff: float, avg_neighbors: float):
    """A flax module: one NequIP-style interaction (spherical harmonics of the edge vectors,
    tensor product with the sender features weighted by a radial MLP, scatter to receivers,
    self-connection, gate)."""
    import e3nn_jax as e3nn
    import flax.linen as nn

    hidden = e3nn.Irreps(hidden)
    gated = hidden.filter(drop="0e")
    gate_in = e3nn.Irreps(f"{hidden.filter(keep='0e').num_irreps + gated.num_irreps}x0e") + gated

    class Interaction(nn.Module):
        @nn.compact
        def __call__(self, nodes, vectors, senders, receivers):
            r = jnp.sqrt(jnp.sum(vectors.array ** 2, -1) + 1e-9)
            basis = e3nn.bessel(r, radial, x_max=cutoff) * e3nn.soft_envelope(r, x_max=cutoff)[:, None]
            sh = e3nn.spherical_harmonics(list(range(1, lmax + 1)), vectors, normalize=True)
            sent = nodes[senders]
            messages = e3nn.concatenate([sent.filter(gate_in),
                                         e3nn.tensor_product(sent, sh, filter_ir_out=gate_in)]).regroup()
            weights = e3nn.flax.MultiLayerPerceptron((32, messages.irreps.num_irreps), jax.nn.silu,
                                                     output_activation=False)(basis)
            messages = messages * weights
            summed = e3nn.scatter_sum(messages, dst=receivers, output_size=nodes.shape[0])
            linear = partial(e3nn.flax.Linear, gate_in, force_irreps_out=True)
            return e3nn.gate(linear()(summed / np.sqrt(avg_neighbors)) + linear()(nodes))

    return Interaction


def e3nn_nequip_force_step(molecules: int, atoms: int, neighbors: int, lmax: int, mul: int,
                           layers: int, species: int = 4):
    """Force-field train step of a NequIP-style equivariant network on energies and forces (e3nn-jax)."""
    import e3nn_jax as e3nn
    import flax.linen as nn
    import optax

    irreps = " + ".join(f"{mul}x{ell}{'e' if ell % 2 == 0 else 'o'}" for ell in range(lmax + 1))
    blocks = [_e3nn_interaction(irreps, lmax, 8, 5.0, float(neighbors)) for _ in range(layers)]

    class Potential(nn.Module):
        @nn.compact
        def __call__(self, positions, kinds, senders, receivers):
            nodes = e3nn.IrrepsArray(f"{species}x0e", jax.nn.one_hot(kinds, species))
            nodes = e3nn.flax.Linear(f"{mul}x0e")(nodes)
            vectors = e3nn.IrrepsArray("1o", positions[receivers] - positions[senders])
            for block in blocks:
                nodes = block()(nodes, vectors, senders, receivers)
            return e3nn.flax.Linear("0e")(nodes).array[:, 0]

    model = Potential()
    n, edges = molecules * atoms, molecules * atoms * neighbors

    def loss_fn(params, positions, kinds, senders, receivers, graph, energy, forces):
        def total_energy(pos):
            atomic = model.apply(params, pos, kinds, senders, receivers)
            return jax.ops.segment_sum(atomic, graph, molecules).sum(), atomic

        (_, atomic), grad_pos = jax.value_and_grad(total_energy, has_aux=True)(positions)
        predicted = jax.ops.segment_sum(atomic, graph, molecules)
        return jnp.mean((predicted - energy) ** 2) + 10.0 * jnp.mean((-grad_pos - forces) ** 2)

    params = shapes(model.init, jnp.zeros((n, 3)), jnp.zeros(n, jnp.int32), jnp.zeros(edges, jnp.int32),
                    jnp.zeros(edges, jnp.int32))
    step, state = train(optax.adam(1e-3), loss_fn, params)
    return step, (*state, f32(n, 3), i32(n), i32(edges), i32(edges), i32(n), f32(molecules), f32(n, 3))

def e3nn_pointcloud_classifier(batch: int, points: int, lmax: int, mul: int, layers: int, classes: int = 8):
    """Batched inference of an equivariant point-cloud classifier on fully connected clouds (e3nn-jax)."""
    import e3nn_jax as e3nn
    import flax.linen as nn

    irreps = " + ".join(f"{mul}x{ell}{'e' if ell % 2 == 0 else 'o'}" for ell in range(lmax + 1))
    blocks = [_e3nn_interaction(irreps, lmax, 10, 2.5, float(points - 1)) for _ in range(layers)]
    senders, receivers = np.nonzero(~np.eye(points, dtype=bool))  # every ordered pair of points

    class Classifier(nn.Module):
        @nn.compact
        def __call__(self, cloud):
            cloud = cloud - cloud.mean(0)
            vectors = e3nn.IrrepsArray("1o", cloud[receivers] - cloud[senders])
            nodes = e3nn.flax.Linear(f"{mul}x0e")(e3nn.IrrepsArray("0e", jnp.ones((points, 1))))
            for block in blocks:
                nodes = block()(nodes, vectors, senders, receivers)
            pooled = e3nn.mean(nodes.filter(keep="0e"), axis=0)
            return e3nn.flax.MultiLayerPerceptron((64, classes), jax.nn.gelu, output_activation=False)(pooled)

    model = Classifier()

    def predict(params, clouds):
        logits = jax.vmap(lambda c: model.apply(params, c).array)(clouds)
        return jax.nn.softmax(logits), jnp.argmax(logits, -1)

    return predict, (shapes(model.init, jnp.zeros((points, 3))), f32(batch, points, 3))


def e3nn_s2act_dipole_step(molecules: int, atoms: int, neighbors: int, lmax: int, mul: int, res: int = 16):
    """Dipole train step of an equivariant network with tensor squares and S2-grid activations (e3nn-jax)."""
    import e3nn_jax as e3nn
    import flax.linen as nn
    import optax

    irreps = e3nn.Irreps(" + ".join(f"{mul}x{ell}{'e' if ell % 2 == 0 else 'o'}" for ell in range(lmax + 1)))
    sh_irreps = e3nn.s2_irreps(lmax)
    n, edges = molecules * atoms, molecules * atoms * neighbors

    class DipoleNet(nn.Module):
        @nn.compact
        def __call__(self, positions, kinds, senders, receivers):
            vectors = e3nn.IrrepsArray("1o", positions[receivers] - positions[senders])
            r = jnp.sqrt(jnp.sum(vectors.array ** 2, -1) + 1e-9)
            radial = e3nn.flax.MultiLayerPerceptron((32, mul), jax.nn.silu)(
                e3nn.bessel(r, 8, x_max=4.0) * e3nn.soft_envelope(r, x_max=4.0)[:, None])
            sh = e3nn.spherical_harmonics(irreps, vectors, normalize=True)
            edge = e3nn.scatter_sum(sh * radial[:, :1], dst=receivers, output_size=n)
            nodes = e3nn.concatenate([e3nn.IrrepsArray("4x0e", jax.nn.one_hot(kinds, 4)), edge])
            for _ in range(2):
                nodes = e3nn.flax.Linear(irreps, force_irreps_out=True)(e3nn.tensor_square(nodes).regroup())
                # pointwise nonlinearity on the sphere: per channel, sample, activate, project back
                channels = nodes.mul_to_axis(mul)
                grid = e3nn.to_s2grid(channels.filter(keep=sh_irreps), res, 2 * res - 1, quadrature="soft",
                                      p_val=1, p_arg=-1)
                back = e3nn.from_s2grid(grid.apply(jax.nn.silu), sh_irreps)
                nodes = e3nn.flax.Linear(irreps)(back.axis_to_mul()) + nodes
            out = e3nn.flax.Linear("0e + 1o")(nodes)
            charges, local = out.filter(keep="0e").array[:, 0], out.filter(keep="1o").array
            return charges, local

    model = DipoleNet()

    def loss_fn(params, positions, kinds, senders, receivers, graph, dipoles):
        charges, local = model.apply(params, positions, kinds, senders, receivers)
        charges = charges - (jax.ops.segment_sum(charges, graph, molecules) / atoms)[graph]  # neutral
        predicted = jax.ops.segment_sum(charges[:, None] * positions + local, graph, molecules)
        return jnp.mean((predicted - dipoles) ** 2)

    params = shapes(model.init, jnp.zeros((n, 3)), jnp.zeros(n, jnp.int32), jnp.zeros(edges, jnp.int32),
                    jnp.zeros(edges, jnp.int32))
    step, state = train(optax.adamw(1e-3, weight_decay=1e-5), loss_fn, params)
    return step, (*state, f32(n, 3), i32(n), i32(edges), i32(edges), i32(n), f32(molecules, 3))

# -------------------------------------------------------------------------------------- dynamiqs


def dynamiqs_kerr_cavity_batch(n: int, batch: int, tsave: int, t_end: float = 10.0):
    """Lindblad evolution of a driven lossy Kerr cavity, batched over drive amplitudes (dynamiqs)."""
    import dynamiqs as dq

    a = dq.destroy(n)
    kerr = a.dag() @ a.dag() @ a @ a
    observables = [a.dag() @ a, dq.parity(n), a]

    def simulate(drives, kerr_rate, kappa, psi0):
        H = -0.5 * kerr_rate * kerr + drives[:, None, None] * (a + a.dag())  # batched Hamiltonian
        result = dq.mesolve(H, [jnp.sqrt(kappa) * a], psi0, jnp.linspace(0.0, t_end, tsave),
                            exp_ops=observables, progress_meter=False)
        return result.expects, result.final_state.to_jax()

    return simulate, (f32(batch), f32(), f32(), c64(n, 1))


def dynamiqs_transmon_grape_step(levels: int, segments: int, duration: float = 20.0):
    """Optimal-control (GRAPE) step: Adam on piecewise-constant drives of a transmon X gate (dynamiqs)."""
    import dynamiqs as dq
    import optax

    a = dq.destroy(levels)
    anharmonic = -0.2 * np.pi * a.dag() @ a.dag() @ a @ a
    quadratures = [a + a.dag(), 1j * (a.dag() - a)]
    computational = dq.basis(levels, [0, 1])  # both qubit states, a batch of kets
    target = dq.basis(levels, [1, 0])  # X gate: |0> -> |1>, |1> -> |0>
    times = jnp.linspace(0.0, duration, segments + 1)
    opt = optax.adam(2e-2)

    def infidelity(pulses):
        H = anharmonic
        for i, op in enumerate(quadratures):
            H = H + dq.pwc(times, pulses[i], op)
        final = dq.sesolve(H, computational, jnp.array([0.0, duration]), save_states=False,
                           progress_meter=False).final_state
        overlaps = dq.braket(target, final)  # <target_k|psi_k(T)>
        leak = jnp.mean(jnp.abs(pulses[:, 1:] - pulses[:, :-1]) ** 2)  # smooth pulses
        return 1.0 - jnp.abs(jnp.mean(overlaps)) ** 2 + 1e-2 * leak

    def step(pulses, opt_state):
        return apply_grads(opt, infidelity, pulses, opt_state)

    pulses = f32(2, segments)
    return step, (pulses, jax.eval_shape(opt.init, pulses))


def dynamiqs_cat_qubit_rouchon(n: int, tsave: int, dt: float, t_end: float = 4.0):
    """Two-photon-dissipation cat qubit under a Zeno drive, Rouchon fixed-step Lindblad solve (dynamiqs)."""
    import dynamiqs as dq

    a = dq.destroy(n)
    parity = dq.parity(n)
    x_cat = a + a.dag()

    def simulate(alpha, kappa2, kappa1, zeno, psi0):
        jumps = [jnp.sqrt(kappa2) * (a @ a - alpha**2 * dq.eye(n)), jnp.sqrt(kappa1) * a]
        H = zeno * (a + a.dag()) + 0.05 * a.dag() @ a
        result = dq.mesolve(H, jumps, psi0, jnp.linspace(0.0, t_end, tsave), exp_ops=[parity, x_cat],
                            method=dq.method.Rouchon1(dt=dt), progress_meter=False)
        return result.expects, dq.purity(result.final_state)

    return simulate, (f32(), f32(), f32(), f32(), c64(n, n))


def dynamiqs_jaynes_cummings_sweep(n: int, detunings: int, couplings: int, tsave: int, t_end: float = 30.0):
    """Vacuum Rabi oscillations of a qubit-cavity system, vmapped over detuning and coupling (dynamiqs)."""
    import dynamiqs as dq

    a = dq.tensor(dq.destroy(n), dq.eye(2))
    sm = dq.tensor(dq.eye(n), dq.sigmam())
    excited = dq.tensor(dq.eye(n), dq.proj(dq.basis(2, 0)))

    def populations(detuning, g, psi0):
        H = detuning * a.dag() @ a + g * (a.dag() @ sm + a @ sm.dag())
        psi0 = dq.asqarray(psi0, dims=(n, 2))
        result = dq.sesolve(H, psi0, jnp.linspace(0.0, t_end, tsave), exp_ops=[excited, a.dag() @ a],
                            save_states=False, progress_meter=False)
        return result.expects.real

    sweep = jax.vmap(jax.vmap(populations, in_axes=(None, 0, None)), in_axes=(0, None, None))
    return sweep, (f32(detunings), f32(couplings), c64(2 * n, 1))

# ----------------------------------------------------------------------------------------- qujax


def _hardware_efficient(qubits: int, layers: int, offset: int = 0):
    """(gates, qubit indices, parameter indices) of a hardware-efficient ansatz: Ry and Rz on every
    qubit, then a CZ ladder, per layer; parameters numbered from `offset`."""
    gates, wires, params = [], [], []
    k = offset
    for _ in range(layers):
        for q in range(qubits):
            gates += ["Ry", "Rz"]
            wires += [[q], [q]]
            params += [[k], [k + 1]]
            k += 2
        for q in range(qubits - 1):
            gates.append("CZ")
            wires.append([q, q + 1])
            params.append([])
    return gates, wires, params


def _heisenberg(qubits: int, field: float = 0.5):
    """(Paulis, qubits, coefficients) of an open Heisenberg chain in a transverse field."""
    paulis, wires, coefs = [], [], []
    for q in range(qubits - 1):
        for p in "XYZ":
            paulis.append([p, p])
            wires.append([q, q + 1])
            coefs.append(1.0)
    for q in range(qubits):
        paulis.append(["X"])
        wires.append([q])
        coefs.append(field)
    return paulis, wires, coefs


def qujax_vqe_step(qubits: int, layers: int):
    """VQE step: Adam on a hardware-efficient ansatz for a Heisenberg chain energy (qujax)."""
    import optax
    import qujax

    circuit = qujax.get_params_to_statetensor_func(*_hardware_efficient(qubits, layers), qubits)
    energy_of = qujax.get_statetensor_to_expectation_func(*_heisenberg(qubits))
    opt = optax.adam(5e-2)

    def step(theta, opt_state):
        return apply_grads(opt, lambda t: energy_of(circuit(t)), theta, opt_state)

    theta = f32(2 * qubits * layers)
    return step, (theta, jax.eval_shape(opt.init, theta))


def qujax_reuploading_classifier_step(qubits: int, layers: int, features: int, batch: int):
    """Train step of a hybrid classifier: an MLP encoder feeding circuit angles, vmapped over data (qujax)."""
    import optax
    import qujax

    gates, wires, params = _hardware_efficient(qubits, layers)
    circuit = qujax.get_params_to_statetensor_func(gates, wires, params, qubits)
    readout = qujax.get_statetensor_to_expectation_func([["Z"]], [[0]], [1.0])
    n_angles = 2 * qubits * layers
    opt = optax.adam(1e-2)

    def loss_fn(weights, x, y):
        def predict(sample):
            # re-upload the encoded features in every layer, with trainable per-gate scales and offsets
            encoded = jnp.tile(mlp(weights["encoder"], sample), layers)
            return readout(circuit(weights["scale"] * encoded + weights["bias"]))

        logits = 3.0 * jax.vmap(predict)(x)
        return optax.sigmoid_binary_cross_entropy(logits, y).mean()

    weights = shapes(lambda k: {"encoder": mlp_init(k, (features, 32, 2 * qubits)),
                                "scale": jnp.ones(n_angles), "bias": jnp.zeros(n_angles)})
    step, state = train(opt, loss_fn, weights)
    return step, (*state, f32(batch, features), f32(batch))


def qujax_noisy_vqe_density(qubits: int, layers: int):
    """Energy and gradient of an ansatz with depolarising noise after each layer, density tensors (qujax)."""
    import qujax

    gates, wires, params = _hardware_efficient(qubits, layers)
    n_theta = 2 * qubits * layers
    per_layer = 3 * qubits - 1
    pauli = [jnp.eye(2), qujax.gates.X, qujax.gates.Y, qujax.gates.Z]
    depolarise = [lambda p: jnp.sqrt(1 - 0.75 * p) * pauli[0]] + [
        (lambda m: lambda p: jnp.sqrt(p / 4) * m)(m) for m in pauli[1:]]
    ops, ws, ps = [], [], []
    for layer in range(layers):  # the circuit's gates, then one depolarising channel per qubit
        block = slice(layer * per_layer, (layer + 1) * per_layer)
        ops += gates[block]
        ws += wires[block]
        ps += params[block]
        for q in range(qubits):
            ops.append(depolarise)
            ws.append([q])
            ps.append([[n_theta]] * 4)  # the noise strength is the last parameter
    circuit = qujax.get_params_to_densitytensor_func(ops, ws, ps, qubits)
    energy_of = qujax.get_densitytensor_to_expectation_func(*_heisenberg(qubits))

    def energy_and_grad(theta, noise):
        return jax.value_and_grad(lambda t: energy_of(circuit(jnp.append(t, noise))))(theta)

    return energy_and_grad, (f32(n_theta), f32())


def qujax_qaoa_multistart(qubits: int, layers: int, starts: int, shots: int, seed: int = 0):
    """QAOA MaxCut: a scanned repeated layer, energy gradients and sampled cuts over many starts (qujax)."""
    import qujax

    rng = np.random.default_rng(seed)
    edges = [(q, (q + 1) % qubits) for q in range(qubits)]  # a ring plus random chords
    edges += [tuple(rng.choice(qubits, 2, replace=False)) for _ in range(qubits // 2)]
    layer = qujax.get_params_to_statetensor_func(
        ["ZZPhase"] * len(edges) + ["Rx"] * qubits,
        [list(e) for e in edges] + [[q] for q in range(qubits)],
        [[0]] * len(edges) + [[1]] * qubits, qubits)
    prepare = qujax.get_params_to_statetensor_func(["H"] * qubits, [[q] for q in range(qubits)],
                                                    [[] for _ in range(qubits)], qubits)
    circuit = qujax.repeat_circuit(layer, 2)
    cut = ([["Z", "Z"]] * len(edges), [list(e) for e in edges], [0.5] * len(edges))
    exact = qujax.get_statetensor_to_expectation_func(*cut)
    sampled = qujax.get_statetensor_to_sampled_expectation_func(*cut)

    def run(angles, key):
        def one(theta, k):
            energy, grad = jax.value_and_grad(lambda t: exact(circuit(t, prepare())))(theta)
            state = circuit(theta, prepare())
            k_energy, k_cuts = jax.random.split(k)
            return energy, grad, sampled(state, k_energy, shots), qujax.sample_integers(k_cuts, state, 16)

        return jax.vmap(one)(angles, jax.random.split(key, angles.shape[0]))

    return run, (f32(starts, 2 * layers), KEY)

# ----------------------------------------------------------------------------------------- s2fft


def _ell(L: int) -> np.ndarray:
    """Degree l of each entry of a [L, 2L-1] harmonic array (entries with |m| > l are zero)."""
    return np.broadcast_to(np.arange(L)[:, None], (L, 2 * L - 1)).astype(np.float32)


def s2fft_beam_smoothing_spectra(L: int, batch: int):
    """Power spectra and Gaussian-beam smoothing of a batch of real sky maps, MW sampling (s2fft)."""
    import s2fft

    ell = _ell(L)

    def smooth(maps, fwhm):
        def one(f):
            flm = s2fft.forward(f, L, method="jax", reality=True)
            spectrum = jnp.sum(jnp.abs(flm) ** 2, axis=1) / (2 * np.arange(L) + 1)
            sigma = fwhm / np.sqrt(8 * np.log(2))
            beam = jnp.exp(-0.5 * ell * (ell + 1) * sigma**2)
            return s2fft.inverse(flm * beam, L, method="jax", reality=True).real, spectrum

        return jax.vmap(one)(maps)

    return smooth, (f32(batch, L, 2 * L - 1), f32())


def s2fft_spin2_mass_map(L: int, batch: int):
    """Spherical Kaiser-Squires mass maps from shear with precomputed-kernel spin-2 transforms (s2fft)."""
    from s2fft.precompute_transforms import construct
    from s2fft.precompute_transforms import spherical as pre

    ell = _ell(L)
    # E-mode shear to convergence: kappa_lm = -sqrt(l(l+1) / ((l+2)(l-1))) E_lm, zero for l < 2
    ratio = np.where(ell >= 2, -np.sqrt(ell * (ell + 1) / np.maximum((ell + 2) * (ell - 1), 1)), 0.0)

    def mass_map(shear, kernel_spin2, kernel_inverse):
        def one(gamma):
            glm = pre.forward(gamma, L, spin=2, kernel=kernel_spin2, method="jax")
            # spin-2 coefficients: E = -(g_2 + g_-2)/2; B is its imaginary partner
            glm_minus = (-1.0) ** jnp.abs(jnp.arange(-L + 1, L)) * jnp.conj(glm[:, ::-1])
            e_lm, b_lm = -(glm + glm_minus) / 2, 1j * (glm - glm_minus) / 2
            kappa_e = pre.inverse(ratio * e_lm, L, spin=0, kernel=kernel_inverse, method="jax")
            kappa_b = pre.inverse(ratio * b_lm, L, spin=0, kernel=kernel_inverse, method="jax")
            return kappa_e.real, kappa_b.real

        return jax.vmap(one)(shear)

    # the kernels are arguments; only their shapes are taken (the jax constructor cannot be traced)
    kernels = [construct.spin_spherical_kernel(L, spin=spin, forward=forward).shape
               for spin, forward in ((2, True), (0, False))]
    return mass_map, (c64(batch, L, 2 * L - 1), *(f32(*shape) for shape in kernels))


def s2fft_wiener_map_fit(L: int, steps: int):
    """Masked-sky map reconstruction: Adam in scan on harmonic coefficients through the inverse (s2fft)."""
    import optax
    import s2fft

    opt = optax.adam(1e-2)

    def fit(coeffs, data, mask, spectrum):
        def loss_fn(c):
            flm = jax.lax.complex(c[0], c[1])
            sky = s2fft.inverse(flm, L, method="jax", reality=True).real
            prior = jnp.sum(jnp.abs(flm) ** 2 / (spectrum[:, None] + 1e-6))
            return jnp.sum(mask * (sky - data) ** 2) + 1e-3 * prior

        def body(carry, _):
            c, state = carry
            c, state, loss = apply_grads(opt, loss_fn, c, state)
            return (c, state), loss

        (coeffs, _), losses = jax.lax.scan(body, (coeffs, opt.init(coeffs)), None, length=steps)
        return coeffs, losses

    return fit, (f32(2, L, 2 * L - 1), f32(L, 2 * L - 1), f32(L, 2 * L - 1), f32(L))


def s2fft_directional_filtering(L: int, N: int, batch: int):
    """Directional correlation of maps with a filter through an inverse Wigner transform on SO(3) (s2fft)."""
    import s2fft

    ell = _ell(L)
    norm = 8 * np.pi**2 / (2 * ell + 1)

    def filter_maps(maps, filter_lm):
        def one(f):
            flm = s2fft.forward(f, L, method="jax", reality=True)
            n = jnp.arange(-N + 1, N)
            # F_lmn = 8 pi^2 / (2l+1) f_lm conj(psi_ln): the filter's n-th azimuthal modes, per direction
            psi_ln = jnp.conj(filter_lm[:, L - 1 + n]).T[:, :, None]
            flmn = norm[None] * flm[None] * psi_ln
            response = s2fft.wigner.inverse(flmn, L, N, method="jax")
            return jnp.max(jnp.abs(response), axis=0), jnp.argmax(jnp.abs(response), axis=0)

        return jax.vmap(one)(maps)

    return filter_maps, (f32(batch, L, 2 * L - 1), c64(L, 2 * L - 1))

# ---------------------------------------------------------------------------------------- jaxkan


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _raw_keys(tree):
    """`tree` with its typed PRNG keys (nnx.Rngs state) as their raw uint32 data."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _nnx_abstract(make):
    """(merge, abstract trainable parameters, abstract rest of the state) of the flax nnx module
    `make()`, never built: `merge(params, rest)` rebuilds the module; the rest holds the raw data
    of its PRNG keys."""
    from flax import nnx

    graphdef, params, rest = nnx.split(nnx.eval_shape(make), nnx.Param, ...)
    is_key = jax.tree.map(_is_key, rest)

    def merge(params, rest):
        rest = jax.tree.map(lambda k, x: jax.random.wrap_key_data(x) if k else x, is_key, rest)
        return nnx.merge(graphdef, params, rest)

    return merge, params, jax.eval_shape(_raw_keys, rest)


def _nnx_train(make, opt, loss_fn):
    """A train step `(params, rest, opt_state, *batch) -> (params, opt_state, loss)` on
    `loss_fn(model, *batch)` of the nnx module `make()`, and its abstract (params, rest, opt state)."""
    merge, params, rest = _nnx_abstract(make)

    def step(params, rest, opt_state, *batch):
        return apply_grads(opt, lambda p: loss_fn(merge(p, rest), *batch), params, opt_state)

    return step, (params, rest, jax.eval_shape(opt.init, params))


def jaxkan_spline_regression_step(dims: str, grid: int, order: int, batch: int):
    """Regression train step of a spline KAN (efficient B-spline layers, residual SiLU) with Adam (jaxkan)."""
    import optax
    from jaxkan.models.KAN import KAN

    layer_dims = [int(d) for d in dims.split("-")]

    def make():
        return KAN(layer_dims, layer_type="spline", required_parameters={"k": order, "G": grid}, seed=0)

    def loss_fn(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    step, state = _nnx_train(make, optax.adam(1e-3), loss_fn)
    return step, (*state, f32(batch, layer_dims[0]), f32(batch, layer_dims[-1]))


def jaxkan_chebyshev_burgers_step(width: int, depth: int, degree: int, collocs: int, boundary: int):
    """Physics-informed Chebyshev KAN step on Burgers' equation with residual-based attention (jaxkan)."""
    import optax
    from jaxkan.models.KAN import KAN
    from jaxkan.pikan.adaptive import update_rba_weights
    from jaxkan.pikan.pde import get_burgers_res

    residual_of = get_burgers_res()
    opt = optax.adam(1e-3)

    def make():
        return KAN([2] + [width] * depth + [1], layer_type="chebyshev",
                   required_parameters={"D": degree, "flavor": "exact"}, seed=0)

    def loss_fn(model, points, rba, boundary_points, boundary_values):
        residuals = residual_of(model, points)
        physics = jnp.mean((jax.lax.stop_gradient(rba) * residuals) ** 2)
        fit = jnp.mean((model(boundary_points) - boundary_values) ** 2)
        return physics + 10.0 * fit, residuals

    def step(params, rest, opt_state, rba, points, boundary_points, boundary_values):
        def loss_of(p):
            return loss_fn(merge(p, rest), points, rba, boundary_points, boundary_values)

        (loss, residuals), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        rba = update_rba_weights(residuals, rba, gamma=0.999, eta=0.01)
        return optax.apply_updates(params, updates), opt_state, rba, loss

    merge, params, rest = _nnx_abstract(make)
    return step, (params, rest, jax.eval_shape(opt.init, params), f32(collocs, 1), f32(collocs, 2),
                  f32(boundary, 2), f32(boundary, 1))


def jaxkan_spline_grid_extension(dims: str, grid: int, new_grid: int, batch: int):
    """Grid extension of a spline KAN: each layer refit to a finer grid by least squares (jaxkan)."""
    from flax import nnx
    from jaxkan.models.KAN import KAN

    layer_dims = [int(d) for d in dims.split("-")]

    def make():
        return KAN(layer_dims, layer_type="spline", required_parameters={"k": 3, "G": grid}, seed=0)

    merge, params, rest = _nnx_abstract(make)

    def extend(params, rest, x):
        model = merge(params, rest)
        model.update_grids(x, new_grid)
        _, new_params, new_rest = nnx.split(model, nnx.Param, ...)
        return new_params, _raw_keys(new_rest), model(x)

    return extend, (params, rest, f32(batch, layer_dims[0]))


def jaxkan_rgakan_helmholtz_step(hidden: int, blocks: int, degree: int, collocs: int):
    """Physics-informed step of a residual-gated attention KAN (RGAKAN) on a 2D Helmholtz problem (jaxkan)."""
    import optax
    from jaxkan.models.RGAKAN import RGAKAN
    from jaxkan.pikan.pde import get_helmholtz_res

    residual_of = get_helmholtz_res(a1=1.0, a2=4.0)

    def make():
        return RGAKAN(n_in=2, n_out=1, n_hidden=hidden, num_blocks=blocks, D=degree, rff_std=1.0, seed=0)

    def loss_fn(model, points, boundary_points):
        return jnp.mean(residual_of(model, points) ** 2) + 10.0 * jnp.mean(model(boundary_points) ** 2)

    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(optax.exponential_decay(1e-3, 1000, 0.9)))
    step, state = _nnx_train(make, opt, loss_fn)
    return step, (*state, f32(collocs, 2), f32(collocs // 4, 2))


# (builder, sizes) of each program measured
PROGRAMS = (
    (e3nn_nequip_force_step, dict(molecules=8, atoms=12, neighbors=8, lmax=2, mul=16, layers=2)),
    (e3nn_nequip_force_step, dict(molecules=4, atoms=20, neighbors=12, lmax=3, mul=32, layers=3)),
    (e3nn_pointcloud_classifier, dict(batch=16, points=16, lmax=2, mul=16, layers=2)),
    (e3nn_s2act_dipole_step, dict(molecules=8, atoms=12, neighbors=8, lmax=2, mul=8)),
    (dynamiqs_kerr_cavity_batch, dict(n=16, batch=8, tsave=21)),
    (dynamiqs_kerr_cavity_batch, dict(n=32, batch=16, tsave=51)),
    (dynamiqs_transmon_grape_step, dict(levels=3, segments=40)),
    (dynamiqs_cat_qubit_rouchon, dict(n=20, tsave=41, dt=0.01)),
    (dynamiqs_jaynes_cummings_sweep, dict(n=8, detunings=8, couplings=4, tsave=51)),
    (qujax_vqe_step, dict(qubits=8, layers=4)),
    (qujax_vqe_step, dict(qubits=12, layers=8)),
    (qujax_reuploading_classifier_step, dict(qubits=4, layers=3, features=4, batch=64)),
    (qujax_noisy_vqe_density, dict(qubits=5, layers=3)),
    (qujax_qaoa_multistart, dict(qubits=10, layers=4, starts=8, shots=256)),
    (s2fft_beam_smoothing_spectra, dict(L=64, batch=4)),
    (s2fft_beam_smoothing_spectra, dict(L=128, batch=2)),
    (s2fft_spin2_mass_map, dict(L=32, batch=4)),
    (s2fft_wiener_map_fit, dict(L=32, steps=50)),
    (s2fft_directional_filtering, dict(L=32, N=4, batch=2)),
    (jaxkan_spline_regression_step, dict(dims="4-16-16-1", grid=5, order=3, batch=256)),
    (jaxkan_spline_regression_step, dict(dims="8-32-32-32-1", grid=10, order=3, batch=1024)),
    (jaxkan_chebyshev_burgers_step, dict(width=16, depth=2, degree=5, collocs=1024, boundary=256)),
    (jaxkan_spline_grid_extension, dict(dims="2-8-1", grid=5, new_grid=10, batch=256)),
    (jaxkan_rgakan_helmholtz_step, dict(hidden=32, blocks=2, degree=4, collocs=1024)),
)
# the pip package of each builder name's prefix
LIBRARIES = {"e3nn": "e3nn-jax", "dynamiqs": "dynamiqs", "qujax": "qujax", "s2fft": "s2fft",
             "jaxkan": "jaxkan"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_d1")
