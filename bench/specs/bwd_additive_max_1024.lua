-- The backward of the additive score with fuse = "max" (y = Σ_j α_j v_j,
-- α_j = max_i P_ij; s = scale · v_aᵀ tanh(W_q q + W_k k), da = 64, weights
-- per head) at a small size: H=8 L=1024 D=64, softmax. BACKWARD=1
-- bench/ab/run.sh times it (W_q, W_k, v_a random, their gradients compared
-- too; docs/backward.md "The additive score on the tiles").
return { name = "bwd_additive_max_1024", heads = 8, lq = 1024, dk = 64, score = "additive", da = 64, fuse = "max",
  backward = true }
