-- tests/test_dtype.c: as f16_in.lua with 17 queries (flash behind templates/storage.c's widening)
return { name = "dt_f16_flash", lq = 17, dk = 4, fuse = "none", dtype = "f16", out_dtype = "bf16" }
