"""What this machine computes natively, asked of torch and oneDNN: the one place that decides whether reduced
precision pays (training's ``trainer.precision=auto``, evaluation's ``robustness.precision=auto``) and that names
the machine in start banners and benchmark results.

bf16 on a CPU without AVX512-BF16 or AMX is emulated by oneDNN, an order of magnitude slower than fp32 (15x for
an AlterNet-50 step on an AVX2-only EPYC), so "bf16 is faster" holds only where the hardware says so. The answers
honour ``ONEDNN_MAX_CPU_ISA`` and ``ATEN_CPU_CAPABILITY``, so an AVX-512 machine told to use its AVX2 code paths
reports itself as the AVX2 machine it then is.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")


def cpu_capability() -> str:
    """ATen's vector instruction set on this CPU (``AVX2``, ``AVX512``, ``AMX``; ``ATEN_CPU_CAPABILITY`` caps it)."""
    return str(torch.backends.cpu.get_cpu_capability())


# ATen's x86 capabilities below AVX-512: its own bf16 kernels (attention, elementwise) convert to fp32 there, and
# some (scaled_dot_product_attention's bf16 packing on an AMX CPU) refuse to run at all
_X86 = {"x86_64", "amd64", "i386", "i686"}
_BELOW_AVX512 = {"DEFAULT", "NO AVX", "AVX2"}


def _aten_reduced_ok() -> bool:
    """ATen's own kernels run at the CPU's reduced-precision ISA: not capped below AVX-512 on x86 (by
    ``ATEN_CPU_CAPABILITY`` or the CPU), where oneDNN alone would still say bf16 is native."""
    return platform.machine().lower() not in _X86 or cpu_capability() not in _BELOW_AVX512


def cpu_native_bf16() -> bool:
    """bf16 is native here for both of torch's CPU back ends: oneDNN (AVX512-BF16 or AMX, within
    ``ONEDNN_MAX_CPU_ISA``) and ATen (AVX-512, within ``ATEN_CPU_CAPABILITY``). oneDNN's answer alone was not enough:
    an AMX Xeon run with ``ATEN_CPU_CAPABILITY=avx2`` has oneDNN's AMX but ATen's AVX2 attention kernel, which stops
    on bf16 ("pack_vnni2 is only supported when avx512 is supported")."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and _aten_reduced_ok()


def cpu_native_fp16() -> bool:
    """fp16 is native here for both oneDNN (AVX512-FP16 or AMX-FP16, within ``ONEDNN_MAX_CPU_ISA``) and ATen."""
    return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported()) and _aten_reduced_ok()


def cuda_bf16() -> bool:
    """The current CUDA GPU computes bf16 natively (Ampere and later)."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def _cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``/proc/cpuinfo`` (empty where the OS has none)."""
    fields: dict[str, str] = {}
    if CPUINFO.is_file():
        for line in CPUINFO.read_text(errors="replace").splitlines():
            if not line.strip():
                break  # the first processor's block ends
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields


@cache
def cpu_model() -> str:
    """The CPU as a timing must name it: its marketing name, and on x86 its vendor, family and model, which tell
    apart CPUs that share a name (``AMD EPYC (AuthenticAMD family 25 model 1)`` is a Zen 3, ``... model 17`` a
    Zen 4: a hypervisor may report both as plain ``AMD EPYC``). The platform's answer where ``/proc/cpuinfo`` has
    none."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if info.get("vendor_id") and info.get("cpu family") and info.get("model"):
        return f"{name} ({info['vendor_id']} family {info['cpu family']} model {info['model']})"
    return name


def cpu_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one: a container's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def machine_memory() -> int:
    """Bytes of physical memory (the host's: a container's cgroup limit may be lower); 64 GiB where the OS does
    not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # Windows, or a system without the names
        return 64 * 2**30


def gpu_name() -> str | None:
    """The first visible CUDA GPU's name, or ``None`` without one."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def describe_cpu() -> str:
    """One line naming the CPU the way a timing needs it named: model, cores, ISA, whether bf16 is native."""
    bf16 = "native bf16" if cpu_native_bf16() else "no native bf16 (emulated)"
    return f"{cpu_model()}, {cpu_cores()} cores, {cpu_capability()}, {bf16}"


def machine_facts() -> dict[str, str | int | bool | None]:
    """The facts every benchmark result carries, so a number is never read apart from the machine it ran on."""
    return {
        "cpu": cpu_model(),
        "cores": cpu_cores(),
        "isa": cpu_capability(),
        "native_bf16": cpu_native_bf16(),
        "gpu": gpu_name(),
        "torch": torch.__version__.split("+")[0],
        "threads": torch.get_num_threads(),
    }
