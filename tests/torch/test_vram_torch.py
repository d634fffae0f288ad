"""python/vram_torch without a GPU: PyTorch's statistics keys, the snapshot dict (and that
tools/torch_snapshot.py converts its pickle for `vram replay`), finding the library, the VRAM_TORCH
hook of python/sitecustomize.py, and enable() end to end against a stand-in torch module. With
$VRAM_TORCH_TEST_LIB (the meta build of the library, set by CTest) the library itself is driven on meta
devices through ctypes. Run: PYTHONPATH=python python3 -m unittest discover -s tests/torch -p 'test_*.py'"""
import ctypes
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("VRAM_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
PYDIR = os.path.join(SRC, "python")
sys.path.insert(0, PYDIR)

from vram_torch import _lib, _snapshot, _stats, _hook  # noqa: E402

MiB = 1 << 20
TEST_LIB = os.environ.get("VRAM_TORCH_TEST_LIB")

# torch.cuda.memory_stats()'s keys (PyTorch 2.x, DeviceStats through memory_stats_as_nested_dict)
TORCH_KEYS = sorted(
    [f"{s}.{p}.{m}" for s in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                              "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
     for p in ("all", "small_pool", "large_pool") for m in ("current", "peak", "allocated", "freed")]
    + [f"{s}.{m}" for s in ("oversize_allocations", "oversize_segments") for m in ("current", "peak", "allocated", "freed")]
    + ["num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_sync_all_streams",
       "max_split_size"])


def load_converter():
    spec = importlib.util.spec_from_file_location("torch_snapshot", os.path.join(SRC, "tools", "torch_snapshot.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def vram_snapshot(base, stream):
    """What vram_torch_snapshot_json gives for one device (src/alloc/history.c's fields)."""
    return {
        "segments": [{"device": 0, "address": base, "total_size": 4 * MiB, "stream": stream, "segment_type": "large",
                      "allocated_size": 3 * MiB, "active_size": 3 * MiB, "requested_size": 3 * MiB - 100,
                      "is_expandable": True,
                      "blocks": [{"address": base, "size": 3 * MiB, "requested_size": 3 * MiB - 100,
                                  "state": "active_allocated"},
                                 {"address": base + 3 * MiB, "size": MiB, "requested_size": 0, "state": "inactive"}]}],
        "device_traces": [[
            {"action": "segment_map", "addr": base, "size": 4 * MiB, "stream": stream, "time_us": 1.5},
            {"action": "alloc", "addr": base, "size": 3 * MiB - 100, "stream": stream, "time_us": 2},
            {"action": "alloc", "addr": base + 3 * MiB, "size": 512, "stream": stream, "time_us": 3},
            {"action": "free_requested", "addr": base + 3 * MiB, "size": 512, "stream": stream, "time_us": 4},
            {"action": "free_completed", "addr": base + 3 * MiB, "size": 512, "stream": stream, "time_us": 4},
            {"action": "oom", "addr": 123 * MiB, "size": 80 << 30, "stream": stream, "time_us": 5}]],
        "allocator_settings": {"policy": "stitch", "device": "cuda:0"},
    }


class Stats(unittest.TestCase):
    def test_keys_are_pytorchs(self):
        raw = _stats.zeros()
        raw["allocated_bytes"][0]["current"] = 1536
        raw["allocated_bytes"][1]["peak"] = 512
        raw["reserved_bytes"][2]["freed"] = 7
        raw["num_ooms"] = 2
        flat = _stats.flat(raw)
        self.assertEqual(list(flat), TORCH_KEYS)              # same keys, sorted as torch sorts them
        self.assertEqual(flat["allocated_bytes.all.current"], 1536)
        self.assertEqual(flat["allocated_bytes.small_pool.peak"], 512)
        self.assertEqual(flat["reserved_bytes.large_pool.freed"], 7)
        self.assertEqual(flat["num_ooms"], 2)
        self.assertEqual(flat["max_split_size"], -1)
        nested = _stats.nested(raw)
        self.assertEqual(nested["allocated_bytes"]["all"]["current"], 1536)
        self.assertEqual(nested["oversize_segments"]["peak"], 0)


class Snapshot(unittest.TestCase):
    def test_structure_and_replay_conversion(self):
        s0, s1 = vram_snapshot(0x7f0000000000, 9001), vram_snapshot(0x7f1000000000, 9002)
        snap = _snapshot.merge({0: s0, 1: json.loads(json.dumps(s1))}, device_count=2)
        self.assertEqual(set(snap), {"segments", "device_traces", "allocator_settings"})
        self.assertEqual(len(snap["device_traces"]), 2)
        self.assertEqual([s["device"] for s in snap["segments"]], [0, 1])
        seg = snap["segments"][0]
        for k in ("address", "total_size", "stream", "segment_type", "segment_pool_id", "allocated_size",
                  "active_size", "requested_size", "blocks", "device", "is_expandable", "frames"):
            self.assertIn(k, seg)
        for b in seg["blocks"]:
            self.assertEqual(set(b), {"address", "size", "requested_size", "state", "frames"})
        tr = snap["device_traces"][1]
        self.assertTrue(all(isinstance(e["time_us"], int) and e["frames"] == [] for e in tr))
        oom = [e for e in tr if e["action"] == "oom"][0]
        self.assertEqual(oom["device_free"], 123 * MiB)        # where PyTorch puts it
        self.assertTrue(snap["allocator_settings"]["vram_torch"])
        # the pickle converts for `vram replay` like a PyTorch one
        conv = load_converter()
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "s.pickle")
            with open(p, "wb") as f:
                pickle.dump(snap, f)
            rows, peak_a, peak_r, prior, _ = conv.convert(p, conv.load(p), 1)
        self.assertEqual([r[0] for r in rows][:2], ["segment_map", "alloc"])
        self.assertEqual(peak_a, 3 * MiB - 100 + 512)
        self.assertEqual(prior, 0)

    def test_device_without_allocator(self):
        snap = _snapshot.merge({1: vram_snapshot(0x7f0000000000, 1)}, device_count=2)
        self.assertEqual(snap["device_traces"][0], [])
        self.assertEqual(len(snap["device_traces"][1]), 6)


class Discovery(unittest.TestCase):
    def test_order_and_errors(self):
        with tempfile.TemporaryDirectory() as repo:
            pkg = os.path.join(repo, "python", "vram_torch")
            os.makedirs(pkg)
            for b in ("build", "build-gpu", "build-carry", "build-x"):
                os.makedirs(os.path.join(repo, b))
            with self.assertRaises(FileNotFoundError) as e:
                _lib.find(env={}, pkg_dir=pkg)
            self.assertIn("build-carry", str(e.exception))
            for b in ("build", "build-gpu"):
                open(os.path.join(repo, b, _lib.LIB_NAME), "w").close()
            self.assertEqual(_lib.find(env={}, pkg_dir=pkg), os.path.join(repo, "build-gpu", _lib.LIB_NAME))
            open(os.path.join(repo, "build-carry", _lib.LIB_NAME), "w").close()
            self.assertEqual(_lib.find(env={}, pkg_dir=pkg), os.path.join(repo, "build-carry", _lib.LIB_NAME))
            open(os.path.join(pkg, _lib.LIB_NAME), "w").close()       # next to the package wins
            self.assertEqual(_lib.find(env={}, pkg_dir=pkg), os.path.join(pkg, _lib.LIB_NAME))
            other = os.path.join(repo, "build-x", _lib.LIB_NAME)
            open(other, "w").close()
            self.assertEqual(_lib.find(env={"VRAM_TORCH_LIB": other}, pkg_dir=pkg), other)
            self.assertEqual(_lib.find(lib=other, env={"VRAM_TORCH_LIB": "/nope"}, pkg_dir=pkg), other)
            with self.assertRaises(FileNotFoundError):
                _lib.find(env={"VRAM_TORCH_LIB": "/nope/libvram_torch.so"}, pkg_dir=pkg)


FAKE_TORCH = {
    "torch/__init__.py": "from . import cuda\nlog = []\n",
    "torch/cuda/__init__.py": textwrap.dedent("""
        from . import memory, graphs
        from .memory import memory_stats, reset_peak_memory_stats
        initialized = False
        def current_device():
            return 0
        def device_count():
            return 1
        """),
    "torch/cuda/graphs.py": textwrap.dedent("""
        class CUDAGraph:
            def capture_begin(self):
                return "captured"
        """),
    "torch/cuda/memory.py": textwrap.dedent("""
        import ctypes, torch
        class _Raw:
            def __getattr__(self, name):
                if name.startswith("set_"):
                    return lambda addr: torch.log.append((name, addr))
                raise AttributeError(name)
        class CUDAPluggableAllocator:
            def __init__(self, path, alloc, free):
                lib = ctypes.CDLL(path)
                torch.log.append(("pluggable", path, alloc, free))
                self._allocator = _Raw()
            def allocator(self):
                return self._allocator
        def change_current_allocator(a):
            if torch.cuda.initialized:
                raise RuntimeError("Can't swap an already initialized allocator")
            torch.log.append(("changed",))
        def memory_stats(device=None):
            raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats")
        def memory_allocated(device=None):
            return memory_stats(device=device).get("allocated_bytes.all.current", 0)
        def reset_peak_memory_stats(device=None):
            raise RuntimeError("not supported")
        """),
}


class Hook(unittest.TestCase):
    """python/sitecustomize.py in a child python, with a stand-in torch package."""

    def run_child(self, env_extra, code):
        with tempfile.TemporaryDirectory() as d:
            for rel, text in FAKE_TORCH.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_TORCH")}
            env.update(env_extra, PYTHONPATH=PYDIR + os.pathsep + d)
            return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)

    def test_off_imports_nothing(self):
        r = self.run_child({}, "import sys, torch; print('vram_torch' in sys.modules, torch.log)")
        self.assertEqual(r.stdout.strip(), "False []", r.stderr)
        r = self.run_child({"VRAM_TORCH": "0"}, "import sys, torch; print('vram_torch' in sys.modules)")
        self.assertEqual(r.stdout.strip(), "False", r.stderr)

    def test_armed_until_torch_is_imported(self):
        r = self.run_child({"VRAM_TORCH": "1", "VRAM_TORCH_LIB": "/nope.so"},
                           "import sys; print('vram_torch' in sys.modules, 'torch' in sys.modules)")
        self.assertEqual(r.stdout.strip(), "True False", r.stderr)   # the hook only; torch not imported
        self.assertEqual(r.stderr, "")
        r = self.run_child({"VRAM_TORCH": "1", "VRAM_TORCH_LIB": "/nope.so"}, "import torch; print('ran')")
        self.assertEqual(r.stdout.strip(), "ran")                      # a failure never breaks the program
        self.assertIn("vram_torch: not enabled: vram_torch: VRAM_TORCH_LIB=/nope.so: no such file", r.stderr)

    def test_settings(self):
        self.assertIsNone(_hook.settings({}))
        self.assertEqual(_hook.settings({"VRAM_TORCH": "1"}), ("stitch", None, 0))
        self.assertEqual(_hook.settings({"VRAM_TORCH": "pytorch", "VRAM_TORCH_FRACTION": "0.5",
                                         "VRAM_TORCH_HISTORY": "100"}), ("pytorch", 0.5, 100))

    @unittest.skipUnless(TEST_LIB, "VRAM_TORCH_TEST_LIB (the meta library) not given")
    def test_enable_end_to_end(self):
        code = textwrap.dedent("""
            import torch, vram_torch
            print(vram_torch.enabled())
            names = [e[0] for e in torch.log]
            print(names[0], torch.log[0][2], torch.log[0][3])
            print(sorted(n for n in names if n.startswith("set_")))
            print("changed" in names)
            print(torch.cuda.memory.memory_allocated(0), torch.cuda.memory_stats(0)["num_ooms"])
            try:
                torch.cuda.graphs.CUDAGraph().capture_begin()
            except RuntimeError as e:
                print("refused" if "CUDA graph capture is not supported" in str(e) else e)
            """)
        r = self.run_child({"VRAM_TORCH": "pytorch", "VRAM_TORCH_LIB": TEST_LIB}, code)
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.stdout.split("\n")[:6], [
            "True", "pluggable vram_torch_malloc vram_torch_free",
            "['set_base_alloc_fn', 'set_init_fn', 'set_memory_fraction_fn', 'set_record_stream_fn', 'set_reset_fn']",
            "True", "0 0", "refused"])
        # CUDA already initialised: a clear error
        r = self.run_child({"VRAM_TORCH_LIB": TEST_LIB},
                           "import torch, vram_torch\ntorch.cuda.initialized = True\nvram_torch.enable()")
        self.assertIn("must run before PyTorch initialises CUDA", r.stderr)


@unittest.skipUnless(TEST_LIB, "VRAM_TORCH_TEST_LIB (the meta library) not given")
class Library(unittest.TestCase):
    """The library through ctypes on meta devices (a child process: its configuration is per process)."""

    def test_meta_devices(self):
        code = textwrap.dedent("""
            import json, pickle, sys, os
            sys.path.insert(0, os.environ["PYDIR"])
            from vram_torch import _lib, _stats, _snapshot
            L = _lib.load(os.environ["VRAM_TORCH_TEST_LIB"])
            L.vram_torch_set_stitch_lend(100)
            L.vram_torch_set_timing(1)
            assert L.vram_torch_configure(b"stitch", 0.0, 1000, b"meta:1GiB") == 0, _lib.last_error(L)
            s = 0x5000
            ps = [L.vram_torch_try_malloc(n, 0, s) for n in (1000, 3 << 20, 5 << 20)]
            q = L.vram_torch_try_malloc(7 << 20, 1, s)
            flat = _stats.flat(json.loads(_lib.take_string(L, L.vram_torch_stats_json(0))))
            print(flat["allocated_bytes.all.current"] == 1024 + (3 << 20) + (5 << 20), flat["allocation.all.current"])
            L.vram_torch_free(ps[0], 1000, 0, s)
            assert not L.vram_torch_try_malloc(1020 << 20, 0, s)
            print(_lib.last_error(L).startswith("CUDA out of memory. vram_torch (policy stitch) on GPU 0:"),
                  L.vram_torch_last_oom().decode() == _lib.last_error(L))
            per = {d: json.loads(_lib.take_string(L, L.vram_torch_snapshot_json(d))) for d in (0, 1)}
            snap = _snapshot.merge(per, 2)
            print(sorted({seg["device"] for seg in snap["segments"]}), len(snap["device_traces"][1]) > 0)
            c0 = json.loads(_lib.take_string(L, L.vram_torch_costs_json(0)))
            print(c0["malloc_calls"], c0["free_calls"], c0["malloc_ns"] > 0, c0["map"] >= 1, c0["phys_create"] >= 1)
            L.vram_torch_set_timing(0)  # not measured: counted only
            L.vram_torch_free(L.vram_torch_try_malloc(2 << 20, 0, s), 2 << 20, 0, s)
            c1 = json.loads(_lib.take_string(L, L.vram_torch_costs_json(0)))
            print(c1["malloc_calls"] - c0["malloc_calls"], c1["malloc_ns"] == c0["malloc_ns"], c1["free_ns"] == c0["free_ns"])
            pickle.dump(snap, open(os.environ["OUTP"], "wb"))
            L.vram_torch_empty_cache()
            print(L.vram_torch_check(0), L.vram_torch_check(1))
            """)
        with tempfile.TemporaryDirectory() as d:
            outp = os.path.join(d, "snap.pickle")
            env = dict(os.environ, PYDIR=PYDIR, OUTP=outp)
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
            # costs of GPU 0: 4 mallocs (3 + the refused one), 1 free, host time inside them, granules mapped; then
            # with timing off one more malloc counted and no time added
            self.assertEqual(r.stdout.split("\n")[:6], ["True 3", "True True", "[0, 1] True", "4 1 True True True",
                                                         "1 True True", "0 0"], r.stderr)
            conv = load_converter()
            rows, peak_a, _, _, _ = conv.convert(outp, conv.load(outp), 0)
            self.assertGreaterEqual(peak_a, 1000 + (3 << 20) + (5 << 20))
            self.assertIn("oom", [r[0] for r in rows])


if __name__ == "__main__":
    unittest.main()
