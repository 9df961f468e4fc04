"""bench/archive/recipe_variants.py: other CPU recipes scored on the stored outside runs,
each calibrated as `costmodel calibrate` would calibrate it."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def variants():
    from conftest import bench_module

    return bench_module("recipe_variants")


def test_a_variant_names_what_it_changes(variants):
    from costmodel.training.fitting import recipe

    added = variants.params_of("while_count+op_slice")["added_terms"]["compile_seconds"]
    assert added == recipe.ADDED_TERMS["compile_seconds"] + ("while_count", "op_slice")
    assert variants.params_of("base:hlo_ops_inlined") == {
        "baseline_terms": {"compile_seconds": ("hlo_ops_inlined",)}}
    skipped = variants.params_of("trees-skip:op_slice")["tree_exclude"]
    assert skipped[-1] == "op_slice" and len(skipped) == len(
        recipe.BACKEND_TERMS["cpu"]["tree_exclude"]) + 1
    with pytest.raises(ValueError, match="unknown variant kind"):
        variants.params_of("tree:op_slice")


class _Constant:
    """A predictor that predicts `seconds` for every program, `[seconds / 2, seconds * 2]`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def predict(self, inputs):
        point = np.full(len(inputs), self.seconds)
        return {"compile_seconds": {"point": point, "lo": point / 2, "hi": point * 2}}


def test_an_ensemble_is_the_geometric_mean_of_its_fits(variants):
    out = variants.Ensemble([_Constant(1.0), _Constant(4.0)]).predict([{}, {}])
    assert out["compile_seconds"]["point"] == pytest.approx([2.0, 2.0])
    assert out["compile_seconds"]["hi"] == pytest.approx([4.0, 4.0])


def test_a_run_is_scaled_by_its_calibration_sets_model_ratio_times_the_applied_factor(variants):
    """The set compiled in 3 s where the fit says 1 s: the run's predictions are scaled by
    3 x 1.07, so programs measured at 3.21 s are exact and one at 6 s is 1.87x under."""
    calibration = {name: {"compile_seconds": 3.0, "model_inputs": {}} for name in "abc"}
    results = [{"model_inputs": {}, "measured_s": seconds} for seconds in (3.21, 3.21, 6.0)]
    got = variants.score(_Constant(1.0), {"run": {"results": results,
                                                   "calibration_before": calibration}})
    run = got["by_run"]["run"]
    assert run["median_fold"] == pytest.approx(1.0)
    assert run["measured_over_predicted"] == pytest.approx((6.0 / 3.21) ** (1 / 3))
    assert got["covered_unwidened"] == pytest.approx(1.0)  # the top is 6.42
    assert got["shape_median_fold"] == pytest.approx((6.0 / 3.21) ** (1 / 3))
