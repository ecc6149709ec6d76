-- tests/test_dtype.c: as bf16_in.lua with 17 queries (flash behind templates/storage.c's widening)
return { name = "dt_bf16_flash", lq = 17, dk = 4, fuse = "none", dtype = "bf16", out_dtype = "f16" }
