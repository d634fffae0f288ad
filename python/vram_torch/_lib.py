"""Finding and loading libvram_torch.so (ctypes only; no torch needed here)."""
import ctypes
import glob
import os

LIB_NAME = "libvram_torch.so"
PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def candidates(pkg_dir=PKG_DIR):
    """Where the library is looked for, in order: next to the package, then the repository's build
    folders (python/vram_torch/../../build*/), build-carry and build-gpu first, then newest first."""
    out = [os.path.join(pkg_dir, LIB_NAME)]
    repo = os.path.dirname(os.path.dirname(pkg_dir))
    dirs = [d for d in glob.glob(os.path.join(repo, "build*")) if os.path.isdir(d)]
    rank = {"build-carry": 0, "build-gpu": 1}

    def key(d):
        f = os.path.join(d, LIB_NAME)
        return (rank.get(os.path.basename(d), 2), -(os.path.getmtime(f) if os.path.exists(f) else 0), d)

    out += [os.path.join(d, LIB_NAME) for d in sorted(dirs, key=key)]
    return out


def find(lib=None, env=None, pkg_dir=PKG_DIR):
    """The library's path: `lib` if given, else $VRAM_TORCH_LIB, else the first of candidates() that
    exists. FileNotFoundError naming what was tried otherwise."""
    env = os.environ if env is None else env
    for given, what in ((lib, "lib="), (env.get("VRAM_TORCH_LIB") or None, "VRAM_TORCH_LIB=")):
        if given:
            if not os.path.isfile(given):
                raise FileNotFoundError(f"vram_torch: {what}{given}: no such file")
            return os.path.abspath(given)
    tried = candidates(pkg_dir)
    for c in tried:
        if os.path.isfile(c):
            return c
    raise FileNotFoundError(
        "vram_torch: libvram_torch.so not found (tried " + ", ".join(tried) + "); build it with "
        "`cmake -S . -B build-gpu && cmake --build build-gpu --target vram_torch` (CUDA needed) "
        "or set VRAM_TORCH_LIB")


def load(path):
    """ctypes handle with the argument and result types of src/torch/vram_torch.h set."""
    L = ctypes.CDLL(path)
    c_ssize = ctypes.c_ssize_t
    sig = {
        "vram_torch_configure": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_double, ctypes.c_size_t, ctypes.c_char_p]),
        "vram_torch_try_malloc": (ctypes.c_void_p, [c_ssize, ctypes.c_int, ctypes.c_void_p]),
        "vram_torch_free": (None, [ctypes.c_void_p, c_ssize, ctypes.c_int, ctypes.c_void_p]),
        "vram_torch_record_stream": (None, [ctypes.c_void_p, ctypes.c_void_p]),
        "vram_torch_empty_cache": (None, []),
        "vram_torch_memory_fraction": (None, [ctypes.c_double, ctypes.c_int]),
        "vram_torch_last_error": (ctypes.c_char_p, []),
        "vram_torch_last_oom": (ctypes.c_char_p, []),
        "vram_torch_policy": (ctypes.c_char_p, []),
        "vram_torch_device_active": (ctypes.c_int, [ctypes.c_int]),
        "vram_torch_stats_json": (ctypes.c_void_p, [ctypes.c_int]),
        "vram_torch_costs_json": (ctypes.c_void_p, [ctypes.c_int]),
        "vram_torch_set_stitch_lend": (None, [ctypes.c_uint]),
        "vram_torch_set_stitch_granule": (None, [ctypes.c_size_t]),
        "vram_torch_set_timing": (None, [ctypes.c_int]),
        "vram_torch_snapshot_json": (ctypes.c_void_p, [ctypes.c_int]),
        "vram_torch_summary": (ctypes.c_void_p, [ctypes.c_int]),
        "vram_torch_free_string": (None, [ctypes.c_void_p]),
        "vram_torch_write_snapshot": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
        "vram_torch_reset_peak": (None, [ctypes.c_int]),
        "vram_torch_reset_accumulated": (None, [ctypes.c_int]),
        "vram_torch_record_history": (None, [ctypes.c_size_t]),
        "vram_torch_check": (ctypes.c_int, [ctypes.c_int]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    return L


def take_string(L, ptr):
    """A malloc'd C string from the library as str (freed); None for NULL."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        L.vram_torch_free_string(ptr)


def last_error(L):
    return (L.vram_torch_last_error() or b"").decode("utf-8", "replace")


def address(L, name):
    """The address of an exported function, as PyTorch's hook setters take it."""
    return ctypes.cast(getattr(L, name), ctypes.c_void_p).value
