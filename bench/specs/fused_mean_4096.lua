return {
  name = "fused_mean_4096", heads = 8,
  lq = 4096, lk = 4096, dk = 64, dv = 64,
  fuse = "mean",
}
