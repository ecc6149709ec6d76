-- The spec examples/embed/main.c embeds: the seed's fused attention (L tokens
-- in, one vector out) over 64 tokens of width 32, 4 heads.
return {
  name = "embed_pool",
  heads = 4,
  lq = 64, lk = 64, dk = 32, dv = 32,
  score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none",
}
