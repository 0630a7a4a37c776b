"""Runs the ranks of a test job as real processes and collects what each printed.

Every rank is a subprocess of /usr/bin/python3 (the Python gyre's module is built for); the
harness owns their pids, so it can SIGSTOP or SIGINT one, and kills only them at the end.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


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
