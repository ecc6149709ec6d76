-- Issue 39: a document mask for a packed batch, 8 documents of random
-- lengths summing to 16384 (run-time ids: the tensor's fill, 8 segments
-- drawn from seed 1, spec.tensor_data), H=8 D=64: at least 55% of the FMA
-- peak on the pairs the ids allow (spec.flops counts them on the same ids
-- heed bench passes the kernel), read by bench/report.lua.
return { name = "doc8_16384", heads = 8, lq = 16384, dk = 64, fuse = "none",
  tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = { kind = "segments", n = 8, seed = 1 } } },
  mask_mod = { kind = "document", ids = "ids" } }
