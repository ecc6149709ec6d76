-- tests/test_dtype.c: a kernel whose file holds widen_bf16 and narrow_f16 (the decode method)
return { name = "dt_bf16_in", lq = 3, dk = 4, fuse = "none", dtype = "bf16", out_dtype = "f16" }
