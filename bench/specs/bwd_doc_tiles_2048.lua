-- The backward of a document mask of run-time ids (8 documents of random
-- lengths summing to 2048, the spec's fill; H=8 D=64): the tiles' per-call
-- block table against the plain loops (bench/ab/run.sh with BACKWARD=1).
return { name = "bwd_doc_tiles_2048", heads = 8, lq = 2048, dk = 64, fuse = "none", backward = true,
  tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = { kind = "segments", n = 8, seed = 1 } } },
  mask_mod = { kind = "document", ids = "ids" } }
