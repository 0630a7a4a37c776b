"""gyre's plain Python module on real processes: every collective at p = 1..4 against numpy,
asynchronous handles, a mismatched call, a stalled rank and Ctrl-C during a wait."""
import os
import re
import signal
import time
import unittest

from harness import Job, check_all_ok

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_worker.py")


class ModuleTest(unittest.TestCase):
    def test_collectives(self):
        for p in (1, 2, 3, 4):
            with self.subTest(p=p):
                job = Job(WORKER, p, ["collectives"])
                results = job.finish(timeout=60)
                check_all_ok(results)
                for code, out, err in results:
                    self.assertIn("collectives ok", out)

    def test_mismatched_call_names_both_sides(self):
        job = Job(WORKER, 2, ["mismatch"])
        results = job.finish(timeout=40)
        check_all_ok(results)
        for rank, (code, out, err) in enumerate(results):
            m = re.search(r"GyreError code=(\w+) msg=(.*)", out)
            self.assertIsNotNone(m, out + err)
            self.assertIn("count", m.group(2).lower(), m.group(2))
            self.assertIn("rank", m.group(2))
            print("rank %d: %s" % (rank, m.group(2)[:300]))

    def test_stalled_rank_is_named(self):
        job = Job(WORKER, 3, ["stall"], env={"GYRE_TEST_TIMEOUT": "3"})
        try:
            for r in range(3):
                job.wait_for_line(r, "ready", 30)
            job.signal(2, signal.SIGSTOP)
            lines = {}
            for r in (0, 1):
                lines[r] = job.wait_for_line(r, "GyreError", 30)[-1]
        finally:
            job.kill()
        for r, line in lines.items():
            m = re.search(r"after=([\d.]+) code=(\w+) msg=(.*)", line)
            self.assertIsNotNone(m, line)
            self.assertIn("rank 2", m.group(3))
            self.assertIn("stall", m.group(3))
            self.assertLess(float(m.group(1)), 15.0, line)
            print("rank %d: %s" % (r, m.group(3)[:300]))

    def test_ctrl_c_interrupts_a_wait(self):
        job = Job(WORKER, 2, ["interrupt"])
        try:
            job.wait_for_line(0, "waiting", 30)
            time.sleep(0.5)  # let the call start waiting; any moment would do
            job.signal(0, signal.SIGINT)
            line = job.wait_for_line(0, "interrupted", 10)[-1]
        finally:
            job.kill()
        after = float(re.search(r"after=([\d.]+)", line).group(1))
        self.assertLess(after, 5.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
