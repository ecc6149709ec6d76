-- The backward of a Gaussian local window (Luong's local-m, radius 128:
-- 257 keys a row, each weighted by G after the softmax), H=8 L=4096 D=64,
-- lse recomputed by the backward (no lse field: bench/ab takes the spec):
-- the register-blocked tiles against the plain loops (docs/backward.md,
-- "The Gaussian window"):
--   BACKWARD=1 bench/ab/run.sh bench/specs/bwd_gauss128_4096.lua OLD_REV
return { name = "bwd_gauss128_4096", heads = 8, lq = 4096, dk = 64, fuse = "none",
  mask = { kind = "local", radius = 128, gaussian = true }, backward = true }
