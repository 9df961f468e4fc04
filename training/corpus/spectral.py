"""FFT programs: filters by FFT convolution, pseudo-spectral steps of a 2-D field and
Poisson solves of a 3-D one, as spectral PDE solvers and signal pipelines write them.
Their op counts are tiny, and the TPU compiler's time follows the transform's length:
deviceless for v5e, a 2-D spectral step compiled in about 1 s on a 64x64 field and 3.8 s
on 256x256 (78 ops both), an FFT convolution of 16384 samples in 7 s (22 ops), a 64^3
FFT round trip in 11 s (9 ops).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .registry import Family, param_grid, register, sds

STEPS = 10  # time steps of the 2-D solver's loop: its body compiles once
SIGNALS = 8  # signals filtered at once by "conv1d"


def build_spectral(kind: str, n: int, transforms: int) -> tuple[Callable, tuple]:
    """``kind`` "conv1d": ``transforms`` FFT convolutions in a row (rfft to 2n samples,
    product with a filter's rfft, irfft, tanh) of ``SIGNALS`` signals of ``n`` samples;
    "spectral2d": an (n, n) field stepped ``STEPS`` times in a ``fori_loop``, each step
    taking ``transforms`` spectral derivatives (rfft2, times i k, irfft2) of a nonlinear
    term and an implicit viscous update; "poisson3d": ``transforms`` Poisson solves in a
    row of an (n, n, n) field (complex fftn, divide by |k|^2, ifftn)."""
    if kind == "conv1d":
        def filt(x, filters):
            for h in filters:
                x = jnp.tanh(jnp.fft.irfft(jnp.fft.rfft(x, 2 * n) * jnp.fft.rfft(h, 2 * n),
                                           2 * n)[..., :n])
            return x
        return filt, (sds((SIGNALS, n)), tuple(sds((n,)) for _ in range(transforms)))
    if kind == "spectral2d":
        def solve(u, nu):
            k = jnp.fft.fftfreq(n) * n
            kx, ky = k[:, None], k[None, : n // 2 + 1]

            def step(_, u):
                uh = jnp.fft.rfft2(u)
                flux = jnp.zeros_like(uh)
                for i in range(transforms):
                    grad = jnp.fft.irfft2(1j * (kx if i % 2 == 0 else ky) * uh, s=(n, n))
                    flux = flux + jnp.fft.rfft2(u * grad)
                uh = (uh - 0.01 * flux) / (1 + nu * (kx**2 + ky**2))
                return jnp.fft.irfft2(uh, s=(n, n))
            return jax.lax.fori_loop(0, STEPS, step, u)
        return solve, (sds((n, n)), sds(()))
    if kind != "poisson3d":
        raise ValueError(f"kind must be 'conv1d', 'spectral2d' or 'poisson3d', got {kind!r}")

    def poisson(rho):
        k = jnp.fft.fftfreq(n) * n
        k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + k[None, None, :] ** 2
        k2 = jnp.where(k2 == 0, 1.0, k2)
        for _ in range(transforms):
            rho = jnp.real(jnp.fft.ifftn(jnp.fft.fftn(rho) / k2)) + rho * 0.1
        return rho
    return poisson, (sds((n, n, n)),)


register(Family(
    name="spectral",
    description="FFT convolutions of signals, pseudo-spectral steps of 2-D fields and "
                "3-D Poisson solves, one or three transforms each, at lengths of 16 to "
                "65536.",
    build=build_spectral,
    grid=(param_grid(kind=("conv1d",), n=(1024, 8192, 65536), transforms=(1, 3))
          + param_grid(kind=("spectral2d",), n=(64, 128, 256, 512), transforms=(1, 3))
          + param_grid(kind=("poisson3d",), n=(16, 32, 64), transforms=(1, 3))),
))

# Transform lengths that are not powers of two, which the TPU compiles in seconds to a
# minute at a handful of ops (call 29: 4096 points 0.6 s on the chip, 6000 6.8 s, 22050
# 41 s; call 30: 8012 = 4 x 2003 38 s but 8198 = 2 x 4099 7 s, so no rule of the odd part
# alone). Kept out of every fit (bench/FINDINGS.md, "FFTs of odd lengths"). None of these is
# a program of the chip checks (`bench/evaluations/tpu_thin_conv.py`: check sets
# "spectral" and "fft_lengths").
register(Family(
    name="spectral_odd",
    description="The spectral family's programs at transform lengths with odd factors "
                "(odd parts 3 to 9009, twice 2 to 1024 times): FFT convolutions of 45 to "
                "13500 samples, 2-D fields of 150 to 300, 3-D fields of 30 and 45.",
    build=build_spectral,
    grid=(param_grid(kind=("conv1d",), n=(45, 500, 625, 1009, 1500, 1875, 2187, 2250, 2500,
                                         2560, 2880, 3375, 3600, 4004, 4006, 4095, 4099,
                                         5000, 6000, 6144, 7007, 7680, 9000, 9009, 9600,
                                         10000, 10010, 10240, 12000, 13500),
                     transforms=(1,))
          + param_grid(kind=("spectral2d",), n=(150, 250, 300), transforms=(1,))
          + param_grid(kind=("poisson3d",), n=(30, 45), transforms=(1,))),
))
