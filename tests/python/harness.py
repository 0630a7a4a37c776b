"""Runs the ranks of a test job as real processes and collects what each printed.

Every rank is a subprocess of /usr/bin/python3 (the Python gyre's module is built for); the
harness owns their pids, so it can SIGSTOP or SIGINT one, and kills only them at the end.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest


class Job:
    def __init__(self, script, size, args=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="gyre-pytest-")
        self.size = size
        self.procs = []
        for rank in range(size):
            e = dict(os.environ)
            e.update(env or {})
            e["PYTHONUNBUFFERED"] = "1"
            cmd = [sys.executable, script, str(rank), str(size), self.dir] + list(args)
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True, env=e))

    def wait_for_line(self, rank, text, timeout):
        """Reads rank's stdout until a line contains `text`; returns the lines read."""
        deadline = time.monotonic() + timeout
        lines = []
        proc = self.procs[rank]
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if text in line:
                return lines
        raise AssertionError("rank %d did not print %r within %.0f s; got %r"
                             % (rank, text, timeout, lines))

    def finish(self, timeout):
        """Waits for every rank; returns [(returncode, stdout, stderr)] by rank."""
        deadline = time.monotonic() + timeout
        results = []
        for rank, p in enumerate(self.procs):
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                out, err = p.communicate()
                raise AssertionError("rank %d still running after %.0f s:\n%s"
                                     % (rank, timeout, err[-3000:]))
            results.append((p.returncode, out, err))
        shutil.rmtree(self.dir, ignore_errors=True)
        return results

    def signal(self, rank, sig):
        self.procs[rank].send_signal(sig)

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except ProcessLookupError:
                    pass
        for p in self.procs:
            p.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)


def check_all_ok(results):
    for rank, (code, out, err) in enumerate(results):
        if code != 0:
            raise AssertionError("rank %d exited %d:\n%s\n%s" % (rank, code, out, err[-4000:]))


def worker_tests(worker, finish_timeout=60, start_timeout=30):
    """The end-to-end cases every gyre front end must pass, run on `worker` (a script that
    takes rank, size, a scratch folder and the case name): every collective at p = 1..4, a
    mismatched call named on both sides, a stalled rank named by the others, and Ctrl-C
    during a wait. Returns a unittest.TestCase class."""

    class WorkerTest(unittest.TestCase):
        def test_collectives(self):
            for p in (1, 2, 3, 4):
                with self.subTest(p=p):
                    job = Job(worker, p, ["collectives"])
                    results = job.finish(timeout=finish_timeout)
                    check_all_ok(results)
                    for code, out, err in results:
                        self.assertIn("collectives ok", out)

        def test_mismatched_call_names_both_sides(self):
            job = Job(worker, 2, ["mismatch"])
            results = job.finish(timeout=40)
            check_all_ok(results)
            for rank, (code, out, err) in enumerate(results):
                m = re.search(r"GyreError code=(\w+) msg=(.*)", out)
                self.assertIsNotNone(m, out + err)
                self.assertIn("count", m.group(2).lower(), m.group(2))
                self.assertIn("rank", m.group(2))
                print("rank %d: %s" % (rank, m.group(2)[:300]))

        def test_stalled_rank_is_named(self):
            job = Job(worker, 3, ["stall"], env={"GYRE_TEST_TIMEOUT": "3"})
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
            job = Job(worker, 2, ["interrupt"])
            try:
                job.wait_for_line(0, "waiting", start_timeout)
                time.sleep(0.5)  # let the call start waiting; any moment would do
                job.signal(0, signal.SIGINT)
                line = job.wait_for_line(0, "interrupted", 10)[-1]
            finally:
                job.kill()
            after = float(re.search(r"after=([\d.]+)", line).group(1))
            self.assertLess(after, 5.0)

    return WorkerTest
