"""gyre as a torch.distributed backend on real processes: every collective at p = 1..4 against
gloo, asynchronous handles and futures, a mismatched call, a stalled rank and Ctrl-C (the
cases are in harness.worker_tests; torch_worker.py runs them through dist.* calls)."""
import os
import unittest

from harness import Job, check_all_ok, worker_tests

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_worker.py")


# Importing torch takes seconds per process on a loaded machine: longer deadlines.
class TorchBackendTest(worker_tests(WORKER, finish_timeout=90, start_timeout=60)):
    def test_a_group_algorithm_steers_only_the_collectives_that_have_it(self):
        results = Job(WORKER, 2, ["group_algorithm"], env={"GYRE_ALGORITHM": "ring"}).finish(90)
        check_all_ok(results)
        for code, out, err in results:
            self.assertIn("group_algorithm ok", out)

    def test_an_unknown_group_algorithm_fails_the_init_naming_it(self):
        results = Job(WORKER, 2, ["group_algorithm"], env={"GYRE_ALGORITHM": "nosuch"}).finish(90)
        for code, out, err in results:
            self.assertNotEqual(code, 0, out + err)
            self.assertIn("unknown algorithm 'nosuch'", err)
            self.assertIn("GYRE_ALGORITHM", err)

    def test_a_call_the_backend_refuses_on_one_rank_keeps_the_sequence(self):
        results = Job(WORKER, 2, ["refused"]).finish(90)
        check_all_ok(results)
        for code, out, err in results:
            self.assertIn("refused ok", out)

    def test_premul_sum_leaves_the_inputs_alone(self):
        for p in (2, 3):
            with self.subTest(p=p):
                results = Job(WORKER, p, ["premul_inputs"]).finish(90)
                check_all_ok(results)
                for code, out, err in results:
                    self.assertIn("premul_inputs ok", out)

    def test_a_future_callback_may_make_collectives_and_wait(self):
        for p in (2, 3):
            with self.subTest(p=p):
                results = Job(WORKER, p, ["future_callbacks"]).finish(90)
                check_all_ok(results)
                for code, out, err in results:
                    self.assertIn("future_callbacks ok", out)

    def test_ddp_with_the_powersgd_hook_trains_as_on_gloo(self):
        try:
            import torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook  # noqa: F401
        except ImportError as e:
            self.skipTest("no PowerSGD hook: %s" % e)
        results = Job(WORKER, 2, ["powersgd"]).finish(90)
        check_all_ok(results)
        for code, out, err in results:
            self.assertIn("powersgd ok", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
