"""gyre's plain Python module on real processes: every collective at p = 1..4 against numpy,
asynchronous handles, a mismatched call, a stalled rank and Ctrl-C during a wait (the cases
are in harness.worker_tests; module_worker.py runs them through gyre.Comm)."""
import os
import unittest

from harness import Job, check_all_ok, worker_tests

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "module_worker.py")


class ModuleTest(worker_tests(WORKER)):
    def test_a_comm_destroyed_under_a_running_call_keeps_its_buffers(self):
        # The call goes on after its Comm is gone (bounded by its deadline) and writes its
        # result into its buffers: they must still be the call's, not fresh arrays.
        results = Job(WORKER, 2, ["abandon"]).finish(timeout=40)
        check_all_ok(results)
        self.assertIn("abandon changed=[]", results[0][1], results[0])
        self.assertIn("abandon rank1 got=3.0", results[1][1], results[1])

    def test_a_forked_child_cannot_use_its_parents_comm_and_exits(self):
        results = Job(WORKER, 2, ["fork"]).finish(timeout=60)
        check_all_ok(results)
        out = results[0][1]
        self.assertRegex(out, r"fork child: after=0\.\d+ msg=.*is a child forked from it", out)
        self.assertIn("fork child exited status=0", out)
        for code, out, err in results:
            self.assertIn("fork after=3.0", out)

if __name__ == "__main__":
    unittest.main(verbosity=2)
