"""alternet.hardware names the machine a timing ran on: the CPU's marketing name and, on x86, its vendor, family and
model, which tell apart CPUs a hypervisor names alike (a Zen 3 and a Zen 4 are both 'AMD EPYC')."""

from __future__ import annotations

import pytest

from alternet import hardware

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu avx2

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: another
"""


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    """Point the module at a /proc/cpuinfo of the test's choosing; the cached answer is dropped before and after."""
    path = tmp_path / "cpuinfo"
    monkeypatch.setattr(hardware, "CPUINFO", path)
    hardware.cpu_model.cache_clear()
    yield path
    hardware.cpu_model.cache_clear()


def test_cpu_model_names_vendor_family_and_model_of_the_first_processor(cpuinfo):
    cpuinfo.write_text(ZEN3)
    assert hardware.cpu_model() == "AMD EPYC (AuthenticAMD family 25 model 1)"


def test_cpu_model_is_the_name_alone_where_cpuinfo_has_no_family(cpuinfo, monkeypatch):
    cpuinfo.write_text("processor\t: 0\nmodel name\t: ARMv8 Processor rev 1 (v8l)\n")
    assert hardware.cpu_model() == "ARMv8 Processor rev 1 (v8l)"
    cpuinfo.unlink()  # macOS, Windows: the platform's answer
    monkeypatch.setattr(hardware.platform, "processor", lambda: "arm")
    hardware.cpu_model.cache_clear()
    assert hardware.cpu_model() == "arm"


def test_describe_cpu_starts_with_the_model(cpuinfo):
    cpuinfo.write_text(ZEN3)
    assert hardware.describe_cpu().startswith("AMD EPYC (AuthenticAMD family 25 model 1), ")


@pytest.mark.parametrize(
    ("machine", "capability", "onednn", "native"),
    [
        ("x86_64", "AVX512", True, True),  # Zen 4, an AMX Xeon
        ("x86_64", "AVX2", True, False),  # the same, run with ATEN_CPU_CAPABILITY=avx2: ATen's kernels are AVX2's
        ("x86_64", "AVX2", False, False),  # Zen 3
        ("x86_64", "AVX512", False, False),  # AVX-512 without BF16 (Skylake), or ONEDNN_MAX_CPU_ISA capped
        ("aarch64", "SVE256", True, True),  # an Arm CPU: oneDNN's answer
    ],
)
def test_bf16_is_native_only_where_onednn_and_aten_both_compute_it(monkeypatch, machine, capability, onednn, native):
    """precision=auto trusted oneDNN alone: an AMX Xeon under ATEN_CPU_CAPABILITY=avx2 chose bf16, and ATen's AVX2
    attention kernel then stopped on it ("pack_vnni2 is only supported when avx512 is supported")."""
    monkeypatch.setattr(hardware.platform, "machine", lambda: machine)
    monkeypatch.setattr(hardware, "cpu_capability", lambda: capability)
    monkeypatch.setattr(hardware.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn)
    assert hardware.cpu_native_bf16() is native
