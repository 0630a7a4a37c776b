"""Python argument checks on real processes (p = 1 and 2): huge and infinite timeouts mean
no limit, NaN and negative ones are a ValueError naming the value (for calls, for
Work.wait and for joining), a call's timeout of 0 is a ValueError (Work.wait(0) polls), a
deterministic other than None/-1/0/1/False/True is refused by name, and an unknown op or
element type names the value and the allowed ones (arguments_worker.py holds the cases)."""
import os
import unittest

from harness import Job, check_all_ok

HERE = os.path.dirname(os.path.abspath(__file__))


class ArgumentsTest(unittest.TestCase):
    def test_timeouts_ops_and_element_types(self):
        for p in (1, 2):
            with self.subTest(p=p):
                job = Job(os.path.join(HERE, "arguments_worker.py"), p)
                results = job.finish(timeout=60)
                check_all_ok(results)
                for code, out, err in results:
                    self.assertIn("arguments ok", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
