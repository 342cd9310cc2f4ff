"""Run CUDA code paths on a CPU, failing on every cross-device operation.

GPU time is rare, so GPU correctness has to be proven by the CPU test suite. The classic GPU
crash is a device mismatch (a CPU index for CUDA tensors, a CPU ``torch.Generator`` for a
CUDA sampler), and it only shows on the first GPU run. Inside `fake_cuda()`:

- ``torch.device("cuda:0")`` works as a target: factories (``torch.zeros(..., device=...)``,
  ``torch.tensor``), ``.to(...)``, ``Module.to(...)`` and ``torch.Generator(device=...)`` make
  objects that report ``cuda:0`` (``.device``, ``.is_cuda``) while their data lives on the CPU;
- every aten op checks its operands like PyTorch's CUDA backend does: a CUDA tensor next to
  a CPU tensor (other than a 0-dim scalar, a CPU index of ``x[idx]``, or a copy) or a
  generator of the other device raises `CrossDeviceError`;
- device-to-host transfers (``.item()``, ``int(t)``, ``.tolist()``, ``.cpu()``) are counted,
  because each one is a blocking round trip on a real GPU (`DeviceCheck.host_syncs`).

Why not PyTorch's FakeTensor: it has no data, so code that reads values (``int(lengths.max())``,
a sampled token) cannot run, and its tensors report a real ``cuda`` device to autograd, which
needs CUDA's C++ device guard even on a CPU-only build and aborts the process in backward.
Here the C++ device stays ``cpu`` (autograd and kernels run as usual) and only Python sees CUDA.
What this cannot show: CUDA-only kernels, memory limits, streams and NCCL (see docs/training.md).

Use a ``cuda:0`` device object with an index (``torch.device("cuda:0")``): PyTorch resolves a
bare ``"cuda"`` through the CUDA runtime before any Python hook can answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

CUDA = torch.device("cuda:0")
_aten = torch.ops.aten
# Ops whose operands may legitimately sit on different devices in real PyTorch.
_COPIES = {_aten.copy_.default, _aten._to_copy.default, _aten.lift_fresh.default, _aten.detach.default}
_INDEXING = {_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default, _aten._index_put_impl_.default}


class CrossDeviceError(RuntimeError):
    """An op mixed CUDA and CPU operands in a way the CUDA backend refuses."""


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor (``.elem``) that reports ``cuda:0`` to Python code."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> FakeCudaTensor:
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            device=elem.device, requires_grad=elem.requires_grad,
        )
        r.elem = elem
        return r

    @property  # type: ignore[override]
    def device(self) -> torch.device:
        return CUDA

    @property  # type: ignore[override]
    def is_cuda(self) -> bool:
        return True

    @property  # type: ignore[override]
    def is_cpu(self) -> bool:
        return False

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"FakeCudaTensor({self.elem!r})"

    # The C++ device is already the CPU, so PyTorch would make these no-ops returning the fake
    # tensor itself; a real move to the host returns a CPU tensor and costs a round trip.
    def cpu(self, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        _count_host_sync()
        return self.elem.detach().clone()

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and torch.device(device).type == "cpu":
            out = self.cpu()
            return out if dtype is None else out.to(dtype)
        return super().to(*args, **kwargs)

    def tolist(self) -> Any:  # type: ignore[override]
        return self.cpu().tolist()

    def numpy(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise CrossDeviceError(f"a fake CUDA tensor reached {func} outside fake_cuda() (or on another thread)")


class FakeCudaGenerator(torch.Generator):
    """A CPU generator that reports ``cuda:0``, so device checks see what a CUDA one would be."""

    @property  # type: ignore[override]
    def device(self) -> torch.device:
        return CUDA


class _Capture(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen += [x for x in (*args, *(kwargs or {}).values()) if isinstance(x, torch._C.Generator)]
        return func(*args, **(kwargs or {}))


# Ops receive a generator as PyTorch's own (base-class) wrapper of it, not the subclass object,
# so fake CUDA generators are recognised by that wrapper's identity, found with one probe draw.
_FAKE_GENERATORS: list[Any] = []


def _fake_cuda_generator() -> FakeCudaGenerator:
    g = FakeCudaGenerator()
    capture = _Capture()
    with capture:
        torch.randperm(1, generator=g)
    _FAKE_GENERATORS.extend(capture.seen)
    return g


_ACTIVE: list[DeviceCheck] = []


def _count_host_sync() -> None:
    if _ACTIVE:
        _ACTIVE[-1].host_syncs += 1


def _is_cuda_target(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cuda"


class DeviceCheck(TorchDispatchMode):
    """The dispatch mode behind `fake_cuda`; its counters are what tests read."""

    def __init__(self) -> None:
        super().__init__()
        self.host_syncs = 0
        self.ops = 0

    def reset(self) -> None:
        self.host_syncs = 0
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func.overloadpacket is _aten.to:  # reaches here under inference_mode: run it as a _to_copy
            return self.__torch_dispatch__(_aten._to_copy.default, types, (args[0],), _to_copy_kwargs(func, args, kwargs))
        self.ops += 1
        devices: set[str] = set()

        def unwrap(x: Any, *, count: bool = True) -> Any:
            if isinstance(x, FakeCudaTensor):
                if count:
                    devices.add("cuda")
                return x.elem
            if isinstance(x, torch.Tensor):
                if count and x.dim() > 0:
                    devices.add(x.device.type)
                return x
            if isinstance(x, torch._C.Generator) and count:
                fake = isinstance(x, FakeCudaGenerator) or any(x is g for g in _FAKE_GENERATORS)
                devices.add("cuda" if fake else x.device.type)
            return x

        if func in _INDEXING:  # x[cpu_idx] and x[cpu_idx] = v are allowed on CUDA tensors
            a = [unwrap(args[0]), tree_map(lambda t: unwrap(t, count=False), args[1]),
                 *[unwrap(x) for x in args[2:]]]
        else:
            a = tree_map(unwrap, list(args))
        k = tree_map(unwrap, kwargs)
        to_cuda = _is_cuda_target(k.get("device"))
        if to_cuda:
            k["device"] = torch.device("cpu")
        if func is _aten._local_scalar_dense.default:
            self.host_syncs += "cuda" in devices
            return func(*a, **k)
        if func is _aten._to_copy.default:
            out = func(*a, **k)
            if to_cuda:
                return FakeCudaTensor(out)
            if "device" in kwargs:  # an explicit move to the CPU
                self.host_syncs += "cuda" in devices
                return out
            return FakeCudaTensor(out) if "cuda" in devices else out
        if func is _aten.copy_.default:
            dst, src = args[0], args[1]
            if not isinstance(dst, FakeCudaTensor) and isinstance(src, FakeCudaTensor):
                self.host_syncs += 1
            func(*a, **k)
            return dst
        if to_cuda:
            devices.add("cuda")
        if len(devices) > 1 and func not in _COPIES:
            raise CrossDeviceError(
                f"{func} mixes devices {sorted(devices)}: on a GPU this raises "
                "'Expected all tensors to be on the same device' (move the CPU operand with .to(device))"
            )
        out = func(*a, **k)
        if "cuda" not in devices:
            return out
        return tree_map(lambda x: FakeCudaTensor(x) if type(x) is torch.Tensor else x, out)


def _to_copy_kwargs(func: Any, args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``_to_copy`` arguments of any ``aten.to`` overload (bound by its schema)."""
    bound = dict(kwargs)
    for arg, value in zip(func._schema.arguments, args, strict=False):
        bound[arg.name] = value
    if "other" in bound:  # to.other: the other tensor's device and dtype
        other = bound.pop("other")
        bound["device"], bound["dtype"] = other.device, other.dtype
    return {k: bound[k] for k in ("dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format")
            if bound.get(k) is not None}


def _make_tensor_factory(original: Any) -> Any:
    """``torch.tensor(data, device=cuda)`` builds on the CPU in C++ without dispatching; move it after."""

    def factory(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        if _is_cuda_target(device):
            return original(*args, **kwargs).to(CUDA)
        return original(*args, device=device, **kwargs)

    return factory


class _GeneratorType(type):
    """Stands in for ``torch.Generator``: calls make fake CUDA generators, ``isinstance`` still works."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __call__(cls, device: Any = "cpu") -> Any:
        return _fake_cuda_generator() if _is_cuda_target(device) else torch._C.Generator(device)


_Generator = _GeneratorType("Generator", (), {})


@contextlib.contextmanager
def fake_cuda() -> Iterator[DeviceCheck]:
    """Make ``cuda:0`` usable and checked on this thread (see the module docstring)."""
    import torch.cuda

    saved = (torch.cuda._lazy_init, torch.tensor, torch.as_tensor, torch.Generator,
             torch.__future__.get_swap_module_params_on_conversion())
    torch.cuda._lazy_init = lambda: None  # nothing to initialise: no kernel runs on a GPU
    torch.tensor = _make_tensor_factory(saved[1])
    torch.as_tensor = _make_tensor_factory(saved[2])
    torch.Generator = _Generator  # type: ignore[misc]
    # Module.to swaps parameters for fake ones (assigning .data across tensor types would not).
    torch.__future__.set_swap_module_params_on_conversion(True)
    mode = DeviceCheck()
    _ACTIVE.append(mode)
    try:
        with mode:
            yield mode
    finally:
        _ACTIVE.remove(mode)
        _FAKE_GENERATORS.clear()
        torch.cuda._lazy_init, torch.tensor, torch.as_tensor, torch.Generator = saved[:4]  # type: ignore[misc]
        torch.__future__.set_swap_module_params_on_conversion(saved[4])
