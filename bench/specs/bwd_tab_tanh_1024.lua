-- The backward of a score_mod reading a run-time tensor through tanh,
-- s + tab[k % 7] · tanh(s), under causal (H=8 L=1024 D=64, lse recomputed,
-- tab the spec's fill). BACKWARD=1 bench/ab/run.sh times the tiles' vector
-- mod (vf_tgather, vf_tanh) against the scalar bt_mod (docs/backward.md
-- "mask_mod and score_mod").
return { name = "bwd_tab_tanh_1024", heads = 8, lq = 1024, dk = 64, fuse = "none", mask = "causal", backward = true,
  tensors = { tab = { dtype = "f32", shape = { 7 }, fill = { kind = "uniform", lo = -1, hi = 1, seed = 5 } } },
  score_mod = "s + tab[k % 7] * tanh(s)" }
