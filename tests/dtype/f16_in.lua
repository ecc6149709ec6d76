-- tests/test_dtype.c: the decode method (lq 3, one head: it converts f16
-- as it loads and holds widen_f16 and narrow_bf16)
return { name = "dt_f16_in", lq = 3, dk = 5, fuse = "none", dtype = "f16", out_dtype = "bf16" }
