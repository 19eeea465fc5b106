"""Measured peaks to hold the planner against.

On a GPU: torch.cuda.max_memory_allocated (what the planner predicts) and max_memory_reserved
(what the allocator took). On a CPU, process RSS says nothing at these sizes (hundreds of MB
of libraries around a few MB of tensors), so `TensorMemoryTracker` counts tensor memory
itself: every tensor storage alive, from the ops that create them (a TorchDispatchMode),
freed when the storage is. Its peak is the CPU analogue of max_memory_allocated: the same
tensors autograd saves and the same optimizer state, without CUDA's allocator rounding.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class TensorMemoryTracker(TorchDispatchMode):
    """Live and peak bytes of all tensor storages on one device type, while active.

    Tensors that exist before entering (weights, buffers) are counted through `track`.
    Storages are counted once however many views share them.
    """

    def __init__(self, device_type: str = "cpu"):
        super().__init__()
        self.device_type = device_type
        self.live = 0
        self.peak = 0
        self._refs: dict[int, weakref.ref] = {}
        self._labels: dict[str, int] = {}

    def _free(self, key: int, nbytes: int) -> None:
        if self._refs.pop(key, None) is not None:
            self.live -= nbytes

    def _add_storage(self, st: torch.UntypedStorage) -> None:
        if st.device.type != self.device_type:
            return
        key = st._cdata
        if key in self._refs:
            return
        nbytes = st.nbytes()
        self._refs[key] = weakref.ref(st, lambda _, key=key, nbytes=nbytes: self._free(key, nbytes))
        self.live += nbytes
        if self.live > self.peak:
            self.peak = self.live

    def track(self, *objects) -> None:
        """Count tensors that already exist (a module's parameters and buffers, tensors, lists)."""
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                tensors = [*obj.parameters(), *obj.buffers()]
            else:
                tensors, _ = tree_flatten(obj)
            for t in tensors:
                if isinstance(t, torch.Tensor) and not t.is_meta:
                    self._add_storage(t.untyped_storage())

    def reset_peak(self) -> None:
        self.peak = self.live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor) and not t.is_meta:
                try:
                    self._add_storage(t.untyped_storage())
                except (RuntimeError, NotImplementedError):  # tensor subclasses without a storage
                    pass
        return out
