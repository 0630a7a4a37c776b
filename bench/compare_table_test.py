#!/usr/bin/env python3
"""Checks compare_table's placement-matched comparison on made-up records: which jobs count as
near, far or changed, that a ratio is only taken between jobs of one placement, and that the
ordinary headline (BENCH.md's method) ignores placement. Standard library only."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_table  # noqa: E402


def cell(impl, algo, rnd, us, probes, size=4, p=2, op="allreduce"):
    return {"impl": impl, "algo": algo, "op": op, "ranks": p, "bytes": size, "round": rnd,
            "median_us": us, "ok": True, "cpu_rt_ns": probes}


NEAR, FAR, CHANGED = [60, 70], [320, 310], [65, 330]


class PlacementTest(unittest.TestCase):
    def test_cut_parts_two_clusters_and_leaves_one_cluster_near(self):
        cut = compare_table.placement_cut([60, 70, 320, 310])
        self.assertTrue(70 < cut < 310)
        self.assertEqual(compare_table.placement(NEAR, cut), "near")
        self.assertEqual(compare_table.placement(FAR, cut), "far")
        self.assertEqual(compare_table.placement(CHANGED, cut), "changed")
        self.assertIsNone(compare_table.placement(None, cut))
        self.assertIsNone(compare_table.placement([60, None], cut))
        # No value twice another: one placement all along.
        one = compare_table.placement_cut([60, 70, 100])
        self.assertEqual(compare_table.placement([100, 60], one), "near")

    def test_matched_ratio_pairs_only_jobs_of_one_placement(self):
        records = [
            {"impl": "meta"},
            # Round 1: gyre near (10) and far (11); Open MPI far (20), near (12) and changed (8);
            # Gloo far (50).
            cell("gyre", "ring", 1, 10.0, NEAR),
            cell("gyre", "tree", 1, 11.0, FAR),
            cell("openmpi", "default", 1, 20.0, FAR),
            cell("openmpi", "yield", 1, 12.0, NEAR),
            cell("openmpi", "tuned", 1, 8.0, CHANGED),
            cell("gloo", "ring", 1, 50.0, FAR),
            # Round 2: gyre far (30) and near (40); Open MPI far (25); Gloo near (100).
            cell("gyre", "ring", 2, 30.0, FAR),
            cell("gyre", "tree", 2, 40.0, NEAR),
            cell("openmpi", "default", 2, 25.0, FAR),
            cell("gloo", "ring", 2, 100.0, NEAR),
        ]
        d = compare_table.Data(records)
        got = sorted(round(x, 4) for x in d.matched_ratios("allreduce", 2, 4))
        # Against Open MPI, the best peer of both rounds: round 1 near 10/12 and far 11/20,
        # round 2 far 30/25. Its changed job (8) never counts, and Gloo, slower, does not
        # stand in for it where it has no job (round 2 near).
        self.assertEqual(got, sorted(round(x, 4) for x in (10 / 12, 11 / 20, 30 / 25)))
        # The ordinary ratio takes each round's best whatever the placement: 10/8, 30/25.
        plain = compare_table.ratios(d.per_round("allreduce", 2, 4, "gyre"),
                                     d.peer_best("allreduce", 2, 4))
        self.assertEqual(sorted(round(x, 4) for x in plain), [1.2, 1.25])
        count, (near_ns, far_ns) = d.placements()
        self.assertEqual(count["near"], 4)
        self.assertEqual(count["far"], 5)
        self.assertEqual(count["changed"], 1)
        # Every probe counts, a changed job's two as well.
        self.assertEqual(near_ns, 65)
        self.assertEqual(far_ns, 320)

    def test_report_shows_the_matched_table_only_when_jobs_were_probed(self):
        probed = [{"impl": "meta"}, cell("gyre", "ring", 1, 10.0, NEAR),
                  cell("openmpi", "default", 1, 20.0, NEAR)]
        text = compare_table.render(probed)
        self.assertIn("placement-matched", text)
        self.assertIn("| p=2 | 0.50 |", text)
        self.assertIn("2 jobs near", text)
        unprobed = [{"impl": "meta"}, cell("gyre", "ring", 1, 10.0, None),
                    cell("openmpi", "default", 1, 20.0, None)]
        text = compare_table.render(unprobed)
        self.assertNotIn("placement-matched", text)
        self.assertNotIn("CPU placement", text)


class MatchedAutoTest(unittest.TestCase):
    def records(self):
        # Round 1: auto ran ring far (12); ring's forced job ran far (13), tree's near (10).
        # Round 2: auto (ring) and both forced jobs far: auto 30, ring 34, tree 20.
        return [{"impl": "meta"},
                cell("gyre", "auto:ring", 1, 12.0, FAR),
                cell("gyre", "ring", 1, 13.0, FAR),
                cell("gyre", "tree", 1, 10.0, NEAR),
                cell("gyre", "auto:ring", 2, 30.0, FAR),
                cell("gyre", "ring", 2, 34.0, FAR),
                cell("gyre", "tree", 2, 20.0, FAR)]

    def test_only_jobs_of_one_round_and_placement_are_compared(self):
        d = compare_table.Data(self.records())
        # Round 1 far: auto 12 against ring 13, the only forced job there; tree ran near.
        # Round 2 far: auto 30 and ring 34 against tree 20.
        self.assertEqual(sorted(round(x, 4) for x in
                                d.matched_auto_ratios("allreduce", 2, 4, chosen_only=False)),
                         sorted(round(x, 4) for x in (12 / 13, 30 / 20)))
        self.assertEqual(sorted(round(x, 4) for x in
                                d.matched_auto_ratios("allreduce", 2, 4, chosen_only=True)),
                         sorted(round(x, 4) for x in (13 / 13, 34 / 20)))

    def test_report_lists_the_matched_shortfalls(self):
        text = compare_table.render(self.records())
        # Medians over the pairs: (12/13 + 30/20) / 2 = 1.21, (1 + 1.7) / 2 = 1.35.
        self.assertIn("same round and placement (median over the (round, placement) pairs; "
                      "cells without a pair are left out): 1 cells short: allreduce p=2 4 B: "
                      "1.21x (2 pairs)", text)
        self.assertIn("shapes): 1 cells short: allreduce p=2 4 B: 1.35x (2 pairs)", text)

    def test_a_job_in_the_other_placement_gives_no_pair(self):
        records = [{"impl": "meta"}, cell("gyre", "auto:ring", 1, 12.0, FAR),
                   cell("gyre", "tree", 1, 6.0, NEAR)]
        d = compare_table.Data(records)
        self.assertEqual(d.matched_auto_ratios("allreduce", 2, 4, chosen_only=False), [])
        self.assertIn("left out): 0 cells short.", compare_table.render(records))


class LimitsTest(unittest.TestCase):
    def test_the_handoff_round_trip_is_shown_where_it_was_measured(self):
        mach = {"impl": "machine", "when": "start", "loopback_2pairs_GBps": 7.0}
        base = [{"impl": "meta"}, cell("gyre", "ring", 1, 10.0, NEAR)]
        self.assertNotIn("hand-off", compare_table.render(base + [mach]))
        mach = dict(mach, handoff_process_rt_us=12.6, handoff_thread_rt_us=6.6)
        text = compare_table.render(base + [mach])
        self.assertIn("share a core) 12.6 µs, between two threads 6.6 µs.", text)


class ShapeTest(unittest.TestCase):
    def records(self, shapes):
        # auto ran hierarchical (25); its forced job took 30, binomial's 20.
        return [{"impl": "meta", "shapes": shapes},
                cell("gyre", "auto:hierarchical", 1, 25.0, NEAR, op="broadcast", p=8),
                cell("gyre", "hierarchical", 1, 30.0, NEAR, op="broadcast", p=8),
                cell("gyre", "binomial", 1, 20.0, NEAR, op="broadcast", p=8)]

    def test_a_choice_between_two_names_of_one_schedule_is_not_short(self):
        same = [["broadcast", 8, 4, "binomial", "00aa"],
                ["broadcast", 8, 4, "hierarchical", "00aa"]]
        text = compare_table.render(self.records(same))
        self.assertIn("hierarchical measured 1.50x the best forced (binomial)", text)
        self.assertIn("taken as one choice: 0 cells short.", text)

    def test_a_choice_between_two_schedules_stays_short(self):
        other = [["broadcast", 8, 4, "binomial", "00aa"],
                 ["broadcast", 8, 4, "hierarchical", "00bb"]]
        text = compare_table.render(self.records(other))
        self.assertIn("taken as one choice: 1 cells short: broadcast p=8 4 B: hierarchical "
                      "measured 1.50x the best forced (binomial)", text)

    def test_without_recorded_shapes_the_line_is_left_out(self):
        text = compare_table.render(self.records([]))
        self.assertIn("hierarchical measured 1.50x", text)
        self.assertNotIn("taken as one choice", text)


if __name__ == "__main__":
    unittest.main()
