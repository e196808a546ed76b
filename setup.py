"""Build of fastlayers._C.

Environment:
  FASTLAYERS_CUDA=1|0        force the CUDA build on or off (default: on when a toolkit is found)
  TORCH_CUDA_ARCH_LIST       CUDA architectures (default "9.0")
  MAX_JOBS                   parallel compile jobs (default: cores, bounded by free memory)
  FASTLAYERS_DEBUG=1         -O0 -g (and -G -lineinfo for device code)
  NVCC_THREADS               nvcc's own threads per compile job (--threads)
"""
import glob
import os
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _env_flag(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    return v.lower() not in ("0", "false", "no", "off")


def _default_jobs():
    cores = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            avail_kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable"))
        cores = max(1, min(cores, avail_kb // (2 * 1024 * 1024)))  # ~2 GiB per compile job
    except (OSError, StopIteration, ValueError):
        pass
    return cores


def _write_build_info(flags):
    """python/fastlayers/_build_info.py: a digest of the C++/CUDA sources and the build flags that
    produced the extension. The tuner puts it in its cache keys, so decisions measured on other
    kernels are measured again after a rebuild from changed sources."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted(glob.glob("csrc/**/*", recursive=True) + glob.glob("cuda/**/*", recursive=True)):
        if os.path.isfile(path):
            h.update(path.encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
    h.update(repr(flags).encode())
    text = ('"""Written by setup.py: what fastlayers._C was built from (not in version control)."""\n'
            'SOURCES = "%s"\n' % h.hexdigest()[:16])
    out = os.path.join(ROOT, "python", "fastlayers", "_build_info.py")
    try:
        with open(out) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(out, "w") as f:
        f.write(text)


def extensions():
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

    want_cuda = _env_flag("FASTLAYERS_CUDA")
    with_cuda = (CUDA_HOME is not None and torch.version.cuda is not None) if want_cuda is None else want_cuda
    if with_cuda and CUDA_HOME is None:
        sys.exit("fastlayers: FASTLAYERS_CUDA=1 but no CUDA toolkit was found (set CUDA_HOME)")
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.environ.setdefault("MAX_JOBS", str(_default_jobs()))
    debug = bool(_env_flag("FASTLAYERS_DEBUG"))

    sources = sorted(glob.glob("csrc/**/*.cpp", recursive=True))
    # Link the C++ runtime the process already has, by its soname: where only the static archive
    # is found, a private copy of libstdc++ (its own, uninitialised locale) would end up in _C.
    link = ["-l:libstdc++.so.6"] if sys.platform.startswith("linux") else []
    cxx = ["-std=c++17", "-O0" if debug else "-O3"] + (["-g"] if debug else [])
    nvcc = ["-std=c++17", "-O0" if debug else "-O3", "--expt-relaxed-constexpr"]
    nvcc += ["-G", "-lineinfo"] if debug else ["-lineinfo"]
    # the code-generating flags (not nvcc's own thread count) go into the digest
    _write_build_info((with_cuda, os.environ["TORCH_CUDA_ARCH_LIST"] if with_cuda else "", cxx, nvcc))
    if os.environ.get("NVCC_THREADS"):
        nvcc += ["--threads", os.environ["NVCC_THREADS"]]
    if with_cuda:
        sources += sorted(glob.glob("cuda/**/*.cu", recursive=True))
        ext = CUDAExtension(
            "fastlayers._C",
            sources,
            define_macros=[("FASTLAYERS_WITH_CUDA", None)],
            extra_compile_args={"cxx": cxx, "nvcc": nvcc},
            extra_link_args=link,
            libraries=["cufft", "cublas"],
        )
    else:
        sources = [s for s in sources if not s.endswith("_cuda.cpp")]
        ext = CppExtension("fastlayers._C", sources, extra_compile_args={"cxx": cxx},
                           extra_link_args=link)
    print(
        "fastlayers build: cuda={} arch={} jobs={} debug={} torch={} cuda_home={}".format(
            with_cuda, os.environ["TORCH_CUDA_ARCH_LIST"] if with_cuda else "-",
            os.environ["MAX_JOBS"], debug, torch.__version__, CUDA_HOME,
        ),
        flush=True,
    )
    return [ext]


def cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    return {"build_ext": BuildExtension.with_options(use_ninja=True)}


setup(
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=extensions(),
    cmdclass=cmdclass(),
)
