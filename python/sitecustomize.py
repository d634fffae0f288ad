"""`VRAM_TORCH=1 python train.py` with this folder (python/) on PYTHONPATH runs train.py on vram's
allocator, unchanged (vram_torch/_hook.py). Without VRAM_TORCH nothing is imported. If another
sitecustomize exists on the path after this one, it is run too."""
import os


def _vram_torch_site():
    if os.environ.get("VRAM_TORCH", "").strip() in ("", "0"):
        return
    from vram_torch import _hook
    _hook.install(os.environ)


def _chain():
    """Runs the next sitecustomize.py on sys.path (this one shadows it)."""
    import importlib.util
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        if os.path.abspath(d or os.getcwd()) == here:
            continue
        f = os.path.join(d or os.getcwd(), "sitecustomize.py")
        if os.path.isfile(f):
            spec = importlib.util.spec_from_file_location("_vram_next_sitecustomize", f)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_vram_torch_site()
_chain()
