-- The backward of the location score with a run-time tensor: a per-head
-- bias [H][L][L] added by score_mod under causal (H=8 L=1024 D=64, lse
-- recomputed, W random, the bias the spec's fill). BACKWARD=1
-- bench/ab/run.sh times the tiles against main's plain loops
-- (docs/backward.md "The location score on the tiles").
return { name = "bwd_location_bias_1024", heads = 8, lq = 1024, dk = 64, score = "location", fuse = "none",
  mask = "causal", backward = true,
  tensors = { bias = { dtype = "f32", shape = { "heads", "lq", "lk" },
                       fill = { kind = "uniform", lo = -1, hi = 1, seed = 3 } } },
  score_mod = { kind = "bias", tensor = "bias", per_head = true } }
