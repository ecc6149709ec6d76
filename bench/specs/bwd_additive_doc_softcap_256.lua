-- The backward of the additive score (da = 64, H=8 L=256 D=64, lse
-- recomputed) with both mods: a document mask of run-time ids (8 documents
-- of random lengths summing to 256, the spec's fill) and softcap 20 as
-- score_mod. BACKWARD=1 bench/ab/run.sh times the additive tiles' mods
-- against main's plain loops (docs/backward.md "The additive score on the
-- tiles").
return { name = "bwd_additive_doc_softcap_256", heads = 8, lq = 256, dk = 64, score = "additive", da = 64,
  fuse = "none", backward = true,
  tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = { kind = "segments", n = 8, seed = 1 } } },
  mask_mod = { kind = "document", ids = "ids" }, score_mod = { kind = "softcap", c = 20 } }
