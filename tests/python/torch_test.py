"""gyre as a torch.distributed backend on real processes: every collective at p = 1..4 against
gloo, asynchronous handles and futures, a mismatched call, a stalled rank and Ctrl-C (the
cases are in harness.worker_tests; torch_worker.py runs them through dist.* calls)."""
import os
import unittest

from harness import worker_tests

HERE = os.path.dirname(os.path.abspath(__file__))

# Importing torch takes seconds per process on a loaded machine: longer deadlines.
TorchBackendTest = worker_tests(os.path.join(HERE, "torch_worker.py"), finish_timeout=90,
                                start_timeout=60)

if __name__ == "__main__":
    unittest.main(verbosity=2)
