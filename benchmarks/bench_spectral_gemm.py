"""The per-frequency complex GEMMs of the FFT convolution, by themselves: which fp32 GEMM could the
fbfft convolution use? Table 4 shapes (S = 128), every pass, the operands frequency-major as the
convolution lays them out ([F, rows, cols] per operand).

    python3 benchmarks/bench_spectral_gemm.py [--out DIR] [--layers L1,L2,...]

Variants, all called through cuBLAS (ctypes, on torch's handle and stream):
- cgemm:   cublasGemmStridedBatchedEx, CUDA_C_32F, CUBLAS_COMPUTE_32F (what the convolution runs);
- cgemm3m: cublasCgemm3mStridedBatched (Gauss: three real products instead of four, fp32 FMA);
- tf32:    the same GemmEx with CUBLAS_COMPUTE_32F_FAST_TF32 (allowed only when TF32 is);
- 3xtf32:  each operand split into a TF32-exact high part and the remainder (low), then
           lo*hi + hi*lo + hi*hi as three TF32 GEMMs accumulating into one output (beta = 1);
           the time counts the GEMMs only, the split is timed separately.
Error: normwise, ||C - C_ref|| / ||C_ref|| over the whole output, C_ref in complex128 from the
same fp32 operands; and the ratio of that error to cgemm's own. A variant gets a speed ratio only
within its tolerance: cgemm3m and 3xtf32 claim fp32 accuracy (at most 4 x cgemm's error), tf32
claims TF32's (the tuner's TF32 floor); outside it, the variant is recorded as failed.
Times: CUDA events around single calls (L2 flushed), median of the trials.
Writes DIR/spectral-gemm-<device>.json. Without CUDA it says so and exits 0.
"""
import ctypes
import sys

import common
from common import log

import torch  # noqa: E402

from fastlayers import tuner  # noqa: E402

LAYERS = {  # name: (S, C, K, basis side) as bench_table4.py's layers, at their fastest fbfft basis
    "L1": (128, 3, 96, 128),
    "L2": (128, 64, 64, 64),
    "L3": (128, 128, 128, 32),
    "L4": (128, 128, 128, 16),
    "L5": (128, 384, 384, 16),
}
OP_N, OP_T, OP_C = 0, 1, 2
CUDA_C_32F = 4
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77
GEMM_DEFAULT = -1
VARIANTS = ("cgemm3m", "tf32", "3xtf32")


class Complex(ctypes.Structure):
    _fields_ = [("x", ctypes.c_float), ("y", ctypes.c_float)]


def cublas():
    lib = None
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise RuntimeError("libcublas not found")
    return lib


def pass_args(pass_, S, C, K):
    """(transa, transb, m, n, k, A-operand, lda, B-operand, ldb, ldc) as the convolution calls it:
    operands 'at' = x [S, C] or grad_y [S, K], 'bt' = w [K, C] or x [S, C] (row-major per freq)."""
    if pass_ == "fprop":  # Y[S,K] = X[S,C] conj(W[K,C])^T
        return OP_C, OP_N, K, S, C, "bt", C, "at", C, K, (S, C), (K, C), (S, K)
    if pass_ == "bprop":  # GX[S,C] = GY[S,K] W[K,C]
        return OP_N, OP_N, C, S, K, "bt", C, "at", K, C, (S, K), (K, C), (S, C)
    # accGrad: GW[K,C] = conj(GY[S,K])^T X[S,C]
    return OP_N, OP_C, C, K, S, "bt", C, "at", K, C, (S, K), (S, C), (K, C)


def split_tf32(z: torch.Tensor):
    """z (complex64) -> (hi, lo): hi has the 10 explicit mantissa bits TF32 keeps (rounded to
    nearest), lo = z - hi exactly (fp32)."""
    r = torch.view_as_real(z).contiguous()
    bits = r.view(torch.int32)
    hi_bits = (bits + 0x1000) & ~0x1FFF
    hi = hi_bits.view(torch.float32)
    lo = r - hi
    return torch.view_as_complex(hi.contiguous()), torch.view_as_complex(lo.contiguous())


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--layers", default="L1,L2,L3,L4,L5")
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        log("no CUDA device: nothing to measure (this benchmark times cuBLAS on the GPU)")
        return 0
    timer = common.CudaTimer(warmup=2, trials=args.trials, flush=True)
    tf32_floor = tuner.error_floor(torch.float32, True)
    doc = common.meta("spectral-gemm", args, layers=args.layers, **timer.config(),
                      tolerance={"cgemm3m": "4 x cgemm's error", "3xtf32": "4 x cgemm's error",
                                 "tf32": "%g (tuner.error_floor, TF32)" % tf32_floor})
    doc["rows"] = rows = []
    res = common.Results(args.out, doc)
    log(common.describe_run(doc))
    lib = cublas()
    handle = ctypes.c_void_p(torch.cuda.current_blas_handle())
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    assert lib.cublasSetStream_v2(handle, stream) == 0
    lib.cublasSetMathMode(handle, 0)  # CUBLAS_DEFAULT_MATH: the compute type decides
    one, zero = Complex(1.0, 0.0), Complex(0.0, 0.0)
    ll = ctypes.c_longlong

    def gemm_ex(ta, tb, m, n, k, A, lda, B, ldb, Cm, ldc, F, compute, beta):
        st = lib.cublasGemmStridedBatchedEx(
            handle, ta, tb, m, n, k, ctypes.byref(one), ctypes.c_void_p(A.data_ptr()), CUDA_C_32F,
            lda, ll(lda * (k if ta == OP_N else m)), ctypes.c_void_p(B.data_ptr()), CUDA_C_32F,
            ldb, ll(ldb * (n if tb == OP_N else k)), ctypes.byref(beta),
            ctypes.c_void_p(Cm.data_ptr()), CUDA_C_32F, ldc, ll(ldc * n), F, compute, GEMM_DEFAULT)
        assert st == 0, st

    def gemm3m(ta, tb, m, n, k, A, lda, B, ldb, Cm, ldc, F):
        st = lib.cublasCgemm3mStridedBatched(
            handle, ta, tb, m, n, k, ctypes.byref(one), ctypes.c_void_p(A.data_ptr()), lda,
            ll(lda * (k if ta == OP_N else m)), ctypes.c_void_p(B.data_ptr()), ldb,
            ll(ldb * (n if tb == OP_N else k)), ctypes.byref(zero),
            ctypes.c_void_p(Cm.data_ptr()), ldc, ll(ldc * n), F)
        assert st == 0, st

    log("| layer | pass | F | m x n x k | cgemm ms | cgemm3m ms (x) | tf32 ms (x) | 3xtf32 ms (x) "
        "| split ms | err cgemm | err 3m (/cgemm) | err tf32 (/cgemm) | err 3xtf32 (/cgemm) |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    g = torch.Generator(device="cuda").manual_seed(0)
    for name in args.layers.split(","):
        S, C, K, n = LAYERS[name]
        F = n * (n // 2 + 1)
        for pass_ in ("fprop", "bprop", "accGrad"):
            ta, tb, m, nn, k, _, lda, _, ldb, ldc, at_shape, bt_shape, out_shape = pass_args(
                pass_, S, C, K)
            at = torch.randn(F, *at_shape, dtype=torch.complex64, device="cuda", generator=g)
            bt = torch.randn(F, *bt_shape, dtype=torch.complex64, device="cuda", generator=g)
            out = torch.empty(F, *out_shape, dtype=torch.complex64, device="cuda")
            # Reference: the same products in complex128 (row-major per frequency).
            a64, b64 = at.to(torch.complex128), bt.to(torch.complex128)
            if pass_ == "fprop":
                ref = a64 @ b64.conj().transpose(1, 2)
            elif pass_ == "bprop":
                ref = a64 @ b64
            else:
                ref = a64.conj().transpose(1, 2) @ b64
            del a64, b64

            def run(fn, tol=None):
                """Error of fn's product first, then its time when within `tol`."""
                fn()
                m = {"rel_err": common.rel_err(out, ref)}
                if tol is None or common.gate(m, tol):
                    m.update(timer(fn))
                return m

            (ah, al), (bh, bl) = split_tf32(at), split_tf32(bt)

            def f_3x():
                gemm_ex(ta, tb, m, nn, k, bh, lda, al, ldb, out, ldc, F, COMPUTE_32F_FAST_TF32, zero)
                gemm_ex(ta, tb, m, nn, k, bl, lda, ah, ldb, out, ldc, F, COMPUTE_32F_FAST_TF32, one)
                gemm_ex(ta, tb, m, nn, k, bh, lda, ah, ldb, out, ldc, F, COMPUTE_32F_FAST_TF32, one)

            row = {"layer": name, "pass": pass_, "F": F, "m": m, "n": nn, "k": k}
            row["cgemm"] = run(lambda: gemm_ex(ta, tb, m, nn, k, bt, lda, at, ldb, out, ldc, F,
                                               COMPUTE_32F, zero))
            fp32_tol = common.tolerance(row["cgemm"]["rel_err"], 4.0)
            row["cgemm3m"] = run(lambda: gemm3m(ta, tb, m, nn, k, bt, lda, at, ldb, out, ldc, F),
                                 fp32_tol)
            row["tf32"] = run(lambda: gemm_ex(ta, tb, m, nn, k, bt, lda, at, ldb, out, ldc, F,
                                              COMPUTE_32F_FAST_TF32, zero), tf32_floor)
            row["3xtf32"] = run(f_3x, fp32_tol)
            row["split"] = timer(lambda: (split_tf32(at), split_tf32(bt)))
            row["tflops_cgemm"] = 8.0 * F * m * nn * k / (row["cgemm"]["ms"] * 1e-3) / 1e12
            e = row["cgemm"]["rel_err"]
            for v in VARIANTS:
                row[v]["ratio"] = common.ratio(row["cgemm"], row[v])
                row[v]["err_over_cgemm"] = row[v]["rel_err"] / e if e > 0 else None
            del ah, al, bh, bl, ref, at, bt, out
            common.release()
            rows.append(row)
            res.save()
            log("| %s | %s | %d | %d x %d x %d | %.4f | %s | %.4f | %.2e | %s |" % (
                name, pass_, F, m, nn, k, row["cgemm"]["ms"],
                " | ".join("%s (%s)" % (common.fmt(row[v].get("ms"), ".4f"),
                                        common.fmt(row[v]["ratio"], ".2f")) for v in VARIANTS),
                row["split"]["ms"], e,
                " | ".join("%.2e (%s)" % (row[v]["rel_err"], common.fmt(row[v]["err_over_cgemm"], ".2f"))
                           for v in VARIANTS)))
    log("wrote %s" % res.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
