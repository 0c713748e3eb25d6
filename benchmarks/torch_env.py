"""The environment PyTorch runs in for a fair comparison, shared by the
benchmarks that time it against wholestep (pytorch_compare.py,
torchvision_compare.py, torchvision_coverage.py): every threading and
kernel-selection variable removed, the CPU's instruction set, the OpenBLAS
core PyTorch picked (and the best one for this CPU), its threading and its
thread count."""

import ctypes
import os

CLEAN_PREFIXES = ("OPENBLAS_", "OMP_", "GOMP_", "DNNL_", "ONEDNN_", "MKL_")
AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids"}
AVX2_CORES = AVX512_CORES | {"haswell", "zen"}


def clean_env(env):
    """`env` without the threading and kernel-selection variables."""
    return {k: v for k, v in env.items() if not k.startswith(CLEAN_PREFIXES)}


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_model():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return "{} (family {} model {})".format(
        fields.get("model name", "unknown CPU"), fields.get("cpu family", "?"),
        fields.get("model", "?"))


def cpu_summary():
    """The CPU's model, how many CPUs, and its widest vector instructions."""
    flags = cpu_flags()
    isa = "AVX-512F" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{cpu_model()}, {os.cpu_count()} CPUs, {isa}"


def best_openblas_core(flags):
    """The OpenBLAS core matching the CPU's widest vector instructions."""
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


def is_fallback_core(core, flags):
    """True when OpenBLAS picked a core below the CPU's instruction set."""
    name = core.lower()
    if "avx512f" in flags:
        return name not in AVX512_CORES
    if "avx2" in flags:
        return name not in AVX2_CORES
    return False


def mapped_libraries(substrings):
    """Real paths of the shared libraries mapped here whose path has one of `substrings`."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return sorted({os.path.realpath(p) for p in paths if any(s in p for s in substrings)})


def loaded_openblas():
    """The OpenBLAS mapped into this process (after importing torch), or None."""
    for path in mapped_libraries(("libopenblas",)):
        lib = ctypes.CDLL(path)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return lib
    return None


OPENBLAS_THREADING = {0: "sequential", 1: "pthreads", 2: "OpenMP"}


def openblas_threading(lib):
    """How an OpenBLAS library runs its threads: "OpenMP" (Debian's
    libopenblas0-openmp, sharing torch's OpenMP pool), "pthreads" (its own
    pool beside torch's), "sequential"."""
    return OPENBLAS_THREADING.get(lib.openblas_get_parallel(), "unknown")


def set_torch_threads(threads):
    """N threads for ATen's OpenMP pool and for OpenBLAS's own pool (PyTorch
    does not set the latter; wholestep does)."""
    import torch
    torch.set_num_threads(threads)
    lib = loaded_openblas()
    if lib is not None:
        lib.openblas_set_num_threads(threads)
