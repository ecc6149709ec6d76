return {
  name = "std_causal_4096", heads = 8,
  lq = 4096, lk = 4096, dk = 64, dv = 64,
  fuse = "none",
  mask = "causal",
}
