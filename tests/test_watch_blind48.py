"""tl.watch() checked blind, forty-eighth round: a float torch.quantile takes as a Python number though it
takes a tensor too (an autoencoder's anomaly threshold), ... Each is checked against Dynamo's own account,
with the printed fixes applied."""

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def detect(err, contamination):  # PyOD's threshold: the (1 - contamination) quantile of the errors
    threshold = torch.quantile(err, 1 - contamination)
    is_anomaly = err > threshold
    return threshold, int(is_anomaly.sum())


def test_a_float_an_op_also_takes_as_a_tensor_is_told_to_be_passed_as_one_and_that_holds():
    f = torch.compile(detect, backend="aot_eager")
    err = torch.rand(64)
    table = watched(lambda: [f(err, c) for c in (0.1, 0.05, 0.01)])
    held = [c for r in table.rows for c in r.causes if "torch.quantile took it as a Python number" in c.words]
    assert held and all(c.fix.startswith("pass it as a 0-d tensor (torch.tensor(value)): torch.quantile") for c in held)
    torch._dynamo.reset()
    fixed = watched(lambda: [f(err, torch.tensor(c)) for c in (0.1, 0.05, 0.01)])
    assert fixed.total_compiles < table.total_compiles and fixed.total_compiles <= 2, fixed.to_text()
