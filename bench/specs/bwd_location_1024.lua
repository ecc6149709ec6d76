-- The backward of the location score (S[i,:] = scale · W q_i, W per head,
-- lk x dk) at a small size: H=8 L=1024 D=64, softmax, lse recomputed
-- (bench/ab's forward signature takes no lse). BACKWARD=1 bench/ab/run.sh
-- times it (W random, dW compared too; docs/backward.md "The location score
-- on the tiles").
return { name = "bwd_location_1024", heads = 8, lq = 1024, dk = 64, score = "location", fuse = "none",
  backward = true }
