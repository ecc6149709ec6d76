-- tests/test_dtype.c: the decode method (lq 3, one head: it converts bf16
-- as it loads and holds widen_bf16 and narrow_f16)
return { name = "dt_bf16_in", lq = 3, dk = 5, fuse = "none", dtype = "bf16", out_dtype = "f16" }
