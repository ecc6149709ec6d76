-- tests/test_dtype.c: a kernel whose file holds widen_f16 and narrow_bf16 (the decode method)
return { name = "dt_f16_in", lq = 3, dk = 4, fuse = "none", dtype = "f16", out_dtype = "bf16" }
