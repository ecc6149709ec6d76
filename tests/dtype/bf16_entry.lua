-- tests/test_dtype.c: a fused kernel whose entry point holds widen_bf16 and narrow_f16
return { name = "dt_bf16_entry", lq = 3, dk = 5, fuse = "mean", dtype = "bf16", out_dtype = "f16" }
