"""The top end of `bench/evaluations/outside_programs.py`: six of its programs at sizes that compile for
20-50 s on the AMD EPYC, for `bench/evaluations/outside_libraries.py --programs
bench/evaluations/outside_top_programs.py`. Issue #19 found the largest programs of libraries nobody
here used over-predicted 10-25x; the outside-libraries run stops at 21 s. The builders are
those of `outside_programs` (so its families register too); these families are named
`outside_top_<builder>` and held out by the same libraries.
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # measurement processes import
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # this file by its path

import outside_programs as programs  # noqa: E402

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders  # noqa: E402

# (builder, sizes): each one a longer unroll or a deeper stack of a program measured there
PROGRAMS = (
    (programs.jraph_mpnn_step, dict(layers=96)),
    (programs.distrax_spline_flow_train_step, dict(dim=16, layers=32, hidden=128, bins=8,
                                                   batch=256)),
    (programs.jaxopt_lbfgs_mlp, dict(depth=96)),
    (programs.pix_simclr_step, dict(views=16)),
    (programs.jaxmd_unrolled_grad, dict(particles=64, steps=300)),
    (programs.gymnax_ppo_update,
     dict(env_name="Breakout-MinAtar", num_envs=32, rollout=128, hidden=256, epochs=10,
          minibatches=4, unroll=True)),
)

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside",
                                     libraries_by_prefix(PROGRAMS, programs.LIBRARIES),
                                     prefix="outside_top")
