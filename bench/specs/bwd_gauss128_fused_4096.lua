-- The backward of a fused mean (the seeds' L→1 attention) over a Gaussian
-- local window (Luong's local-m, radius 128: 257 keys a row, each P
-- weighted by G after the softmax, α_j = (1/L) Σ_i P_ij G_ij), H=8 L=4096
-- D=64 (docs/backward.md, "The Gaussian window"):
--   BACKWARD=1 bench/ab/run.sh bench/specs/bwd_gauss128_fused_4096.lua OLD_REV
return { name = "bwd_gauss128_fused_4096", heads = 8, lq = 4096, dk = 64, fuse = "mean",
  mask = { kind = "local", radius = 128, gaussian = true }, backward = true }
