#!/usr/bin/env python3
"""Runs gyre (embedded and through gyred), Gloo and Open MPI side by side with BENCH.md's
method and writes bench/results/<date>-<quick|full>.md with the raw JSONL next to it.

Every (round, op, p, implementation, algorithm) is a fresh job; within a round the jobs of
one (op, p) alternate between implementations, and each round starts the rotation at a
different place, so drift hits every implementation alike. Every rank of every
implementation is pinned to CPU rank mod the allowed CPUs. Started by bench/compare.sh,
which builds the programs first. Standard library only.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source folder clean
import compare_table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

FULL_SIZES = ",".join(
    ["4", "16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"])
MODES = {
    "quick": dict(ops=["allreduce"], ranks=[2, 4], sizes="4,64K,1M,16M", rounds=1,
                  daemon_algos="auto", prune=False, budget=170, cell_seconds=0.25),
    # 0.1 s cells (BENCH.md: about 0.25), aiming at three rounds in 15 minutes: cells of
    # small messages reach the 1000-iteration cap either way, and cells of 16-64 MiB run the
    # 5-iteration floor either way; only the cells in between get fewer iterations. On the
    # 2-vCPU VM of 2026-12-02 two rounds took 1061 s and the budget stopped the third: the
    # p = 8 cells of 16-64 MiB (7 iterations of up to 1.5 s per algorithm) dominate.
    "full": dict(ops=["allreduce", "broadcast", "allgather"], ranks=[2, 4, 8],
                 sizes=FULL_SIZES, rounds=3, daemon_algos="auto", prune=True, budget=870,
                 cell_seconds=0.1),
}
GLOO_ALGOS = {
    "allreduce": ["ring", "ring_chunked", "halving_doubling", "bcube"],
    "broadcast": ["one_to_all", "broadcast"],
    "allgather": ["ring", "allgather"],
    "gather": ["gather"],
    "scatter": ["scatter"],
}
MPI_BASE = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
MPI_VARIANTS = {"default": [], "yield": ["--mca", "mpi_yield_when_idle", "1"]}
# After the first round of a pruned run, an algorithm goes on only at the sizes where it
# was within this factor of its implementation's best: 1.0 keeps each implementation's
# fastest algorithm per size (and gyre's auto, always). The headline ratios need no more,
# and a wider slack kept most of gyre's algorithms at small sizes, where several are the
# same schedule (at 2 ranks ring, recursive doubling and direct are one exchange).
PRUNE_SLACK = 1.0
# In the first round, a forced gyre algorithm runs only at the sizes where the calibrated
# model puts it within this factor of the model's fastest algorithm. 3 drops only clear
# losers: direct allreduce at 8 ranks and 1-64 MiB (3.5-4.3x by the model, 5.8-12x measured
# on 2026-12-02) and ring allreduce at 8 ranks and 16 B-16 KiB (over 3x by the model, 2-2.7x
# measured: the model is pessimistic there, but not enough to hide a winner). A winner the
# model puts over 3x behind would go unmeasured; the report lists what was left out.
MODEL_SLACK = 3.0


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def shell_output(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except subprocess.SubprocessError:
        return ""


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def run_bounded(cmd, log_path, timeout, cwd):
    """Runs cmd in its own session; on timeout stops that session's process group."""
    with open(log_path, "w") as out:
        out.write("$ " + shlex.join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            out.write("\ncompare.py: timed out after %d s; process group stopped\n" % timeout)
            return 124


def tail(path, lines=6):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


class Plan:
    def __init__(self, args, bindir):
        self.args = args
        self.bin = bindir
        self.have_gloo = os.access(os.path.join(bindir, "gyre-bench-gloo"), os.X_OK)
        self.have_mpi = (os.access(os.path.join(bindir, "gyre-bench-mpi"), os.X_OK)
                         and shell_output("command -v mpirun") != "")
        self.calibration = None  # set by main() once the model is calibrated
        self.gyre_algos = {}
        for op in args.ops:
            out = subprocess.run([os.path.join(bindir, "gyre-bench"), "--op", op,
                                  "--list_algorithms"], capture_output=True, text=True,
                                 timeout=30)
            if out.returncode != 0:
                raise SystemExit("gyre-bench --list_algorithms failed: " + out.stderr)
            self.gyre_algos[op] = out.stdout.split() + ["auto"]

    def common(self, op, jsonl, sizes, gyre=False):
        extra = [] if self.args.no_pin else ["--pin"]
        if gyre and self.calibration:
            extra += ["--calibration", self.calibration]
        if self.args.cell_seconds:
            extra += ["--cell_seconds", str(self.args.cell_seconds)]
        return ["--op", op, "--sizes", ",".join(sizes)] + extra + ["--jsonl", jsonl]

    def gyrerun(self, p, mode, algo=None):
        # --tune: gyre's auto jobs tune online (forced algorithms are never tuned).
        tune = ["--tune"] if self.args.tune and algo == "auto" else []
        return [os.path.join(self.bin, "gyrerun"), "-n", str(p), "--mode", mode,
                "--job_timeout", str(self.args.run_timeout - 5)] + tune + ["--"]

    def runs(self, op, p):
        """The jobs of one (op, p): [impl, algo, argv builder, sizes], interleaved by impl."""
        lanes = []
        gyre = [("gyre", a, lambda j, s, a=a: self.gyrerun(p, "embedded", a) + [
            os.path.join(self.bin, "gyre-bench"), "--algo", a] + self.common(op, j, s, True))
            for a in self.gyre_algos[op]]
        lanes.append(gyre)
        daemon_algos = self.gyre_algos[op] if self.args.daemon_algos == "all" else ["auto"]
        # gyred is started before gyre-bench, so it takes the calibration from its environment.
        daemon_env = ["env", "GYRE_CALIBRATION=" + self.calibration] if self.calibration else []
        lanes.append([("gyre-daemon", a, lambda j, s, a=a: daemon_env + self.gyrerun(p, "daemon", a) + [
            os.path.join(self.bin, "gyre-bench"), "--algo", a] + self.common(op, j, s, True))
            for a in daemon_algos])
        if self.have_gloo and op in GLOO_ALGOS:
            lanes.append([("gloo", a, lambda j, s, a=a: self.gyrerun(p, "embedded") + [
                os.path.join(self.bin, "gyre-bench-gloo"), "--algo", a] + self.common(op, j, s))
                for a in GLOO_ALGOS[op]])
        if self.have_mpi:
            lanes.append([("openmpi", v, lambda j, s, v=v: MPI_BASE + MPI_VARIANTS[v] + [
                "-np", str(p), os.path.join(self.bin, "gyre-bench-mpi"), "--algo_label", v] +
                self.common(op, j, s)) for v in MPI_VARIANTS])
        # Round-robin over the implementations so that neighbours in time differ.
        order = []
        while any(lanes):
            for lane in lanes:
                if lane:
                    impl, algo, build = lane.pop(0)
                    order.append([impl, algo, build, self.args.sizes.split(",")])
        return order


def parse_size(text):
    scale = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
             "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(text[:digits]) * scale[text[digits:].upper()]


def reported_bytes(op, size, p, elem=4):
    """The `bytes` a job reports for a requested size (bench_common.cc's ShapeFor)."""
    if op in ("allgather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return p * max(1, size // elem // p) * elem
    return max(1, size // elem) * elem


def prune(runs, records, op, p):
    """After round 1: each job keeps the sizes at which its algorithm was within
    PRUNE_SLACK of its implementation's best; jobs left with no size are dropped, except
    gyre's automatic choice, which always runs every size."""
    best, fast = {}, {}
    mine = [r for r in records if r["op"] == op and r["ranks"] == p and r.get("ok") is not False]
    for r in mine:
        key = (r["impl"], r["bytes"])
        best[key] = min(best.get(key, float("inf")), r["median_us"])
    for r in mine:
        if r["median_us"] <= PRUNE_SLACK * best[(r["impl"], r["bytes"])]:
            algo = "auto" if r["algo"].startswith("auto:") else r["algo"]
            fast.setdefault((r["impl"], algo), set()).add(r["bytes"])
    kept = []
    for impl, algo, build, sizes in runs:
        if algo == "auto":
            kept.append([impl, algo, build, sizes])
            continue
        near = fast.get((impl, algo), set())
        sizes = [s for s in sizes if reported_bytes(op, parse_size(s), p) in near]
        if sizes:
            kept.append([impl, algo, build, sizes])
    return kept


def model_estimates(bindir, op, p, sizes, calibration, shapes=None):
    """{(algo, bytes): estimate_us} from gyre-bench --estimate, or {} if it fails. With
    `shapes` (a list), appends [op, p, bytes, algo, shape] for each schedule's shape hash."""
    cmd = [os.path.join(bindir, "gyre-bench"), "--op", op, "--estimate", str(p),
           "--sizes", sizes] + (["--calibration", calibration] if calibration else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return {}
    if out.returncode != 0:
        log("compare: %s failed: %s" % (shlex.join(cmd), out.stderr.strip()))
        return {}
    est = {}
    for line in out.stdout.splitlines():
        rec = json.loads(line)
        est[(rec["algo"], rec["bytes"])] = rec["estimate_us"]
        if shapes is not None and "shape" in rec:
            shapes.append([op, p, rec["bytes"], rec["algo"], rec["shape"]])
    return est


def prune_by_model(runs, est, op, p):
    """Round 1: gyre's forced algorithms keep the sizes where the model puts them within
    MODEL_SLACK of its fastest; returns the kept runs and the (algo, size) pairs left out."""
    fastest = {}
    for (algo, size), us in est.items():
        fastest[size] = min(fastest.get(size, float("inf")), us)
    kept, skipped = [], []
    for impl, algo, build, sizes in runs:
        if impl != "gyre" or algo == "auto" or not est:
            kept.append([impl, algo, build, sizes])
            continue
        near = []
        for s in sizes:
            b = reported_bytes(op, parse_size(s), p)
            us = est.get((algo, b))
            if us is None or us <= MODEL_SLACK * fastest[b]:
                near.append(s)
            else:
                skipped.append("%s %s" % (algo, s))
        if near:
            kept.append([impl, algo, build, near])
    return kept, skipped


def machine_limits(bindir, when, workdir):
    path = os.path.join(workdir, "machine-%s.log" % when)
    with open(path, "w") as out:
        try:
            res = subprocess.run([os.path.join(bindir, "gyre-machine-limits"), "--json"],
                                 stdout=subprocess.PIPE, stderr=out, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            log("gyre-machine-limits timed out")
            return None
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            rec["when"] = when
            return rec
    log("gyre-machine-limits printed no result (see %s)" % path)
    return None


def cpu_probe(bindir):
    """The cache-line round trip between the first two CPUs in ns (gyre-machine-limits
    --probe), or None. This VM's host moves its two CPUs between a near and a far placement
    every second to every few tens of seconds, and a loopback exchange takes up to twice as
    long in the far one, so every job is probed before and after."""
    try:
        res = subprocess.run([os.path.join(bindir, "gyre-machine-limits"), "--probe"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             timeout=10)
        ns = json.loads(res.stdout.strip().splitlines()[-1]).get("cpu_rt_ns", 0)
        return ns if ns > 0 else None
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def calibrate(bindir, ranks, workdir, timeout):
    """Measures the cost model's parameters for every world size (gyre-bench --calibrate),
    so that gyre's automatic choice runs on this machine's numbers, as it would in a job
    started with GYRE_CALIBRATION. Returns the file and its lines, or (None, [])."""
    path = os.path.join(workdir, "calibration.txt")
    for p in ranks:
        cmd = [os.path.join(bindir, "gyrerun"), "-n", str(p), "--mode", "embedded",
               "--job_timeout", str(timeout - 5), "--", os.path.join(bindir, "gyre-bench"),
               "--calibrate", "--calibration_out", path, "--pin"]
        rc = run_bounded(cmd, os.path.join(workdir, "calibrate-p%d.log" % p), timeout, workdir)
        if rc != 0:
            log("compare: calibration at p=%d failed (rc=%d, see %s); auto uses the built-in "
                "model" % (p, rc, os.path.join(workdir, "calibrate-p%d.log" % p)))
            return None, []
    with open(path) as f:
        return path, [line.rstrip("\n") for line in f if line.strip() and line[0] != "#"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="allreduce, p=2,4, 4 sizes, 1 round")
    ap.add_argument("--build", required=True, help="build folder holding bin/")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 1 quick, 3 full)")
    ap.add_argument("--ops", help="comma-separated collectives")
    ap.add_argument("--ranks", help="comma-separated world sizes")
    ap.add_argument("--sizes", help="comma-separated sizes, e.g. 4,64K,1M")
    ap.add_argument("--daemon_algos", choices=["auto", "all"])
    ap.add_argument("--no_prune", action="store_true",
                    help="run every algorithm in every round")
    ap.add_argument("--no_pin", action="store_true",
                    help="leave CPU placement to the scheduler (BENCH.md pins; for contrast)")
    ap.add_argument("--cell_seconds", type=float,
                    help="target time of one cell (BENCH.md: 0.25, the programs' default)")
    ap.add_argument("--budget", type=float, help="seconds; no new round starts after this")
    ap.add_argument("--run_timeout", type=int, default=120, help="seconds per job")
    ap.add_argument("--no_calibrate", action="store_true",
                    help="gyre's auto uses its built-in model, not one measured at the start")
    ap.add_argument("--tune", action="store_true",
                    help="gyre's auto jobs run with online tuning (gyrerun --tune)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    ap.add_argument("--tag", default="", help="appended to the result file names")
    args = ap.parse_args()
    mode = "quick" if args.quick else "full"
    defaults = MODES[mode]
    args.ops = args.ops.split(",") if args.ops else defaults["ops"]
    args.ranks = [int(x) for x in args.ranks.split(",")] if args.ranks else defaults["ranks"]
    args.sizes = args.sizes or defaults["sizes"]
    args.rounds = args.rounds or defaults["rounds"]
    args.daemon_algos = args.daemon_algos or defaults["daemon_algos"]
    args.budget = args.budget or defaults["budget"]
    args.cell_seconds = args.cell_seconds or defaults["cell_seconds"]
    do_prune = defaults["prune"] and not args.no_prune and args.rounds > 1

    bindir = os.path.join(os.path.abspath(args.build), "bin")
    plan = Plan(args, bindir)
    if not plan.have_gloo:
        log("compare: gyre-bench-gloo not built (libgloo-dev missing?); Gloo left out")
    if not plan.have_mpi:
        log("compare: gyre-bench-mpi or mpirun missing; Open MPI left out")
    os.makedirs(args.out, exist_ok=True)
    date = datetime.date.today().isoformat()
    stem = os.path.join(args.out, "%s-%s%s" % (date, mode, args.tag))
    workdir = tempfile.mkdtemp(prefix="gyre-compare-")
    started = time.monotonic()
    meta = {
        "impl": "meta", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": mode, "command": shlex.join(["bench/compare.sh"] + sys.argv[1:]),
        "nproc": shell_output("nproc"),
        "cpu": shell_output("lscpu | grep 'Model name'").split(":", 1)[-1].strip(),
        "kernel": platform.release(), "load_start": load_average(),
        "ops": args.ops, "ranks": args.ranks, "sizes": args.sizes,
        "rounds_planned": args.rounds, "pruned": do_prune, "pinned": not args.no_pin,
        "cell_seconds": args.cell_seconds, "tune": args.tune,
        "commands": {},
    }
    log("compare: %s mode, work folder %s, load %s" % (mode, workdir, meta["load_start"]))
    records, failures = [], []
    m = machine_limits(bindir, "start", workdir)
    if m:
        records.append(m)
    if not args.no_calibrate:
        plan.calibration, meta["calibration"] = calibrate(bindir, args.ranks, workdir,
                                                          args.run_timeout)
    active = {(op, p): plan.runs(op, p) for op in args.ops for p in args.ranks}
    # Each forced algorithm's schedule shape, so that the report can tell a choice between
    # two schedules from a choice between two names of one schedule.
    meta["shapes"] = []
    if do_prune:
        meta["model_skipped"], meta["model_slack"] = {}, MODEL_SLACK
    for (op, p) in active:
        est = model_estimates(bindir, op, p, args.sizes, plan.calibration, meta["shapes"])
        if do_prune:
            active[(op, p)], skipped = prune_by_model(active[(op, p)], est, op, p)
            meta["model_skipped"]["%s p=%d" % (op, p)] = skipped
            log("compare: %s p=%d: the model leaves out %d forced job-sizes in round 1" %
                (op, p, len(skipped)))
    rounds_done = 0
    for rnd in range(1, args.rounds + 1):
        if rnd > 1 and time.monotonic() - started > args.budget:
            log("compare: budget of %.0f s spent; stopping after %d rounds" %
                (args.budget, rounds_done))
            break
        for (op, p), runs in active.items():
            shift = (rnd - 1) % max(1, len(runs))
            for impl, algo, build, sizes in runs[shift:] + runs[:shift]:
                name = "r%d-%s-p%d-%s-%s" % (rnd, op, p, impl, algo)
                jsonl = os.path.join(workdir, name + ".jsonl")
                cmd = build(jsonl, sizes)
                meta["commands"].setdefault(impl, shlex.join(cmd).replace(workdir, "$WORK"))
                before = cpu_probe(bindir)
                t0 = time.monotonic()
                rc = run_bounded(cmd, os.path.join(workdir, name + ".log"), args.run_timeout,
                                 workdir)
                elapsed = time.monotonic() - t0
                probes = [before, cpu_probe(bindir)]
                got = 0
                if os.path.exists(jsonl):
                    with open(jsonl) as f:
                        for line in f:
                            if line.strip():
                                rec = json.loads(line)
                                rec["round"] = rnd
                                rec["cpu_rt_ns"] = probes
                                records.append(rec)
                                got += 1
                log("  round %d %-9s p=%d %-11s %-20s rc=%d cells=%d %.1fs cpu rt %s ns" %
                    (rnd, op, p, impl, algo, rc, got, elapsed,
                     "/".join("%.0f" % x if x else "?" for x in probes)))
                if rc != 0:
                    failures.append({"impl": "failure", "round": rnd, "op": op, "ranks": p,
                                     "who": impl, "algo": algo, "rc": rc,
                                     "tail": tail(os.path.join(workdir, name + ".log"))})
        rounds_done = rnd
        if rnd == 1 and do_prune:
            round1 = [r for r in records if r.get("round") == 1]
            for key in active:
                before = sum(len(run[3]) for run in active[key])
                active[key] = prune(active[key], round1, *key)
                log("compare: %s p=%d keeps %d of %d job-sizes after round 1" %
                    (key[0], key[1], sum(len(run[3]) for run in active[key]), before))
    m = machine_limits(bindir, "end", workdir)
    if m:
        records.append(m)
    meta["rounds"] = rounds_done
    meta["load_end"] = load_average()
    meta["wall_s"] = round(time.monotonic() - started, 1)
    meta["work_dir"] = workdir
    jsonl_path = stem + ".jsonl"
    with open(jsonl_path, "w") as f:
        for rec in [meta] + records + failures:
            f.write(json.dumps(rec) + "\n")
    md = compare_table.render([meta] + records + failures, os.path.basename(jsonl_path))
    with open(stem + ".md", "w") as f:
        f.write(md)
    print(md)
    log("compare: wrote %s.md and %s (%.0f s); logs in %s" %
        (stem, jsonl_path, meta["wall_s"], workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
