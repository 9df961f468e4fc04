"""The calibration set: five programs that `costmodel calibrate` times on a user's machine.

One tiny reference program does not carry a model to another CPU: its compile is mostly
fixed cost, while large compiles spend most of their time in XLA's backend (LLVM code
generation on parallel threads, so core count matters) or in HLO passes (one thread). Each
program here leans on one part (shares measured on the training machine, 2-core Xeon):

- `reference`: the drift reference (~0.1 s), mostly cost outside XLA's passes;
- `fold`: three 1024^3 products of captured tables (0.4 s, 77% HLO passes: XLA evaluates
  them while compiling);
- `mixed`: a 32-layer stax MLP SGD step (0.5 s: 22% HLO passes, 56% backend);
- `codegen`: a stax convnet RMSProp step (1.5 s, 95% backend);
- `train_step`: an 8-block stax ResNet momentum step (1.8 s: 23% HLO passes, 66% backend).

Only jax itself is needed (`jax.example_libraries`), so every install can run it. The set
is a corpus family, so the training machine's rows of it come from a sweep like any other.
"""

from __future__ import annotations

from .misc import build_constant_fold
from .real_example_libraries import build_stax_convnet_step, build_stax_mlp_step, build_stax_resnet_step
from .registry import Family, register

PROGRAMS = {
    "reference": lambda: _reference(),
    "fold": lambda: build_constant_fold(side=1024, ops=3, mode="matmul"),
    "mixed": lambda: build_stax_mlp_step(depth=32, width=256, optimizer="sgd"),
    "codegen": lambda: build_stax_convnet_step(depth=2, channels=16, optimizer="rmsprop"),
    "train_step": lambda: build_stax_resnet_step(blocks=8, channels=64),
}
FAMILY = "calibration_set"


def _reference():
    from costmodel.measure.reference import build_reference

    return build_reference()


def build_calibration_program(program: str):
    """A fresh (fn, args) of one calibration program."""
    try:
        return PROGRAMS[program]()
    except KeyError:
        raise ValueError(f"unknown calibration program {program!r}; "
                         f"known: {', '.join(PROGRAMS)}") from None


register(Family(FAMILY, "The programs `costmodel calibrate` times: reference, constant "
                        "folding, HLO passes, code generation, a mid-size train step.",
                build_calibration_program, grid=tuple({"program": p} for p in PROGRAMS),
                tags=("calibration",)))
