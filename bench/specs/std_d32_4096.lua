return {
  name = "std_d32_4096", heads = 8,
  lq = 4096, lk = 4096, dk = 32, dv = 32,
  fuse = "none",
}
