"""VRAM_TORCH=1: vram_torch enabled as torch is imported (python/sitecustomize.py calls install()).

The environment is read here, at the program's boundary, and nowhere in the library:
  VRAM_TORCH           "1" (policy stitch) or a policy name; "" or "0": off
  VRAM_TORCH_FRACTION  memory fraction of each GPU (optional)
  VRAM_TORCH_HISTORY   history entries for snapshots (optional, default 0)
  VRAM_TORCH_LIB       the library (optional; see vram_torch.find_lib)
Nothing is imported until the program imports torch: a meta-path finder wraps torch's loader and calls
vram_torch.enable() right after torch's own module has run (before CUDA can be initialised). A failure
is one line on stderr ("vram_torch: not enabled: ...") and the program runs on PyTorch's allocator."""
import importlib.abc
import importlib.util
import sys


def settings(env):
    """(policy, fraction, history) from the environment, or None when VRAM_TORCH is off."""
    v = env.get("VRAM_TORCH", "").strip()
    if v in ("", "0"):
        return None
    policy = "stitch" if v.lower() in ("1", "true", "yes", "on") else v
    frac = env.get("VRAM_TORCH_FRACTION", "").strip()
    hist = env.get("VRAM_TORCH_HISTORY", "").strip()
    return policy, (float(frac) if frac else None), (int(hist) if hist else 0)


def _enable(policy, fraction, history):
    try:
        import vram_torch
        vram_torch.enable(policy=policy, fraction=fraction, history=history)
    except Exception as e:  # never break the user's `import torch`
        print(f"vram_torch: not enabled: {e}", file=sys.stderr)


class _TorchFinder(importlib.abc.MetaPathFinder):
    def __init__(self, args):
        self.args = args

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)   # once; the other finders locate torch
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        args = self.args

        def exec_module(module):
            run(module)
            _enable(*args)
        spec.loader.exec_module = exec_module
        return spec


def install(env):
    """Arms the hook when VRAM_TORCH is on; returns whether it did (or enabled at once: torch already in)."""
    try:
        args = settings(env)
    except ValueError as e:
        print(f"vram_torch: not enabled: bad VRAM_TORCH_FRACTION/HISTORY ({e})", file=sys.stderr)
        return False
    if args is None:
        return False
    if "torch" in sys.modules:
        _enable(*args)
    elif not any(isinstance(f, _TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder(args))
    return True
