-- tests/test_dtype.c: a fused kernel whose entry point holds widen_f16 and narrow_bf16
return { name = "dt_f16_entry", lq = 3, dk = 5, fuse = "mean", dtype = "f16", out_dtype = "bf16" }
