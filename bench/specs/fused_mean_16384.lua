return {
  name = "fused_mean_16384", heads = 8,
  lq = 16384, lk = 16384, dk = 64, dv = 64,
  fuse = "mean",
}
