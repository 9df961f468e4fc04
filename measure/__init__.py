"""Measuring one compile in this process: the harness, compile phases, the reference program,
where programs are placed (CPU, GPU, TPU targets) and the machine facts a row carries.

`costmodel.record` and `costmodel.profile` measure at run time, so this package sits below
`costmodel` and imports only `costmodel.features`; sweeps of many measurement processes,
calibration and re-extraction build on it in `costmodel.training.measure`."""
