"""The environment PyTorch runs in for a fair comparison, shared by the
benchmarks that time it against wholestep (pytorch_compare.py,
torchvision_compare.py, torchvision_coverage.py): every threading and
kernel-selection variable removed, the CPU's instruction set, the OpenBLAS
core PyTorch picked (and the best one for this CPU), its threading and its
thread count."""

import ctypes
import os
import subprocess
import sys

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


def require_optimized_blas(script):
    """Exits unless torch's products run on OpenBLAS (after importing
    torch): Debian's python3-torch falls back to the reference BLAS, several
    times slower, when no OpenBLAS package is installed, and a table against
    that is not against eager torch in its best configuration."""
    import torch
    torch.ones(2, 2) @ torch.ones(2, 2)  # the BLAS is mapped by its first product
    if loaded_openblas() is None:
        found = ", ".join(mapped_libraries(("libblas", "blis", "mkl"))) or "no BLAS library found"
        sys.exit(f"{script}: torch's matrix products do not run on OpenBLAS ({found}): install "
                 f"libopenblas0-openmp (scripts/setup.sh installs it); refusing to compare "
                 f"against torch on the reference BLAS")


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


def onednn_report(threads):
    """oneDNN's ISA line and the convolution implementations PyTorch ran, from
    one cnn step under DNNL_VERBOSE in a subprocess."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_compare.py")
    out = subprocess.run([sys.executable, script, "--probe", "onednn",
                          "--threads", str(threads)], env=dict(os.environ, DNNL_VERBOSE="1"),
                         check=True, capture_output=True, text=True).stdout
    version, isa, convs = "", "not used", set()
    for line in out.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[1] == "info" and parts[2].startswith("oneDNN "):
            version = parts[2].split()[1]
        elif len(parts) > 3 and parts[1] == "info" and parts[3].startswith("isa:"):
            isa = parts[3][4:]
        elif len(parts) > 4 and parts[1] == "exec" and parts[3] == "convolution":
            convs.add(parts[4])
    return version, isa, sorted(convs)


def torch_report(args, threads):
    """PyTorch's threads, BLAS (its core, and whether the caller forced one:
    `args.forced_blas_core`, `args.user_blas_core`) and oneDNN, as lines."""
    import torch
    lib = loaded_openblas()
    if lib is not None:
        blas = (f"{lib.openblas_get_config().decode()}, core "
                f"{lib.openblas_get_corename().decode()}, {lib.openblas_get_num_threads()} threads")
    else:
        blas = "not OpenBLAS: " + (", ".join(mapped_libraries(("libblas", "blis", "mkl")))
                                   or torch.__config__.show().split("BLAS_INFO=")[-1].split(",")[0])
    capability = next((line.split(":", 1)[1].strip()
                       for line in torch.__config__.show().splitlines()
                       if "CPU capability" in line), "?")
    version, isa, convs = onednn_report(threads)
    lines = [f"PyTorch {torch.__version__}: {torch.get_num_threads()} threads, "
             f"ATen CPU capability {capability}",
             f"  matrix products: {blas}"]
    if args.forced_blas_core:
        lines.append(f"  OPENBLAS_CORETYPE={args.forced_blas_core} set for PyTorch only: in a "
                     f"clean environment its OpenBLAS picked {args.user_blas_core} (a fallback)")
    else:
        lines.append("  (the core OpenBLAS picks itself in a clean environment; no override)")
    lines.append(f"  oneDNN {version}: isa {isa}; convolutions {', '.join(convs) or 'none'}")
    return lines
