"""gyre's plain Python module on real processes: every collective at p = 1..4 against numpy,
asynchronous handles, a mismatched call, a stalled rank and Ctrl-C during a wait (the cases
are in harness.worker_tests; module_worker.py runs them through gyre.Comm)."""
import os
import unittest

from harness import worker_tests

HERE = os.path.dirname(os.path.abspath(__file__))

ModuleTest = worker_tests(os.path.join(HERE, "module_worker.py"))

if __name__ == "__main__":
    unittest.main(verbosity=2)
