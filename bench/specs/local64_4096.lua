return {
  name = "local64_4096", heads = 4,
  lq = 4096, lk = 4096, dk = 64, dv = 64,
  fuse = "none",
  mask = { kind = "local", radius = 64 },
}
