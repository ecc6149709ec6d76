-- The seed's fused attention over ViT patch tokens: 196 tokens in, one out.
return {
  name = "vit_pool",
  heads = 8,
  lq = 196, lk = 196, dk = 64, dv = 64,
  score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none",
}
