-- The backward of the additive score (s = scale · v_aᵀ tanh(W_q q + W_k k),
-- width da = 64, weights per head) at a small size: H=8 L=1024 D=64, softmax,
-- lse recomputed (bench/ab's forward signature takes no lse). BACKWARD=1
-- bench/ab/run.sh times it (W_q, W_k, v_a random, their gradients compared
-- too; docs/backward.md "The additive score on the tiles").
return { name = "bwd_additive_1024", heads = 8, lq = 1024, dk = 64, score = "additive", da = 64, fuse = "none",
  backward = true }
