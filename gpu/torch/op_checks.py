"""What the PyTorch ops' checks share (test_kla_op.py, test_delta_rule_op.py): a line per check and
the failures kept for the exit status, and bitwise equality of float32 tensors."""
import torch

failures = []


def expect(condition, what):
    """Prints `what` as ok or FAIL; a failure is kept in `failures`."""
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def same(a, b):
    """Whether two float32 tensors hold the same shape and the same bits."""
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))
