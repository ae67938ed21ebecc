"""What the PyTorch ops' checks share (test_kla_op.py, test_kdn_gain_op.py, test_delta_rule_op.py): a
line per check and the failures kept for the exit status, bitwise equality of float32 tensors, and
bad input refused by name."""
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


def expect_refused(what, call):
    """That call() raises RuntimeError (the ops' checks) or ValueError (the Python wrappers' argument
    checks) with `what` in its message (the input and the rule it breaks).
    A crash instead (a segmentation fault formatting the message) ends the process: run_gpu.sh counts
    that as a failure too."""
    try:
        call()
        expect(False, f"bad input ({what}) refused")
    except (RuntimeError, ValueError) as e:
        expect(what in str(e), f"bad input ({what}) refused: {str(e).splitlines()[0][:100]}")
