"""bench/torch_alloc/table.py without a GPU: the table of run.sh's results from made-up workload records, one
round and several (step times the median over the rounds of each run's figure; losses and memory the first
round's). Run: python3 -m unittest discover -s tests/torch -p 'test_*.py'"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("VRAM_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(SRC, "bench", "torch_alloc", "table.py")


def record(step_ms, losses=(2.0, 1.5), reserved=4 << 30, allocated=3 << 30):
    return {"workload": "gpt2", "steps": len(step_ms), "losses": list(losses), "step_ms": list(step_ms),
            "step_ms_median": sorted(step_ms)[len(step_ms) // 2], "peak_reserved": reserved,
            "peak_allocated": allocated, "torch": "2.x", "device": "test"}


def row(out, mode):
    for line in out.splitlines():
        if line.startswith(f"| {mode} |"):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no row for {mode} in:\n{out}")


class Table(unittest.TestCase):
    def run_table(self, files):
        with tempfile.TemporaryDirectory() as d:
            for name, rec in files.items():
                with open(os.path.join(d, name), "w") as f:
                    f.write("log line\n" + json.dumps(rec) + "\n")
            p = subprocess.run([sys.executable, TABLE, d], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(d, "summary.json")) as f:
                return p.stdout, json.load(f)

    def test_one_round(self):
        out, summary = self.run_table({"gpt2-native.json": record([9, 9, 10, 10, 10, 10]),
                                       "gpt2-vram_stitch.json": record([9, 9, 11, 11, 11, 11], reserved=3 << 30)})
        r = row(out, "vram_stitch")
        self.assertEqual(r[1], "bitwise equal")
        self.assertEqual(r[4], "1.000")            # reserved / allocated
        self.assertEqual((r[6], r[7]), ("11.0", "+10.0%"))
        self.assertEqual((r[8], r[9]), ("11.0", "+10.0%"))
        self.assertEqual(summary["gpt2-vram_stitch"]["rounds"], 1)
        self.assertNotIn("rounds", out)

    def test_rounds_take_the_median(self):
        nat = [[10] * 6, [20] * 6, [12] * 6]              # medians 10, 20, 12: 12
        vram = [[30] * 6, [11] * 6, [13] * 6]             # 30, 11, 13: 13 (the slow first run does not decide)
        files = {"gpt2-native.json": record(nat[0]), "gpt2-vram_stitch.json": record(vram[0], losses=(2.0, 1.4))}
        for k in (1, 2):
            files[f"gpt2-native.r{k + 1}.json"] = record(nat[k], losses=(9.0, 9.0))  # only round 1's losses count
            files[f"gpt2-vram_stitch.r{k + 1}.json"] = record(vram[k])
        out, summary = self.run_table(files)
        r = row(out, "vram_stitch")
        self.assertEqual(r[1], "max diff 1.00e-01")
        self.assertEqual((r[6], r[7]), ("13.0", "+8.3%"))
        self.assertEqual((r[8], r[9]), ("13.0", "+8.3%"))
        self.assertIn("the median of 3 rounds", out)
        self.assertEqual(summary["gpt2-native"]["rounds"], 3)
        self.assertEqual(summary["gpt2-native"]["step_ms_rounds_median"], 12)

    def test_a_failed_round_is_left_out(self):
        files = {"gpt2-native.json": record([10] * 6), "gpt2-native.r2.json": {"error": "x"},
                 "gpt2-vram_stitch.json": record([10] * 6), "gpt2-vram_stitch.r2.json": record([14] * 6)}
        out, summary = self.run_table(files)
        self.assertEqual(row(out, "vram_stitch")[6], "12.0")  # median of 10 and 14
        self.assertEqual(summary["gpt2-native"]["rounds"], 1)


if __name__ == "__main__":
    unittest.main()
