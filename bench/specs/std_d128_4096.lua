return {
  name = "std_d128_4096", heads = 8,
  lq = 4096, lk = 4096, dk = 128, dv = 128,
  fuse = "none",
}
