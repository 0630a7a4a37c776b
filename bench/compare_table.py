#!/usr/bin/env python3
"""Renders the Markdown report of a bench/compare.sh run from its JSONL file.

    python3 bench/compare_table.py bench/results/2026-01-01-full.jsonl > report.md

Per (op, p, size): the median over rounds of each implementation's best algorithm in that
round, gyre's automatic choice, and ratios taken per round and then their median over
rounds (BENCH.md: only ratios from one interleaved run mean anything). Standard library only.

Where compare.py probed the CPU placement around every job (`cpu_rt_ns`: the cache-line round
trip between the first two CPUs before and after it; gyre-machine-limits --probe), a second
headline table compares only jobs measured in the same placement throughout.
"""

import collections
import statistics
import sys

import json

PEERS = ("gloo", "openmpi")
NAMES = {"gyre": "gyre", "gyre-daemon": "gyre-daemon", "gloo": "Gloo", "openmpi": "Open MPI"}
MIB = 1 << 20


def fmt_size(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return "%d %s" % (b // scale, unit)
    return "%d B" % b


def fmt_time(us):
    if us is None:
        return "-"
    if us < 100:
        return "%.1f µs" % us
    if us < 1000:
        return "%.0f µs" % us
    if us < 1e6:
        return "%.3g ms" % (us / 1000) if us < 1e5 else "%.0f ms" % (us / 1000)
    return "%.2f s" % (us / 1e6)


def fmt_delta(us):
    sign = "+" if us >= 0 else "-"
    return sign + fmt_time(abs(us))


def fmt_ratio(values):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return "%.2f" % med
    return "%.2f (%.2f-%.2f)" % (med, min(values), max(values))


def most_common(names):
    return collections.Counter(names).most_common(1)[0][0] if names else "-"


class Data:
    def __init__(self, records):
        self.meta = next((r for r in records if r.get("impl") == "meta"), {})
        self.machines = [r for r in records if r.get("impl") == "machine"]
        self.failures = [r for r in records if r.get("impl") == "failure"]
        self.cells = [r for r in records if r.get("impl") not in ("meta", "machine", "failure")]
        self.wrong = [r for r in self.cells if r.get("ok") is False]
        # (op, p, bytes, impl, round) -> [(median_us, algo)]
        self.by = collections.defaultdict(list)
        for r in self.cells:
            if r.get("ok") is False:
                continue
            self.by[(r["op"], r["ranks"], r["bytes"], r["impl"], r.get("round", 1))].append(
                (r["median_us"], r["algo"]))
        self.rounds = sorted({r.get("round", 1) for r in self.cells}) or [1]
        # (op, p, bytes, algo) -> the schedule's shape hash (gyre-bench --estimate), where
        # the run recorded them.
        self.shapes = {(op, p, b, a): h for op, p, b, a, h in self.meta.get("shapes", [])}
        # Placement of each job (near, far, changed, or None where it was not probed), and
        # the same index as `by` with it: (op, p, bytes, impl, round) -> [(median_us, algo,
        # placement)].
        self.cut = placement_cut([x for r in self.cells for x in (r.get("cpu_rt_ns") or [])])
        self.by_place = collections.defaultdict(list)
        for r in self.cells:
            if r.get("ok") is not False:
                self.by_place[(r["op"], r["ranks"], r["bytes"], r["impl"],
                               r.get("round", 1))].append(
                    (r["median_us"], r["algo"], placement(r.get("cpu_rt_ns"), self.cut)))

    def keys(self, op):
        return sorted({(k[1], k[2]) for k in self.by if k[0] == op})

    def ops(self):
        seen = []
        for r in self.cells:
            if r["op"] not in seen:
                seen.append(r["op"])
        return seen

    def best(self, op, p, b, impl, rnd, want=None):
        """(median, algo) of impl's fastest algorithm in one round; want filters algos."""
        entries = [e for e in self.by.get((op, p, b, impl, rnd), [])
                   if want is None or want(e[1])]
        return min(entries) if entries else None

    def per_round(self, op, p, b, impl, want=None):
        out = {}
        for rnd in self.rounds:
            e = self.best(op, p, b, impl, rnd, want)
            if e:
                out[rnd] = e
        return out

    def choice_ratios(self, op, p, b, auto, forced, by_shape):
        """Per round, the fastest forced job of the algorithm auto ran (or, by_shape, of any
        algorithm whose schedule has its shape) over the round's best forced job."""
        out = []
        for rnd, (_, chose) in auto.items():
            want = self.shapes.get((op, p, b, chose[5:])) if by_shape else None
            same = [e for e in self.by.get((op, p, b, "gyre", rnd), []) if e[1] == chose[5:]
                    or (want and self.shapes.get((op, p, b, e[1])) == want)]
            if same and rnd in forced and forced[rnd][0] > 0:
                out.append(min(same)[0] / forced[rnd][0])
        return out

    def matched_auto_ratios(self, op, p, b, chosen_only, by_shape=True):
        """Per (round, placement): gyre's auto job over the best forced gyre job measured in
        that same placement throughout; or, chosen_only, the fastest forced job of the
        algorithm auto ran (algorithms of one schedule shape taken as one, by_shape) over that
        best. A forced job that ran in the other placement says nothing of auto's choice: a
        loopback exchange takes up to twice as long far as near."""
        out = []
        for rnd in self.rounds:
            jobs = self.by_place.get((op, p, b, "gyre", rnd), [])
            for where in ("near", "far"):
                here = [e for e in jobs if e[2] == where]
                autos = [e for e in here if is_auto(e[1])]
                forced = [e for e in here if not is_auto(e[1])]
                if not autos or not forced:
                    continue
                best = min(forced)[0]
                if best <= 0:
                    continue
                if not chosen_only:
                    out.append(min(autos)[0] / best)
                    continue
                chose = min(autos)[1][5:]
                want = self.shapes.get((op, p, b, chose)) if by_shape else None
                same = [e[0] for e in forced if e[1] == chose or
                        (want and self.shapes.get((op, p, b, e[1])) == want)]
                if same:
                    out.append(min(same) / best)
        return out

    def peer_best(self, op, p, b):
        out = {}
        for rnd in self.rounds:
            cands = [self.best(op, p, b, peer, rnd) for peer in PEERS]
            cands = [(c[0], c[1], peer) for c, peer in zip(cands, PEERS) if c]
            if cands:
                out[rnd] = min(cands)
        return out


    def matched_ratios(self, op, p, b):
        """gyre's best / the best peer's best per (round, placement), over the jobs measured
        in that one placement throughout, for every pair where both exist. The peer is the
        one that was best in most rounds (as in the headline), so that a placement where
        only a slower peer ran does not stand in for it."""
        peer = self.peer_best(op, p, b)
        if not peer:
            return []
        best_peer = most_common([v[2] for v in peer.values()])
        out = []
        for rnd in self.rounds:
            for where in ("near", "far"):
                def best(impl):
                    return min((e[0] for e in self.by_place.get((op, p, b, impl, rnd), [])
                                if e[2] == where), default=None)
                g, q = best("gyre"), best(best_peer)
                if g is not None and q:
                    out.append(g / q)
        return out

    def placements(self):
        """Counts jobs (not cells) per placement, and the median probe of near and far."""
        jobs = {}
        for r in self.cells:
            key = (r.get("round", 1), r["op"], r["ranks"], r["impl"], r["algo"].split(":")[0])
            jobs[key] = r.get("cpu_rt_ns")
        count = collections.Counter(placement(v, self.cut) for v in jobs.values())
        probes = [x for v in jobs.values() for x in (v or []) if x]
        near = [x for x in probes if x < self.cut]
        far = [x for x in probes if x >= self.cut]
        return count, (statistics.median(near) if near else None,
                       statistics.median(far) if far else None)


def placement_cut(probes):
    """The round trip (ns) that parts near from far: the geometric middle of the fastest and
    slowest probe, when the slowest is at least twice the fastest (else every job is near)."""
    probes = [x for x in probes if x]
    if not probes or max(probes) < 2 * min(probes):
        return float("inf")
    return (min(probes) * max(probes)) ** 0.5


def placement(probes, cut):
    if not probes or any(not x for x in probes):
        return None
    if max(probes) < cut:
        return "near"
    if min(probes) >= cut:
        return "far"
    return "changed"


def is_auto(a):
    return a.startswith("auto:")


def ratios(num, den):
    return [num[r][0] / den[r][0] for r in num if r in den and den[r][0] > 0]


def summary_time(per_round):
    if not per_round:
        return None, "-"
    return (statistics.median(v[0] for v in per_round.values()),
            most_common([v[1] for v in per_round.values()]))


def machine_rates(data):
    c = max((m.get("loopback_2pairs_GBps", 0) for m in data.machines), default=0)
    r = max((m.get("reduce_f32_GBps", 0) for m in data.machines), default=0)
    return c, r


def ratio_tables(d, w, ratios_of):
    """Writes one table per op of the median of ratios_of(op, p, bytes) per cell; returns
    those ratio lists by (op, p, bytes) for the cells measured."""
    out = {}
    for op in d.ops():
        keys = d.keys(op)
        sizes = sorted({b for _, b in keys})
        w("| %s | %s |" % (op, " | ".join(fmt_size(b) for b in sizes)))
        w("|---|%s" % ("---|" * len(sizes)))
        for p in sorted({p for p, _ in keys}):
            row = []
            for b in sizes:
                r = []
                if (p, b) in keys:
                    r = out[(op, p, b)] = ratios_of(op, p, b)
                row.append("%.2f" % statistics.median(r) if r else "-")
            w("| p=%d | %s |" % (p, " | ".join(row)))
        w("")
    return out


def render(records, jsonl_name=""):
    d = Data(records)
    m = d.meta
    out = []
    w = out.append
    w("# gyre vs Gloo vs Open MPI on loopback TCP: %s (%s)" % (m.get("date", "?"),
                                                            m.get("mode", "?")))
    w("")
    w("Produced by `%s` in %s s; raw data: `%s`. Method: BENCH.md (barrier, clock, op, "
      "clock; per-iteration time = max over ranks; N from the median warm-up for ~%s s, "
      "5 <= N <= 1000; medians). Every job is a fresh set of processes per (round, op, p, "
      "implementation, algorithm), jobs alternate between implementations, and %s." %
      (m.get("command", "bench/compare.sh"), m.get("wall_s", "?"), jsonl_name,
       m.get("cell_seconds", 0.25), "every rank of every implementation is pinned to CPU rank mod %s" % m.get("nproc", "?")
       if m.get("pinned", True) else "no rank is pinned (--no_pin)"))
    w("")
    w("- Machine: %s CPUs, %s, kernel %s; load average %s at the start, %s at the end." %
      (m.get("nproc", "?"), m.get("cpu", "?"), m.get("kernel", "?"), m.get("load_start", "?"),
       m.get("load_end", "?")))
    for mach in d.machines:
        w("- Limits (%s): loopback TCP with 2 concurrent pairs C = %.2f GB/s (best of the "
          "trials; median %.2f), one pair %.2f GB/s; 4 B ping-pong one way %.1f µs (%.1f µs with "
          "one connection each way, where no reply carries the ACK); float32 a += b at 64 MiB "
          "R = %.2f GB/s (gyre's kernel %.2f); memcpy %.2f GB/s." %
          (mach.get("when", "?"), mach.get("loopback_2pairs_GBps", 0),
           mach.get("loopback_2pairs_median_GBps", 0), mach.get("loopback_1pair_GBps", 0),
           mach.get("pingpong_4B_oneway_us", 0), mach.get("pingpong_4B_oneway_split_us", 0),
           mach.get("reduce_f32_GBps", 0),
           mach.get("reduce_f32_gyre_GBps", 0), mach.get("memcpy_GBps", 0)) +
          (" A futex hand-off round trip between two processes on one CPU (what a call through "
           "the daemon adds at least where a program and its gyred share a core) %.1f µs, "
           "between two threads %.1f µs." % (mach["handoff_process_rt_us"],
                                             mach.get("handoff_thread_rt_us", 0))
           if "handoff_process_rt_us" in mach else ""))
    w("- Rounds: %s%s. Ratios are per round, then the median over rounds (range in "
      "brackets when there is more than one round)." %
      (m.get("rounds", len(d.rounds)),
       "; after round 1 each algorithm runs only at the sizes where it was its "
       "implementation's best (gyre's auto always runs every size)" if m.get("pruned") else ""))
    count, (near_ns, far_ns) = d.placements()
    if sum(n for k, n in count.items() if k):
        w("- CPU placement, from the cache-line round trip between the two CPUs probed before "
          "and after every job (`gyre-machine-limits --probe`): %d jobs near (median %s ns), "
          "%d far (median %s ns), %d changed during the job%s. A loopback exchange between "
          "the two CPUs takes up to twice as long far as near." %
          (count.get("near", 0), "%.0f" % near_ns if near_ns else "-", count.get("far", 0),
           "%.0f" % far_ns if far_ns else "-", count.get("changed", 0),
           ", %d not probed" % count[None] if count.get(None) else ""))
    w("- Open MPI: `--mca pml ob1 --mca btl tcp,self`, with and without "
      "`--mca mpi_yield_when_idle 1` (labels `default` / `yield`); the faster counts.")
    skipped = m.get("model_skipped") or {}
    if any(skipped.values()):
        w("- Left out of round 1 because the calibrated model put them over %gx behind its "
          "fastest algorithm at that size (`gyre-bench --estimate P`): %s." %
          (m.get("model_slack", 3.0),
           "; ".join("%s: %s" % (k, ", ".join(v)) for k, v in skipped.items() if v)))
    if m.get("tune"):
        w("- gyre's `auto` ran with online tuning (`gyrerun --tune`): the first calls of each "
          "size tried the model's close candidates, and the warm-up covered them.")
    if m.get("calibration"):
        w("- gyre's `auto` chose from the cost model calibrated at the start of this run "
          "(`gyre-bench --calibrate`, passed as `--calibration`): %s." %
          "; ".join("`%s`" % line for line in m["calibration"] if "alpha" in line or "beta_GBps" in line))
    else:
        w("- gyre's `auto` chose from its built-in cost model (no calibration in this run).")
    w("")

    w("## Headline: gyre's best / the best peer's best (median over rounds; target <= 0.9)")
    w("")
    ratio_tables(d, w, lambda op, p, b: ratios(d.per_round(op, p, b, "gyre"),
                                               d.peer_best(op, p, b)))

    short_matched, unmatched, pairs = [], 0, []
    if any(e[2] in ("near", "far") for v in d.by_place.values() for e in v):
        w("## The same, placement-matched: only jobs measured in one placement throughout, "
          "gyre against the peers in the same placement (median over the (round, placement) "
          "pairs; `-` where there was none)")
        w("")
        matched = ratio_tables(d, w, d.matched_ratios)
        for (op, p, b), r in matched.items():
            pairs.append(len(r))
            if not r:
                unmatched += 1
            elif statistics.median(r) > 0.9:
                short_matched.append("%s p=%d %s: %.2f" % (op, p, fmt_size(b),
                                                           statistics.median(r)))

    short_peer, short_auto, short_choice, short_daemon, near = [], [], [], [], []
    short_shape, short_auto_matched, short_choice_matched = [], [], []
    for op in d.ops():
        w("## %s (float32%s)" % (op, " sum" if op in ("allreduce", "reduce",
                                                      "reduce_scatter") else ""))
        w("")
        w("| p | size | gyre best | gyre auto (chose) | gyre-daemon auto | Gloo best | "
          "Open MPI best | gyre / best peer | auto / best peer | auto / gyre forced |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for p, b in d.keys(op):
            g = d.per_round(op, p, b, "gyre")
            ga = d.per_round(op, p, b, "gyre", is_auto)
            gf = d.per_round(op, p, b, "gyre", lambda a: not is_auto(a))
            gd = d.per_round(op, p, b, "gyre-daemon", is_auto)
            peer = d.peer_best(op, p, b)
            g_t, g_a = summary_time(g)
            ga_t, ga_a = summary_time(ga)
            gd_t, _ = summary_time(gd)
            cells = []
            for impl in PEERS:
                t, a = summary_time(d.per_round(op, p, b, impl))
                cells.append("%s (%s)" % (fmt_time(t), a) if t is not None else "-")
            r_peer = ratios(g, peer)
            r_auto_peer = ratios(ga, peer)
            r_auto = ratios(ga, gf)
            daemon = "-"
            if gd_t is not None and ga_t is not None:
                daemon = "%s (%s, %.2fx)" % (fmt_time(gd_t), fmt_delta(gd_t - ga_t),
                                             gd_t / ga_t)
                if (b < MIB and gd_t - ga_t > 10) or (b >= 16 * MIB and gd_t > 1.05 * ga_t):
                    short_daemon.append("%s p=%d %s: %s (%.2fx)" %
                                        (op, p, fmt_size(b), fmt_delta(gd_t - ga_t),
                                         gd_t / ga_t))
            w("| %d | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |" % (
                p, fmt_size(b), fmt_time(g_t), g_a, "%s (%s)" % (fmt_time(ga_t), ga_a[5:])
                if ga_t is not None else "-", daemon, cells[0], cells[1], fmt_ratio(r_peer),
                fmt_ratio(r_auto_peer), fmt_ratio(r_auto)))
            if r_peer and statistics.median(r_peer) > 0.9:
                best_peer = most_common([v[2] for v in peer.values()])
                short_peer.append("%s p=%d %s: %.2f (vs %s)" % (
                    op, p, fmt_size(b), statistics.median(r_peer), NAMES[best_peer]))
            if r_auto and statistics.median(r_auto) > 1.1:
                short_auto.append("%s p=%d %s: auto:%s %.2fx the best forced (%s)" % (
                    op, p, fmt_size(b), ga_a[5:], statistics.median(r_auto),
                    summary_time(gf)[1]))
            # The choice alone: the forced job of the algorithm auto ran against the best
            # forced job of the same round, so the spread between fresh jobs of one
            # schedule (and the minimum over many forced jobs) does not count against it;
            # then the same with algorithms of one schedule shape taken as one choice.
            for by_shape, short in ((False, short_choice), (True, short_shape)):
                if by_shape and not d.shapes:
                    continue
                r_choice = d.choice_ratios(op, p, b, ga, gf, by_shape)
                if r_choice and statistics.median(r_choice) > 1.1:
                    short.append("%s p=%d %s: %s measured %.2fx the best forced (%s)" % (
                        op, p, fmt_size(b), ga_a[5:], statistics.median(r_choice),
                        summary_time(gf)[1]))
            for chosen_only, short in ((False, short_auto_matched),
                                       (True, short_choice_matched)):
                r_m = d.matched_auto_ratios(op, p, b, chosen_only)
                if r_m and statistics.median(r_m) > 1.1:
                    short.append("%s p=%d %s: %.2fx (%d pair%s)" % (
                        op, p, fmt_size(b), statistics.median(r_m), len(r_m),
                        "" if len(r_m) == 1 else "s"))
        w("")

    c, r = machine_rates(d)
    big = [(p, b) for p, b in d.keys("allreduce") if b >= 16 * MIB]
    if big and c > 0 and r > 0:
        w("## allreduce against the machine's limit")
        w("")
        w("Bound t = 2(p-1)n/C + (p-1)n/(2R) with C = %.2f GB/s and R = %.2f GB/s (the best "
          "of the measurements above); %% of bound = bound / median time." % (c, r))
        w("")
        w("Above 100%% means C or R was measured below the machine's real limit (a loaded "
          "machine: load average %s at the start, on %s CPUs)." %
          (m.get("load_start", "?"), m.get("nproc", "?")))
        w("")
        w("| p | size | bound | gyre best | % of bound | gyre auto | % of bound | best peer |")
        w("|---|---|---|---|---|---|---|---|")
        for p, b in big:
            bound_us = (2 * (p - 1) * b / (c * 1e9) + (p - 1) * b / (2 * r * 1e9)) * 1e6
            g_t, g_a = summary_time(d.per_round("allreduce", p, b, "gyre"))
            ga_t, _ = summary_time(d.per_round("allreduce", p, b, "gyre", is_auto))
            peer = d.peer_best("allreduce", p, b)
            pt = statistics.median(v[0] for v in peer.values()) if peer else None
            pa = most_common([v[2] for v in peer.values()]) if peer else "-"
            w("| %d | %s | %s | %s (%s) | %s | %s | %s | %s (%s) |" % (
                p, fmt_size(b), fmt_time(bound_us), fmt_time(g_t), g_a,
                "%.0f%%" % (100 * bound_us / g_t) if g_t else "-", fmt_time(ga_t),
                "%.0f%%" % (100 * bound_us / ga_t) if ga_t else "-", fmt_time(pt),
                NAMES.get(pa, pa)))
            if g_t and bound_us / g_t < 0.8:
                near.append("allreduce p=%d %s: %.0f%% of the bound" %
                            (p, fmt_size(b), 100 * bound_us / g_t))
        w("")

    w("## Against the targets")
    w("")
    total = sum(len(d.keys(op)) for op in d.ops())
    w("- gyre best <= 0.9 x best peer: %d of %d cells short%s" % (
        len(short_peer), total, ": " + "; ".join(short_peer) if short_peer else "."))
    if pairs:
        w("- the same, placement-matched: %d of %d cells short (%d without a matched pair; "
          "%d-%d pairs per cell, median %g)%s" % (
              len(short_matched), total - unmatched, unmatched, min(pairs), max(pairs),
              statistics.median(pairs), ": " + "; ".join(short_matched) if short_matched else "."))
    w("- auto within 10%% of gyre's best forced algorithm: %d cells short%s" % (
        len(short_auto), ": " + "; ".join(short_auto) if short_auto else "."))
    w("- auto's choice, judged by the forced jobs of the same round (the chosen algorithm's "
      "median against the best forced median): %d cells short%s" % (
          len(short_choice), ": " + "; ".join(short_choice) if short_choice else "."))
    if d.shapes:
        w("- the same, with algorithms that build one schedule shape (gyre-bench --estimate's "
          "`shape`: the same steps between the same ranks, only tags and offsets differ) taken "
          "as one choice: %d cells short%s" % (
              len(short_shape), ": " + "; ".join(short_shape) if short_shape else "."))
    if pairs:
        w("- auto against the best forced job in the same round and placement (median over "
          "the (round, placement) pairs; cells without a pair are left out): %d cells short%s"
          % (len(short_auto_matched),
             ": " + "; ".join(short_auto_matched) if short_auto_matched else "."))
        w("- auto's choice the same way (the chosen algorithm's forced job; algorithms of one "
          "schedule shape count as one where the run recorded shapes): %d cells short%s" % (
              len(short_choice_matched),
              ": " + "; ".join(short_choice_matched) if short_choice_matched else "."))
    w("- daemon vs embedded (auto): <= +10 µs below 1 MiB, <= 5%% at 16 MiB and above: "
      "%d cells short%s" % (len(short_daemon),
                            ": " + "; ".join(short_daemon) if short_daemon else "."))
    if big:
        w("- allreduce >= 80%% of the bound at 16 and 64 MiB: %d cells short%s" % (
            len(near), ": " + "; ".join(near) if near else "."))
    if d.wrong:
        w("- WRONG RESULTS: " + "; ".join("%s %s %s p=%d %s" % (
            x["impl"], x["algo"], x["op"], x["ranks"], fmt_size(x["bytes"])) for x in d.wrong))
    if d.failures:
        w("")
        w("## Jobs that failed")
        w("")
        for f in d.failures:
            w("- round %d %s p=%d %s %s: exit %d: `%s`" % (
                f["round"], f["op"], f["ranks"], f["who"], f["algo"], f["rc"],
                f["tail"].replace("\n", " | ")[-300:]))
    cmds = m.get("commands", {})
    if cmds:
        w("")
        w("## Command lines (one job each; `$WORK` is the run's temp folder)")
        w("")
        for impl, cmd in cmds.items():
            w("- %s: `%s`" % (NAMES.get(impl, impl), cmd))
    w("")
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 1
    with open(sys.argv[1]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    print(render(records, sys.argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
