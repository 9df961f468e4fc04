"""The calibration set's figures on the training machine, and stand-ins built from them,
for the calibration tests."""

import numpy as np

# Shares of the five calibration programs on the training machine (hlo, backend, other),
# as its sweep measured them, and their compile seconds there.
TRAINING = {"reference": (0.10, (0.15, 0.45, 0.40)), "fold": (0.40, (0.77, 0.02, 0.21)),
            "mixed": (0.54, (0.22, 0.56, 0.22)), "codegen": (1.53, (0.02, 0.95, 0.03)),
            "train_step": (1.78, (0.23, 0.66, 0.11))}


def training_figures():
    return {p: {"compile_seconds": s, "parts": dict(zip(("hlo", "backend", "other"),
                                                        np.multiply(s, shares)))}
            for p, (s, shares) in TRAINING.items()}


def measured_here(factors, refs=None):
    refs = refs or [None] * len(TRAINING)
    return {p: {"compile_seconds": sum(v * factors[k] for k, v in t["parts"].items()),
                "ref_seconds": ref, "parts": None}
            for (p, t), ref in zip(training_figures().items(), refs)}


class OpsModel:
    """A model stand-in whose prediction of a program is 1 ms per HLO op (the unit under
    test is calibrate, which divides by whatever the model says)."""

    def predict(self, inputs):
        return {"compile_seconds": {"point": np.array([i["hlo_ops"] * 1e-3 for i in inputs])}}


def with_inputs(here, ops):
    return {p: {**f, "model_inputs": {"hlo_ops": n}} for (p, f), n in zip(here.items(), ops)}
