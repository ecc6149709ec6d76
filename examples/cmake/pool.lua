-- The kernel examples/cmake and examples/meson build: the seed's fused
-- attention (lq tokens in, one vector per head out), small enough to build
-- fast. main.c takes lq on its command line, so a copy of this spec with
-- another lq can be checked too.
return {
  name = "consumer_pool",
  heads = 2,
  lq = 48, lk = 48, dk = 16, dv = 16,
  score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none",
}
